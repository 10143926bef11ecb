"""Runs one local-cluster job: OpenPAI's life cycle of its attempts, as a state machine.

One ``JobRunner`` thread per job drives OpenPAI's life cycle: WAITING ->
RUNNING -> SUCCEEDED / FAILED / STOPPED, with the completion rules
(``minFailedInstances``, ``minSucceededInstances``), ``taskRetryCount`` (when
gang allocation is off) and ``jobRetryCount`` as new attempts, and the exit
codes openpai-runtime reports. What it decides is done to processes by
:class:`paijob.local.processes.TaskProcesses` (every task of every role as its
own process tree); what it needs from the cluster that owns it is
:class:`paijob.local.processes.JobHost`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from paijob.common import contract
from paijob.local import diagnostics, faults
from paijob.local.processes import JobHost, Task, TaskProcesses
from paijob.local.settings import unlimited_retry_cap
from paijob.local.store import Store, now_ms
from paijob.local.tasklog import log_tail
from paijob.openpai import exitspec
from paijob.openpai.model import Job

log = logging.getLogger(__name__)

POLL = 0.05
# What OpenPAI reports when a node runs out of disk (kubelet evicts the pod); the local cluster does not retry it.
DISK_FULL_CODE = -1000


def unlimited_retry_notice(code: int, what: str, retries: int) -> str:
    return (f"exit code {code} ({exitspec.spec_for(code).phrase}) is transient: OpenPAI would retry this {what} "
            f"without limit, even with {'jobRetryCount' if what == 'job' else 'taskRetryCount'} 0; the local "
            f"cluster stopped after {retries} such retries ({contract.LOCAL_UNLIMITED_RETRY_CAP})")


def retry_note(code: int, what: str, decision: exitspec.RetryDecision) -> str:
    phrase = exitspec.spec_for(code).phrase
    if decision.unlimited:
        return (f"retrying the {what} after exit code {code} ({phrase}): OpenPAI retries it without limit; "
                f"the local cluster stops after {unlimited_retry_cap()} such retries "
                f"({contract.LOCAL_UNLIMITED_RETRY_CAP})")
    return f"retrying the {what} after exit code {code} ({phrase}), as OpenPAI does up to its retry count"


@dataclass
class _Counts:
    """Tasks of each role (by name) that ended failed / succeeded in the current attempt."""

    failed: dict[str, int]
    succeeded: dict[str, int]


class JobRunner(threading.Thread):
    """One job, attempt after attempt, until it ends; ``tasks`` are the current attempt's."""

    def __init__(self, cluster: JobHost, username: str, name: str, job: Job) -> None:
        super().__init__(name=f"job-{username}~{name}", daemon=True)
        self.cluster = cluster
        self.store: Store = cluster.store
        self.username = username
        self.name_ = name
        self.job_id = f"{username}~{name}"
        self.job = job  # the job model, parsed once at submit
        self.processes = TaskProcesses(cluster, username, name, job)
        self.stop_requested = threading.Event()
        self.stop_reason = "stopped by the user"
        self.tasks: list[Task] = []
        self._accountable_retries = 0  # job retries counted against jobRetryCount
        self._unlimited_retries = 0  # job retries OpenPAI would not limit
        self._task_retries: dict[tuple[str, int], tuple[int, int]] = {}  # (counted, unlimited) per task
        self.attempt_id = 0  # the job attempt being run

    def request_stop(self, reason: str = "stopped by the user") -> None:
        self.stop_reason = reason
        self.stop_requested.set()

    def run(self) -> None:
        try:
            self._run()
        except Exception as error:  # a fault of the machine or a bug of the runner: the job still ends, saying why
            if faults.is_disk_full(error):
                log.error("job %s: %s", self.job_id, faults.reason(error))
            else:
                log.exception("job %s: runner crashed", self.job_id)
            self._end_by_fault(error)
        finally:
            self.cluster.forget(self.job_id)

    def _end_by_fault(self, error: Exception) -> None:
        """Kill every task, then end the job FAILED with the fault as its diagnostics (STOPPED, saying the
        fault too, when a stop was asked for); the store keeps that end even when the disk is full."""
        reason = faults.reason(error)
        try:
            self.processes.end(self.tasks)
        except Exception:  # noqa: BLE001 - the job must end even if its tasks could not all be found
            log.exception("job %s: could not stop every task", self.job_id)
        fields: dict[str, Any] = {"trigger_message": reason}
        if self.stop_requested.is_set():
            state, diagnostics = "STOPPED", f"{self.stop_reason} ({reason})"
            fields.update(app_exit_code=exitspec.STOP_REQUESTED_CODE, execution_type="STOP")
        else:
            state, diagnostics = "FAILED", reason
            if faults.is_disk_full(error):
                fields["app_exit_code"] = DISK_FULL_CODE
        try:
            self.store.end_job(self.username, self.name_, self.attempt_id, state, diagnostics, **fields)
        except Exception:  # noqa: BLE001 - not a disk that is full (that end is kept): say it, at least
            log.exception("job %s: could not record its end (%s)", self.job_id, diagnostics)

    def _run(self) -> None:
        attempt = 0
        while True:
            try:
                state = self._run_attempt(attempt)
            finally:
                self.processes.release_ports()
            last = self.store.attempt(self.username, self.name_, attempt) or {}
            notice = self._job_retry(state, last.get("exit_code"))
            if notice is None:
                attempt += 1
                continue
            job = self.store.job(self.username, self.name_) or {}
            diagnostics = last.get("diagnostics") or job.get("diagnostics") or ""
            if notice:
                diagnostics = f"{diagnostics}; {notice}" if diagnostics else notice
            self.store.end_job(
                self.username, self.name_, attempt, state, diagnostics,
                app_exit_code=last.get("exit_code"), trigger_message=last.get("trigger_message"),
                trigger_role=last.get("trigger_role"), trigger_index=last.get("trigger_index"),
            )
            return

    def _job_retry(self, state: str, code: int | None) -> str | None:
        """None: run another job attempt (OpenPAI's retry policy); else the job ends, with this notice."""
        if state != "FAILED" or code is None or self.stop_requested.is_set():
            return ""
        decision = exitspec.retry_decision(code, self._accountable_retries, self.job.job_retry_count)
        if not decision.retry:
            return ""
        if decision.unlimited:
            if self._unlimited_retries >= unlimited_retry_cap():
                return unlimited_retry_notice(code, "job", self._unlimited_retries)
            self._unlimited_retries += 1
        if decision.counted:
            self._accountable_retries += 1
        self.processes.notes.append(retry_note(code, "job", decision))
        return None

    # ------------------------------------------------------------------ one attempt

    def _run_attempt(self, attempt: int) -> str:
        """One job attempt from start to its final state (OpenPAI's attempt completion rules)."""
        u, n = self.username, self.name_
        self.attempt_id = attempt
        self.store.upsert_attempt(u, n, attempt, state="WAITING")
        self.store.update_job(u, n, sub_state="AttemptPreparing", attempt_id=attempt, retries=attempt)
        if self.stop_requested.is_set():
            return self._end_attempt(attempt, "STOPPED", None, self.stop_reason, exitspec.STOP_REQUESTED_CODE)
        self._launch(attempt)
        counts = _Counts({r.name: 0 for r in self.job.roles}, {r.name: 0 for r in self.job.roles})
        while True:
            if self.stop_requested.is_set():
                self._set_job(state="STOPPING", sub_state="AttemptDeletionPending")
                self._stop_running(exitspec.STOP_REQUESTED_CODE)
                return self._end_attempt(attempt, "STOPPED", None, self.stop_reason, exitspec.STOP_REQUESTED_CODE)
            self.processes.no_log_fault(self.tasks)
            ended = self._settle_exits(attempt, counts)
            if ended is not None:
                return ended
            if all(t.state != "RUNNING" for t in self.tasks):
                last = max(self.tasks, key=lambda t: t.code or 0)
                return self._end_attempt(attempt, "SUCCEEDED", last, "All Tasks are completed", 0)
            time.sleep(POLL)

    def _settle_exits(self, attempt: int, counts: _Counts) -> str | None:
        """Each task that exited since the last look: retried, or counted; the attempt's final state once decided."""
        for i, task in enumerate(list(self.tasks)):
            raw = self.processes.exited(task)
            if raw is None:
                continue
            self.processes.finish(task, "SUCCEEDED" if raw == 0 else "FAILED", raw)
            if raw != 0:
                self.processes.no_full_disk(task, raw)
            code = self._report_exit(task, raw)
            if self._task_retry(task, code):
                self.tasks[i] = self.processes.retry(task)
                continue
            ended = self._completion(attempt, task, code, counts)
            if ended is not None:
                return ended
        return None

    def _launch(self, attempt: int) -> None:
        """Every task of the attempt placed (ports, GPUs), then started; the attempt is RUNNING."""
        self._task_retries = {}
        self.tasks = self.processes.place(attempt)
        for task in self.tasks:
            if self.stop_requested.is_set():  # stopped while its tasks are placed: the rest never start
                return
            self.processes.start(task)
        self.store.upsert_attempt(self.username, self.name_, attempt, state="RUNNING", launched_time=now_ms())
        fields: dict[str, Any] = {"state": "RUNNING", "sub_state": "AttemptRunning"}
        if attempt == 0:
            fields["launched_time"] = now_ms()
        self.store.update_job(self.username, self.name_, **fields)

    def _completion(self, attempt: int, task: Task, code: int, counts: _Counts) -> str | None:
        """frameworkcontroller's completion policy after ``task`` ended: the attempt's final state, or None."""
        role = task.role
        if code != 0:
            counts.failed[role.name] += 1
            if role.completion.failed_enough(counts.failed[role.name]):
                self._stop_running(exitspec.ATTEMPT_COMPLETION_CODE)
                message = (f"{counts.failed[role.name]} task(s) of role {role.name} failed "
                           f"(minFailedInstances {role.completion.min_failed}); {task.key} exited with code {code} "
                           f"({exitspec.spec_for(code).phrase})")
                return self._end_attempt(attempt, "FAILED", task, message, code)
            return None
        counts.succeeded[role.name] += 1
        if role.completion.succeeded_enough(counts.succeeded[role.name]):
            self._stop_running(exitspec.ATTEMPT_COMPLETION_CODE)
            message = (f"{counts.succeeded[role.name]} task(s) of role {role.name} succeeded "
                       f"(minSucceededInstances {role.completion.min_succeeded})")
            return self._end_attempt(attempt, "SUCCEEDED", task, message, 0)
        return None

    # ------------------------------------------------------------------ OpenPAI's exit and retry rules

    def _report_exit(self, task: Task, raw: int) -> int:
        """The container exit code openpai-runtime reports (exit spec patterns over the task's log);
        the task's diagnostics say the script's own error (paijob-runtime's root cause) and both codes."""
        if task.init_failed:  # the runtime's own init failed: no user command, no exit-spec mapping
            return raw
        tail = log_tail(task.log_dir / "all")
        result = exitspec.container_exit(raw, tail)
        task.cause = diagnostics.root_cause(tail, task.record_key) if raw != 0 else None
        notes = [task.cause.describe()] if task.cause else []
        if result.code != raw:
            task.code = result.code
            notes.append(f"user command exited with {raw}; OpenPAI reports {result.code} "
                         f"({result.spec.phrase})" + (f", matched {result.matched!r}" if result.matched else ""))
        if notes:
            record = json.dumps(task.cause.as_json()) if task.cause else None
            self.store.update_task(self.username, self.name_, task.job_attempt, task.role.name, task.index,
                                   task.attempt, exit_code=result.code, diagnostics="; ".join(notes),
                                   root_cause=record)
        return result.code

    def _task_retry(self, task: Task, code: int) -> bool:
        """frameworkcontroller's task retry policy (only with gang allocation off, else taskRetryCount is 0)."""
        if code == 0 or self.job.gang_allocation:
            return False
        key = (task.role.name, task.index)
        counted, unlimited = self._task_retries.get(key, (0, 0))
        decision = exitspec.retry_decision(code, counted, task.role.task_retry_count)
        if not decision.retry:
            return False
        if decision.unlimited:
            if unlimited >= unlimited_retry_cap():
                self.store.update_task(self.username, self.name_, task.job_attempt, task.role.name, task.index,
                                       task.attempt, diagnostics=unlimited_retry_notice(code, "task", unlimited))
                return False
            unlimited += 1
        self._task_retries[key] = (counted + decision.counted, unlimited)
        self.processes.notes.append(retry_note(code, f"task {task.key}", decision))
        return True

    def _stop_running(self, code: int) -> None:
        """Stop every running task; frameworkcontroller records them with ``code`` (-210 stop, -220 completion)."""
        running = [t for t in self.tasks if t.state == "RUNNING"]
        self.processes.kill(running, "STOPPED")
        for task in running:
            task.code = code
            self.store.update_task(self.username, self.name_, task.job_attempt, task.role.name, task.index,
                                   task.attempt, exit_code=code)
        for task in self.tasks:
            if task.state == "WAITING":  # never started (a stop while the attempt was placing its tasks)
                task.state, task.code = "STOPPED", code
                self.store.update_task(self.username, self.name_, task.job_attempt, task.role.name, task.index,
                                       task.attempt, state="STOPPED", exit_code=code, completed_time=now_ms())

    def _set_job(self, **fields: Any) -> None:
        self.store.update_job(self.username, self.name_, **fields)

    def _end_attempt(self, attempt: int, state: str, trigger: Task | None, message: str, code: int | None) -> str:
        cause = trigger.cause if trigger is not None and state == "FAILED" else None
        self.store.upsert_attempt(
            self.username, self.name_, attempt, state=state, completed_time=now_ms(), exit_code=code,
            trigger_message=message, trigger_role=trigger.role.name if trigger else None,
            trigger_index=trigger.index if trigger else None,
            diagnostics=f"{message}: {cause.describe()}" if cause else message,
        )
        if state == "FAILED" and code is not None and not self.stop_requested.is_set():
            decision = exitspec.retry_decision(code, self._accountable_retries, self.job.job_retry_count)
            if decision.retry:
                why = (f"exit code {code} ({exitspec.spec_for(code).phrase}) is "
                       f"{'retried without limit by OpenPAI' if not decision.counted else 'retried up to jobRetryCount'}")
                self._set_job(sub_state="AttemptCompleted",
                              diagnostics=f"attempt {attempt}: {message}; {why}; retrying")
        return state

