"""Runs local-cluster jobs: every task of every role as its own process tree.

One ``JobRunner`` thread per job drives OpenPAI's life cycle: WAITING ->
RUNNING -> SUCCEEDED / FAILED / STOPPED, with the completion rules
(``minFailedInstances``, ``minSucceededInstances``), ``taskRetryCount`` (when
gang allocation is off) and ``jobRetryCount`` as new attempts. A task is
``bash -o errexit -o nounset -o pipefail -c "<commands>"`` in its own session,
tracked by ``tracking`` (a cgroup per task where possible, else its process
tree and a marker variable) so that every process it leaves behind (even one
that called setsid) is found and killed: SIGTERM, a grace period, then SIGKILL. Like a container, a task's leftover processes die when
its main process ends.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from paijob.local import capacity, diagnostics, faults, storage
from paijob.local.plan import Ports, task_env, task_script
from paijob.local.settings import openpai_before_1_6, stop_grace, unlimited_retry_cap
from paijob.local.store import Store, now_ms
from paijob.local.tracking import TASK_MARKER
from paijob.openpai import exitspec
from paijob.openpai.model import Job, TaskRole
from paijob.openpai.names import init_role_failure, role_name_breaks_init, role_name_fix
from paijob.outputs import local_output_dir
from paijob.task import contract
from paijob.task.ports import Reservation, reserve

if TYPE_CHECKING:
    from paijob.local.engine import LocalCluster

log = logging.getLogger(__name__)

MARKER = TASK_MARKER
JOB_MARKER = contract.LOCAL_JOB
PROGRESS_NAME = ".paijob-progress.json"  # in a task's work folder (contract.PROGRESS_FILE)
POLL = 0.05
# What OpenPAI reports when a node runs out of disk (kubelet evicts the pod); the local cluster does not retry it.
DISK_FULL_CODE = -1000
# Server-side variables a task must not inherit from whoever started the server.
_SCRUB = ("PAI_TOKEN", "PAI_CLUSTER_URL", "PAI_USER", contract.LOCAL_TOKEN)




def _log_tail(path: Path) -> str:
    """The end of a task's combined log, as much as openpai-runtime searches for exit patterns."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - exitspec.MAX_SEARCH_LOG_BYTES))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    # the local cluster's own notes are not the user's output (OpenPAI keeps its runtime log apart)
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("[paijob local]"))


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


