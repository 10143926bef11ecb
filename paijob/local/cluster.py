"""The local cluster's engine: its job store, one runner thread per active job, this machine's GPUs.

``LocalCluster`` is what the HTTP app (:mod:`paijob.local.server`) drives: it refuses a
job this machine could never host, stores and starts the others (each job's life cycle
is :class:`paijob.local.runner.JobRunner`), stops them in any state, and on start ends
what a server that died left behind.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

from paijob.common import records
from paijob.local import capacity, layout, tasktmp
from paijob.local.jobmodels import JobModels
from paijob.local.processes import RESTARTS_NAME, SLOW_NAME, STALL_NAME
from paijob.local.runner import JobRunner
from paijob.local.store import Store
from paijob.local.tracking import Tracker, record_secret
from paijob.openpai import exitspec
from paijob.openpai.jobstate import is_terminal
from paijob.openpai.model import Job

log = logging.getLogger("paijob.local.runner")


def detect_gpus() -> list[str]:
    """GPU ids to share out: ``CUDA_VISIBLE_DEVICES`` when set, else ``nvidia-smi -L``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


# --------------------------------------------------------------------------- processes


class CannotHost(Exception):
    """A job asks for more than the local cluster can ever give it; ``lines`` say what and how much."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


class LocalCluster:
    """The local cluster's engine: job store + one runner thread per active job."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.store = Store(layout.database(state_dir))
        self.gpus = detect_gpus()
        self._gpu_next = 0
        self._lock = threading.Lock()
        self.runners: dict[str, JobRunner] = {}
        self.tracker = Tracker(state_dir)
        self.models = JobModels()  # every stored job parsed once, for the REST views
        self._record_secret: bytes | None = None  # read (made once) on first use: record_key
        self._recover()
        tasktmp.sweep(layout.work(state_dir))  # short TMPDIR links a server that died left (none of it runs now)

    def log_dir(self, job_id: str, attempt: int, role: str, index: int, task_attempt: int) -> Path:
        return layout.task_logs(self.state_dir, job_id, attempt, role, index, task_attempt)

    def work_dir(self, job_id: str, attempt: int, role: str, index: int) -> Path:
        return layout.task_work(self.state_dir, job_id, attempt, role, index)

    def record_key(self, job_id: str, attempt: int, role: str, index: int) -> str:
        """The key this task's paijob-runtime signs its records with (``contract.RECORD_KEY``): made from the
        state dir's record secret, so the server checks them whenever it reads them, after a restart too."""
        if self._record_secret is None:
            self._record_secret = record_secret(self.state_dir).encode()
        task = f"{job_id}\0{attempt}\0{role}\0{index}".encode()
        return hmac.new(self._record_secret, task, hashlib.sha256).hexdigest()[:32]

    def stall(self, job_id: str, attempt: int, plan: Job) -> dict[str, Any] | None:
        """paijob-runtime's stall record of a running job (no progress for N s on rank R), as data, when
        one of its tasks wrote one in the last 15 s; None otherwise. Only the job's own task folders are
        looked in: a job cannot make this walk thousands it made."""
        for role in plan.roles:
            for index in range(role.instances):
                path = self.work_dir(job_id, attempt, role.name, index) / STALL_NAME
                key = self.record_key(job_id, attempt, role.name, index)
                found = records.read_stall(path, key=key)  # bounded, in the runtime's own form, signed by it
                if found:
                    return found.as_json()
        return None

    def slow_rank(self, job_id: str, attempt: int, plan: Job, *, running: bool) -> dict[str, Any] | None:
        """paijob-runtime's slow-rank verdict for the job (the rank the others wait for, every rank's
        figures): while it runs, the latest said in the last minutes; once it ended, the run's worst.
        None: none. Only the job's own task folders are looked in, each file read bounded."""
        for role in plan.roles:
            for index in range(role.instances):
                path = self.work_dir(job_id, attempt, role.name, index) / SLOW_NAME
                found = records.read_slow(path, running=running, key=self.record_key(job_id, attempt, role.name, index))
                if found:
                    return found.as_json()
        return None

    def restarts(self, job_id: str, attempt: int, plan: Job) -> list[dict[str, Any]]:
        """paijob-runtime's restarts of the attempt's workers (``--max-restarts``: which, after what, how long),
        as node 0 kept them; [] when none. Only the job's own task folders are looked in, each file read bounded
        and believed only signed with its task's key."""
        for role in plan.roles:
            for index in range(role.instances):
                path = self.work_dir(job_id, attempt, role.name, index) / RESTARTS_NAME
                found = records.read_restarts(path, key=self.record_key(job_id, attempt, role.name, index))
                if found:
                    return [record.as_json() for record in found]
        return []

    def allocate_gpus(self, plan: Job) -> dict[tuple[str, int], str | None]:
        """role/index -> CUDA_VISIBLE_DEVICES (None: leave the variable alone; no GPUs here)."""
        if not self.gpus:
            return {}
        out: dict[tuple[str, int], str | None] = {}
        with self._lock:
            for role in plan.roles:
                for index in range(role.instances):
                    ids = []
                    for _ in range(min(role.resources.gpu, len(self.gpus))):
                        ids.append(self.gpus[self._gpu_next % len(self.gpus)])
                        self._gpu_next += 1
                    out[(role.name, index)] = ",".join(ids)
        return out

    def refusals(self, job: Job) -> list[str]:
        """Why this machine can never run ``job`` (empty: it can), each a line for the user."""
        asks = [capacity.Ask(role.name, role.instances, role.resources.gpu, role.resources.cpu,
                             role.resources.memory_mb, sum(role.resources.all_ports.values()))
                for role in job.roles]
        return [f"the local cluster cannot host {line}"
                for line in capacity.refusals(asks, capacity.this_machine(len(self.gpus)))]

    def submit(self, username: str, name: str, job: Job, config_text: str) -> None:
        """Store the job and start its runner; ``job`` is its model, parsed once from ``config_text``.
        ``CannotHost`` when this machine could never run it."""
        refused = self.refusals(job)
        if refused:
            raise CannotHost(refused)
        self.store.insert_job(username, name, config_text, (job.total_gpu, job.total_tasks, len(job.roles)))
        self.models.remember(f"{username}~{name}", config_text, job)
        runner = JobRunner(self, username, name, job)
        with self._lock:
            self.runners[runner.job_id] = runner
        try:
            runner.start()
        except RuntimeError as error:  # no thread to be had: the job ends at once rather than WAITING forever
            self.forget(runner.job_id)
            self.store.end_job(username, name, 0, "FAILED", f"local cluster error: cannot run the job: {error}")

    def stop(self, username: str, name: str) -> bool:
        """Stop a job that has not ended; it takes effect even when the disk is full (the stop is kept in
        memory). False, and nothing changed, for a job that already ended (rest-server refuses to stop one)."""
        job_id = f"{username}~{name}"
        with self._lock:
            runner = self.runners.get(job_id)
        if runner is None:
            ended = self.store.job(username, name)
            if ended is None or is_terminal(ended["state"]):
                return False
        if runner is not None:
            runner.request_stop()  # first: the runner ends the job whether or not the next line can be written
        try:
            self.store.update_job(username, name, execution_type="STOP")
        except OSError as error:
            log.warning("job %s: the stop is not recorded yet (%s); it takes effect all the same", job_id, error)
        if runner is not None:
            return True
        job = self.store.job(username, name)
        if job and not is_terminal(job["state"]):  # no runner: nothing runs, the job only needs its end
            self.store.end_job(username, name, job["attempt_id"], "STOPPED", "stopped by the user",
                               app_exit_code=exitspec.STOP_REQUESTED_CODE, execution_type="STOP")
        return True

    def forget(self, job_id: str) -> None:
        with self._lock:
            self.runners.pop(job_id, None)

    def shutdown(self, reason: str = "the local cluster was shut down", timeout: float = 30) -> None:
        with self._lock:
            runners = list(self.runners.values())
        for runner in runners:
            runner.request_stop(reason)
        for runner in runners:
            runner.join(timeout=timeout)
        if not any(runner.is_alive() for runner in runners):  # no task runs: none of their short TMPDIR links
            tasktmp.sweep(layout.work(self.state_dir))  # is needed (a task stopped as the server went kept its)
        self.tracker.close()

    def _recover(self) -> None:
        """Jobs left active by a server that died: kill what remains of them, then end them."""
        for job in self.store.active_jobs():
            # task uids are uuid4s: they name this cluster's tasks and nothing else
            tasks = self.store.tasks(job["username"], job["name"], job["attempt_id"])
            self.tracker.end_leftovers([t["uid"] for t in tasks if t["state"] in ("WAITING", "RUNNING")])
            state = "STOPPED" if job["execution_type"] == "STOP" else "FAILED"
            message = "the local cluster server ended while this job ran"
            self.store.end_job(job["username"], job["name"], job["attempt_id"], state, message, trigger_message=message,
                               **({"app_exit_code": exitspec.STOP_REQUESTED_CODE} if state == "STOPPED" else {}))