def exit_code(returncode: int) -> int:
    """Popen's ``-N`` for a signal becomes the container convention ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


# --------------------------------------------------------------------------- tasks


@dataclass
class Task:
    role: TaskRole
    index: int
    attempt: int  # task attempt
    job_attempt: int
    uid: str
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    readers: list[threading.Thread] = field(default_factory=list)
    state: str = "WAITING"
    code: int | None = None
    cause: str | None = None  # the script's own error, as paijob-runtime reported it
    sink: _LogSink | None = None
    init_failed: bool = False  # OpenPAI's init container failed: its exit code is reported as is

    @property
    def key(self) -> str:
        return f"{self.role.name}/{self.index}"


def _private_file(path: str, flags: int) -> int:
    """``open`` opener: a new file is 0600 whatever the umask (task logs may print secrets)."""
    return os.open(path, flags, 0o600)


class _LogSink:
    """Writes a task's stdout / stderr to their own files and to the interleaved ``all``.

    Beside each, ``NAME.times`` gets ``OFFSET UNIXTIME`` for every chunk as it
    arrives, before the chunk itself: ``paijob logs --timestamps`` stamps each
    line with when the task wrote it, not when paijob read it.

    A write that fails (a full disk) is kept as ``fault`` for the runner, which
    ends the job; the pipes are still drained, so the task never blocks on them.
    """

    def __init__(self, log_dir: Path) -> None:
        log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        names = ("stdout", "stderr", "all")
        self.files = {name: open(log_dir / name, "ab", buffering=0, opener=_private_file) for name in names}
        self.times = {name: open(log_dir / f"{name}.times", "ab", buffering=0, opener=_private_file) for name in names}
        self.sizes = {name: os.fstat(handle.fileno()).st_size for name, handle in self.files.items()}
        self.lock = threading.Lock()
        self.fault: OSError | None = None

    def write(self, stream: str, data: bytes) -> None:
        with self.lock:
            stamp = f"{time.time():.3f}"
            for name in (stream, "all"):
                self.times[name].write(f"{self.sizes[name]} {stamp}\n".encode())
                self.files[name].write(data)
                self.sizes[name] += len(data)

    def pump(self, stream: str, pipe: IO[bytes]) -> None:
        read = getattr(pipe, "read1", pipe.read)  # whatever is there: progress bars need no newline
        try:
            for chunk in iter(lambda: read(65536), b""):
                if self.fault is not None:
                    continue
                try:
                    self.write(stream, chunk)
                except OSError as error:
                    self.fault = error
        finally:
            pipe.close()

    def close(self) -> None:
        for handle in (*self.files.values(), *self.times.values()):
            handle.close()


@dataclass
class _Counts:
    """Tasks of each role (by name) that ended failed / succeeded in the current attempt."""

    failed: dict[str, int]
    succeeded: dict[str, int]


# --------------------------------------------------------------------------- runner


class JobRunner(threading.Thread):
    def __init__(self, cluster: LocalCluster, username: str, name: str, job: Job) -> None:
        super().__init__(name=f"job-{username}~{name}", daemon=True)
        self.cluster = cluster
        self.store: Store = cluster.store
        self.username = username
        self.name_ = name
        self.job_id = f"{username}~{name}"
        self.plan = job  # the job model, parsed once at submit
        self.stop_requested = threading.Event()
        self.stop_reason = "stopped by the user"
        self.tasks: list[Task] = []
        self._announced_image = False
        self._accountable_retries = 0  # job retries counted against jobRetryCount
        self._unlimited_retries = 0  # job retries OpenPAI would not limit
        self._placed: set[tuple[str, int]] = set()  # tasks of this attempt that have been started
        self._task_retries: dict[tuple[str, int], tuple[int, int]] = {}  # (counted, unlimited) per task
        self._notes: list[str] = []  # written at the top of the next task's log
        self.attempt_id = 0  # the job attempt being run
        self._held_ports: list[Reservation] = []  # drawn for tasks not started yet (paijob.task.ports)

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
            live = [t for t in self.tasks if t.proc is not None and t.state == "RUNNING"]
            procs = [t.proc for t in live if t.proc is not None]
            self.cluster.tracker.end([t.uid for t in live], [p.pid for p in procs], stop_grace(), waiters=procs)
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
                self._release_ports()
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
        decision = exitspec.retry_decision(code, self._accountable_retries, self.plan.job_retry_count)
        if not decision.retry:
            return ""
        if decision.unlimited:
            if self._unlimited_retries >= unlimited_retry_cap():
                return unlimited_retry_notice(code, "job", self._unlimited_retries)
            self._unlimited_retries += 1
        if decision.counted:
            self._accountable_retries += 1
        self._notes.append(retry_note(code, "job", decision))
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
        ports, gpus = self._launch(attempt)
        counts = _Counts({r.name: 0 for r in self.plan.roles}, {r.name: 0 for r in self.plan.roles})
        while True:
            if self.stop_requested.is_set():
                self._set_job(state="STOPPING", sub_state="AttemptDeletionPending")
                self._stop_running(exitspec.STOP_REQUESTED_CODE)
                return self._end_attempt(attempt, "STOPPED", None, self.stop_reason, exitspec.STOP_REQUESTED_CODE)
            self._no_log_fault()
            ended = self._settle_exits(attempt, ports, gpus, counts)
            if ended is not None:
                return ended
            if all(t.state != "RUNNING" for t in self.tasks):
                last = max(self.tasks, key=lambda t: t.code or 0)
                return self._end_attempt(attempt, "SUCCEEDED", last, "All Tasks are completed", 0)
            time.sleep(POLL)

    def _no_log_fault(self) -> None:
        """A task whose log cannot be written is a fault of this machine, not of the job."""
        for task in self.tasks:
            if task.sink is not None and task.sink.fault is not None:
                raise faults.MachineFault(f"writing the log of task {task.key}", task.sink.fault)

    def _settle_exits(self, attempt: int, ports: Ports, gpus: dict[tuple[str, int], str | None],
                      counts: _Counts) -> str | None:
        """Each task that exited since the last look: retried, or counted; the attempt's final state once decided."""
        for i, task in enumerate(list(self.tasks)):
            raw = self._exited(task)
            if raw is None:
                continue
            self._finish(task, "SUCCEEDED" if raw == 0 else "FAILED", raw)
            if raw != 0:
                self._no_full_disk(task, raw)
            code = self._report_exit(task, raw)
            if self._task_retry(task, code):
                # fresh ports: the task may have failed because one of its own was taken (exit 253, 143)
                self._draw_ports([(task.role, task.index)], ports)
                retry = self._new_task(attempt, task.role, task.index, task.attempt + 1, ports, gpus)
                self.tasks[i] = retry
                self._start(retry, attempt, ports, gpus)
                continue
            ended = self._completion(attempt, task, code, counts)
            if ended is not None:
                return ended
        return None

    def _launch(self, attempt: int) -> tuple[Ports, dict[tuple[str, int], str | None]]:
        """Ports and GPUs for every task of the attempt, then every task started; the attempt is RUNNING.

        Every task sees every task's ports (OpenPAI's runtime env), so the attempt's ports are
        drawn together, held until their own task starts. A new attempt draws new ones.
        """
        ports: Ports = {}
        self._draw_ports([(role, index) for role in self.plan.roles for index in range(role.instances)], ports)
        gpus = self.cluster.allocate_gpus(self.plan)
        self._placed = set()
        self._task_retries = {}
        self.tasks = [self._new_task(attempt, role, index, 0, ports, gpus)
                      for role in self.plan.roles for index in range(role.instances)]
        for task in self.tasks:
            if self.stop_requested.is_set():  # stopped while its tasks are placed: the rest never start
                return ports, gpus
            self._start(task, attempt, ports, gpus)
        self.store.upsert_attempt(self.username, self.name_, attempt, state="RUNNING", launched_time=now_ms())
        fields: dict[str, Any] = {"state": "RUNNING", "sub_state": "AttemptRunning"}
        if attempt == 0:
            fields["launched_time"] = now_ms()
        self.store.update_job(self.username, self.name_, **fields)
        return ports, gpus

    def _no_full_disk(self, task: Task, raw: int) -> None:
        """A task that failed while its folder's or its log's disk is full ends the job: a retry cannot fit."""
        for where in (self.cluster.work_dir(self.job_id, task.job_attempt, task.role.name, task.index), task.log_dir):
            if faults.full_disk_at(where):
                raise faults.MachineFault(f"task {task.key} exited with code {raw}; no space is left for {where}",
                                          disk_full=True)

    def _draw_ports(self, tasks: list[tuple[TaskRole, int]], ports: Ports) -> None:
        """New ports for ``tasks`` into ``ports``, from outside the kernel's ephemeral range and none
        of the attempt's others (``paijob.task.ports``), held until ``_start`` hands them to their task."""
        taken = {number for by_index in ports.values() for labels in by_index.values()
                 for numbers in labels.values() for number in numbers}
        reservation = reserve(sum(sum(role.resources.all_ports.values()) for role, _ in tasks), taken=taken)
        self._held_ports.append(reservation)
        numbers = iter(reservation.ports)
        for role, index in tasks:
            ports.setdefault(role.name, {})[index] = {label: [next(numbers) for _ in range(count)]
                                                      for label, count in role.resources.all_ports.items()}

    def _release_ports(self, numbers: list[int] | None = None) -> None:
        """Stop holding ``numbers`` (every held port when None)."""
        for reservation in self._held_ports:
            reservation.release(numbers)
        if numbers is None:
            self._held_ports = []

    @staticmethod
    def _exited(task: Task) -> int | None:
        """A running task's exit code once it has ended (None: still running, or not running at all)."""
        if task.state != "RUNNING":
            return None
        if task.proc is None:  # could not even be started
            return task.code if task.code is not None else 127
        if task.proc.poll() is None:
            return None
        return exit_code(task.proc.returncode)

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
        tail = _log_tail(task.log_dir / "all")
        result = exitspec.container_exit(raw, tail)
        task.cause = diagnostics.root_cause(tail) if raw != 0 else None
        notes = [task.cause] if task.cause else []
        if result.code != raw:
            task.code = result.code
            notes.append(f"user command exited with {raw}; OpenPAI reports {result.code} "
                         f"({result.spec.phrase})" + (f", matched {result.matched!r}" if result.matched else ""))
        if notes:
            self.store.update_task(self.username, self.name_, task.job_attempt, task.role.name, task.index,
                                   task.attempt, exit_code=result.code, diagnostics="; ".join(notes))
        return result.code

    def _task_retry(self, task: Task, code: int) -> bool:
        """frameworkcontroller's task retry policy (only with gang allocation off, else taskRetryCount is 0)."""
        if code == 0 or self.plan.gang_allocation:
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
        self._notes.append(retry_note(code, f"task {task.key}", decision))
        return True

    def _stop_running(self, code: int) -> None:
        """Stop every running task; frameworkcontroller records them with ``code`` (-210 stop, -220 completion)."""
        running = [t for t in self.tasks if t.state == "RUNNING"]
        self._kill(running, "STOPPED")
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
            diagnostics=f"{message}: {cause}" if cause else message,
        )
        if state == "FAILED" and code is not None and not self.stop_requested.is_set():
            decision = exitspec.retry_decision(code, self._accountable_retries, self.plan.job_retry_count)
            if decision.retry:
                why = (f"exit code {code} ({exitspec.spec_for(code).phrase}) is "
                       f"{'retried without limit by OpenPAI' if not decision.counted else 'retried up to jobRetryCount'}")
                self._set_job(sub_state="AttemptCompleted",
                              diagnostics=f"attempt {attempt}: {message}; {why}; retrying")
        return state

    def _new_task(self, attempt: int, role: TaskRole, index: int, task_attempt: int,
                  ports: Ports, gpus: dict[tuple[str, int], str | None]) -> Task:
        uid = str(uuid.uuid4())
        log_dir = self.cluster.log_dir(self.job_id, attempt, role.name, index, task_attempt)
        self.store.insert_task(self.username, self.name_, attempt, role.name, index, task_attempt, uid,
                               ports[role.name][index], gpus.get((role.name, index)), str(log_dir))
        return Task(role=role, index=index, attempt=task_attempt, job_attempt=attempt, uid=uid, log_dir=log_dir)

    def _start(self, task: Task, attempt: int, ports: Ports, gpus: dict[tuple[str, int], str | None]) -> None:
        env, workdir = self._process_env(task, attempt, ports, gpus)
        sink = task.sink = _LogSink(task.log_dir)
        self._write_notes(task, sink)
        if role_name_breaks_init(task.role.name) and not openpai_before_1_6():
            task.init_failed = True
            self._fail_unstarted(task, attempt, sink, 1, init_role_failure(task.role.name),
                                 f"; {role_name_fix(task.role.name, contract.OPENPAI_BEFORE_1_6)}")
            return
        script = task_script(self.plan, task.role)
        self._release_ports([n for numbers in ports[task.role.name][task.index].values() for n in numbers])
        try:
            proc = subprocess.Popen(
                self.cluster.tracker.wrap(task.uid, ["bash", "-o", "errexit", "-o", "nounset", "-o", "pipefail",
                                                     "-c", script]),
                cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
            )
        except OSError as error:
            # the run loop ends it like a task that exited 127
            self._fail_unstarted(task, attempt, sink, 127, f"cannot start the task: {error}")
            return
        task.proc = proc
        task.state = "RUNNING"
        self.cluster.tracker.started(task.uid, proc.pid)
        assert proc.stdout is not None and proc.stderr is not None
        task.readers = [
            threading.Thread(target=sink.pump, args=("stdout", proc.stdout), daemon=True),
            threading.Thread(target=sink.pump, args=("stderr", proc.stderr), daemon=True),
        ]
        for reader in task.readers:
            reader.start()
        closer = threading.Thread(target=self._close_sink_when_done, args=(task, sink), daemon=True)
        closer.start()
        self.store.update_task(self.username, self.name_, attempt, task.role.name, task.index, task.attempt,
                               state="RUNNING", launched_time=now_ms(), pid=proc.pid)

    def _process_env(self, task: Task, attempt: int, ports: Ports,
                     gpus: dict[tuple[str, int], str | None]) -> tuple[dict[str, str], Path]:
        """The task process's environment (OpenPAI's variables, its GPU, its own /tmp) and its working folder."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PAI_") and k not in _SCRUB}
        env.update(self._task_env(task, attempt, ports))
        python_bin = str(Path(sys.executable).parent)
        env["PATH"] = python_bin + os.pathsep + env.get("PATH", os.defpath)
        env[MARKER] = task.uid
        env[JOB_MARKER] = self.cluster.tracker.job_marker(self.job_id)
        gpu = gpus.get((task.role.name, task.index))
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
            env["NVIDIA_VISIBLE_DEVICES"] = gpu or "none"
        workdir = self.cluster.work_dir(self.job_id, attempt, task.role.name, task.index)
        workdir.mkdir(parents=True, exist_ok=True)
        # A container's /tmp is its own: what the task leaves there (torch's inductor cache, the
        # elastic agent's files, the user's scratch) stays with the job and goes with `local prune`.
        private_tmp = workdir / ".tmp"
        private_tmp.mkdir(exist_ok=True)
        env["TMPDIR"] = str(private_tmp)
        output = local_output_dir(self.cluster.state_dir, self.job_id)  # shared, kept across attempts
        output.mkdir(parents=True, exist_ok=True)
        env[contract.OUTPUT_DIR] = str(output)
        env[contract.STORAGE_MOUNT] = str(storage.mount_root(self.cluster.state_dir))  # the job's /mnt
        storage.folder(self.cluster.state_dir).mkdir(parents=True, exist_ok=True)
        env[contract.PROGRESS_FILE] = str(workdir / PROGRESS_NAME)  # node 0's hang watch: a stall
        return env, workdir

    def _write_notes(self, task: Task, sink: _LogSink) -> None:
        """Notes at the top of a task's stderr: why it is a retry, where the local cluster differs from OpenPAI."""
        for note in self._notes:
            sink.write("stderr", f"[paijob local] {note}\n".encode())
        self._notes.clear()
        if not self._announced_image:
            self._announced_image = True
            self._write_local_differences(task, sink)

    def _write_local_differences(self, task: Task, sink: _LogSink) -> None:
        """Once per job: images are not pulled, what this machine lacks, settings that do not take effect."""
        note = (f"[paijob local] docker images are not pulled: role {task.role.name} asks for "
                f"'{self.plan.image_uri(task.role)}'; commands run in this Python environment ({sys.executable})\n")
        sink.write("stderr", note.encode())
        asked = [(r.instances, r.resources.gpu, r.resources.cpu, r.resources.memory_mb) for r in self.plan.roles]
        for line in capacity.warnings(asked, capacity.this_machine(len(self.cluster.gpus))):
            sink.write("stderr", f"[paijob local] warning: {line}\n".encode())
        if self.plan.gang_allocation and any(r.raw.get("taskRetryCount") for r in self.plan.roles):
            sink.write("stderr", b"[paijob local] taskRetryCount only takes effect with "
                                 b"extras.gangAllocation: false (as on OpenPAI); ignored\n")

    def _fail_unstarted(self, task: Task, attempt: int, sink: _LogSink, code: int, message: str,
                        hint: str = "") -> None:
        """A task that could not start: the run loop ends it as if it had exited with ``code``."""
        sink.write("stderr", f"[paijob local] {message}{hint}\n".encode())
        sink.close()
        task.state, task.code = "RUNNING", code
        self.store.update_task(self.username, self.name_, attempt, task.role.name, task.index, task.attempt,
                               diagnostics=message)

    def _task_env(self, task: Task, attempt: int, ports: Ports) -> dict[str, str]:
        """OpenPAI's variables for this task. Gang allocation off: tasks are placed one by one in
        job order, so a task sees the host IPs of the tasks started before it (and its own)."""
        self._placed.add((task.role.name, task.index))
        workdir = self.cluster.work_dir(self.job_id, attempt, task.role.name, task.index)
        return task_env(self.plan, self.username, task.role.name, task.index, ports,
                        placed=None if self.plan.gang_allocation else set(self._placed),
                        job_attempt=attempt, task_attempt=task.attempt, pod_uid=task.uid, work_dir=str(workdir))

    @staticmethod
    def _close_sink_when_done(task: Task, sink: _LogSink) -> None:
        for reader in task.readers:
            reader.join()
        sink.close()

    def _finish(self, task: Task, state: str, code: int | None) -> None:
        # like a container: when the main process ends, whatever it left behind dies too
        if task.proc is not None:
            self.cluster.tracker.end([task.uid], [], grace=0.5)
            for reader in task.readers:
                reader.join(timeout=5)
        task.state, task.code = state, code
        self.store.update_task(self.username, self.name_, task.job_attempt, task.role.name, task.index, task.attempt,
                               state=state, exit_code=code, completed_time=now_ms())

    def _kill(self, tasks: list[Task], state: str) -> None:
        """Stop the given running tasks (all at once): SIGTERM, grace, SIGKILL."""
        live = [t for t in tasks if t.proc is not None and t.state == "RUNNING"]
        if not live:
            return
        procs = [t.proc for t in live if t.proc is not None]
        self.cluster.tracker.end([t.uid for t in live], [p.pid for p in procs], stop_grace(), waiters=procs)
        for task in live:
            assert task.proc is not None
            code = task.proc.poll()
            self._finish(task, state, exit_code(code) if code is not None else None)
