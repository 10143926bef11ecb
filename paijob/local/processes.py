"""The processes of one local job's tasks: placed, started, reaped and killed.

The runner (:mod:`paijob.local.runner`) decides what happens to a job (OpenPAI's
attempts, completion and retry rules); ``TaskProcesses`` does it to processes. A
task is ``bash -o errexit -o nounset -o pipefail -c "<commands>"`` in its own
session, tracked by ``tracking`` (a cgroup per task where possible, else its
process tree and a marker variable) so that every process it leaves behind
(even one that called setsid) is found and killed: SIGTERM, a grace period,
then SIGKILL. Like a container, a task's leftover processes die when its main
process ends.

``JobHost`` is what a job needs from the cluster that runs it, as a
``Protocol``: the engine imports the runner, and nothing here imports the engine.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from paijob.common import contract
from paijob.common.ports import Reservation, reserve
from paijob.common.records import FailureRecord
from paijob.local import capacity, faults, layout, mounts, tasktmp
from paijob.local.settings import openpai_before_1_6, passed_env, stop_grace
from paijob.local.store import Store, now_ms
from paijob.local.tasklog import LogSink
from paijob.local.taskspec import Ports, inherited_env, split_env, task_env, task_script
from paijob.local.tracking import TASK_MARKER, Tracker
from paijob.openpai.model import Job, TaskRole
from paijob.openpai.names import init_role_failure, role_name_breaks_init, role_name_fix

MARKER = TASK_MARKER
JOB_MARKER = contract.LOCAL_JOB
STALL_NAME = ".paijob-stall.json"  # in a task's work folder (contract.STALL_FILE)
SLOW_NAME = ".paijob-slow.json"  # in a task's work folder (contract.SLOW_FILE)
RESTARTS_NAME = ".paijob-restarts.json"  # in a task's work folder (contract.RESTARTS_FILE)

Gpus = dict[tuple[str, int], str | None]  # role/index -> CUDA_VISIBLE_DEVICES (None: leave it alone)


class JobHost(Protocol):
    """What a job's runner and its processes need from the cluster that runs them (``LocalCluster``)."""

    @property
    def store(self) -> Store: ...

    @property
    def tracker(self) -> Tracker: ...

    @property
    def state_dir(self) -> Path: ...

    @property
    def gpus(self) -> list[str]: ...

    def log_dir(self, job_id: str, attempt: int, role: str, index: int, task_attempt: int) -> Path: ...

    def work_dir(self, job_id: str, attempt: int, role: str, index: int) -> Path: ...

    def record_key(self, job_id: str, attempt: int, role: str, index: int) -> str: ...

    def allocate_gpus(self, plan: Job) -> Gpus: ...

    def forget(self, job_id: str) -> None: ...


def exit_code(returncode: int) -> int:
    """Popen's ``-N`` for a signal becomes the container convention ``128 + N``."""
    return 128 - returncode if returncode < 0 else returncode


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
    cause: FailureRecord | None = None  # the script's own error, as paijob-runtime recorded it
    # signs paijob-runtime's record in this task's log (contract.RECORD_KEY): what a worker prints is not it
    record_key: str = field(default_factory=lambda: secrets.token_hex(16))
    sink: LogSink | None = None
    init_failed: bool = False  # OpenPAI's init container failed: its exit code is reported as is
    tmp_folder: Path | None = None  # the short folder whose link is the task's TMPDIR (``tasktmp``)

    @property
    def key(self) -> str:
        return f"{self.role.name}/{self.index}"


class TaskProcesses:
    """One job's task processes, attempt by attempt: their ports, GPUs, environment, logs and ends.

    ``notes`` are written at the top of the next task's log (why it is a retry).
    """

    def __init__(self, host: JobHost, username: str, name: str, job: Job) -> None:
        self.host = host
        self.store = host.store
        self.username = username
        self.name_ = name
        self.job_id = f"{username}~{name}"
        self.job = job
        self.notes: list[str] = []
        self.attempt = 0  # the job attempt whose tasks these are
        self.ports: Ports = {}
        self.gpus: Gpus = {}
        self._announced_image = False
        self._placed: set[tuple[str, int]] = set()  # tasks of this attempt that have been started
        self._held_ports: list[Reservation] = []  # drawn for tasks not started yet (paijob.common.ports)
        # the job's node key (contract.NODE_KEY): what its tasks' paijob-runtimes sign in the job's store,
        # as the job's own secret does on OpenPAI; no other job and no other user holds it
        self.node_key = secrets.token_hex(32)

    # ------------------------------------------------------------------ placing

    def place(self, attempt: int) -> list[Task]:
        """Ports and GPUs for every task of ``attempt``, and each task's row (WAITING); none started yet.

        Every task sees every task's ports (OpenPAI's runtime env), so the attempt's ports are
        drawn together, held until their own task starts. A new attempt draws new ones.
        """
        self.attempt = attempt
        self.ports = {}
        self._draw_ports([(role, index) for role in self.job.roles for index in range(role.instances)])
        self.gpus = self.host.allocate_gpus(self.job)
        self._placed = set()
        return [self._new_task(role, index, 0) for role in self.job.roles for index in range(role.instances)]

    def retry(self, task: Task) -> Task:
        """A new attempt of ``task``, started."""
        # fresh ports: the task may have failed because one of its own was taken (exit 253, 143)
        self._draw_ports([(task.role, task.index)])
        retry = self._new_task(task.role, task.index, task.attempt + 1)
        self.start(retry)
        return retry

    def _draw_ports(self, tasks: list[tuple[TaskRole, int]]) -> None:
        """New ports for ``tasks`` into ``self.ports``, from outside the kernel's ephemeral range and none
        of the attempt's others (``paijob.common.ports``), held until ``start`` hands them to their task."""
        ports = self.ports
        taken = {number for by_index in ports.values() for labels in by_index.values()
                 for numbers in labels.values() for number in numbers}
        reservation = reserve(sum(sum(role.resources.all_ports.values()) for role, _ in tasks), taken=taken)
        self._held_ports.append(reservation)
        numbers = iter(reservation.ports)
        for role, index in tasks:
            ports.setdefault(role.name, {})[index] = {label: [next(numbers) for _ in range(count)]
                                                      for label, count in role.resources.all_ports.items()}

    def release_ports(self, numbers: list[int] | None = None) -> None:
        """Stop holding ``numbers`` (every held port when None)."""
        for reservation in self._held_ports:
            reservation.release(numbers)
        if numbers is None:
            self._held_ports = []

    def _new_task(self, role: TaskRole, index: int, task_attempt: int) -> Task:
        attempt = self.attempt
        uid = str(uuid.uuid4())
        log_dir = self.host.log_dir(self.job_id, attempt, role.name, index, task_attempt)
        self.store.insert_task(self.username, self.name_, attempt, role.name, index, task_attempt, uid,
                               self.ports[role.name][index], self.gpus.get((role.name, index)), str(log_dir))
        return Task(role=role, index=index, attempt=task_attempt, job_attempt=attempt, uid=uid, log_dir=log_dir,
                    record_key=self.host.record_key(self.job_id, attempt, role.name, index))

    # ------------------------------------------------------------------ starting

    def start(self, task: Task) -> None:
        attempt = self.attempt
        env, workdir = self._process_env(task)
        sink = task.sink = LogSink(task.log_dir)
        self._write_notes(task, sink)
        if task.tmp_folder is None and len(os.fsencode(env["TMPDIR"])) > tasktmp.SOCKET_ROOM:
            sink.write("stderr", b"[paijob local] warning: no short folder for TMPDIR (/tmp, /var/tmp and /dev/shm are "
                                 b"not usable): Unix sockets under it may not fit in 107 bytes (a DataLoader with "
                                 b"workers fails with 'AF_UNIX path too long'); use a shorter state dir\n")
        if role_name_breaks_init(task.role.name) and not openpai_before_1_6():
            task.init_failed = True
            self._fail_unstarted(task, sink, 1, init_role_failure(task.role.name),
                                 f"; {role_name_fix(task.role.name, contract.OPENPAI_BEFORE_1_6)}")
            return
        script = task_script(self.job, task.role)
        self.release_ports([n for numbers in self.ports[task.role.name][task.index].values() for n in numbers])
        try:
            proc = subprocess.Popen(
                self.host.tracker.wrap(task.uid, ["bash", "-o", "errexit", "-o", "nounset", "-o", "pipefail",
                                                  "-c", script]),
                cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
            )
        except OSError as error:
            # the run loop ends it like a task that exited 127
            self._fail_unstarted(task, sink, 127, f"cannot start the task: {error}")
            return
        task.proc = proc
        task.state = "RUNNING"
        self.host.tracker.started(task.uid, proc.pid)
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

    def _process_env(self, task: Task) -> tuple[dict[str, str], Path]:
        """The task process's environment (OpenPAI's variables, its GPU, its own /tmp) and its working folder."""
        # no PAI_*, no token, password, key or connection string of the shell that started it (unless passed)
        env = inherited_env(os.environ, passed_env())
        env.update(self._task_env(task))
        python_bin = str(Path(sys.executable).parent)
        env["PATH"] = python_bin + os.pathsep + env.get("PATH", os.defpath)
        env[MARKER] = task.uid
        env[JOB_MARKER] = self.host.tracker.job_marker(self.job_id)
        gpu = self.gpus.get((task.role.name, task.index))
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
            env["NVIDIA_VISIBLE_DEVICES"] = gpu or "none"
        workdir = self.host.work_dir(self.job_id, self.attempt, task.role.name, task.index)
        workdir.mkdir(parents=True, exist_ok=True)
        # A container's /tmp is its own: what the task leaves there (torch's inductor cache, the
        # elastic agent's files, the user's scratch) stays with the job and goes with `local prune`;
        # TMPDIR names it by a short link, so Unix sockets under it fit in 107 bytes (``tasktmp``).
        tasktmp.remove(task.tmp_folder)
        env["TMPDIR"], task.tmp_folder = tasktmp.short(workdir / ".tmp")
        output = layout.output(self.host.state_dir, self.job_id)  # shared, kept across attempts
        output.mkdir(parents=True, exist_ok=True)
        env[contract.OUTPUT_DIR] = str(output)
        mount_root = layout.task_mounts(self.host.state_dir, self.job_id, self.attempt, task.role.name, task.index)
        env[contract.STORAGE_MOUNT] = str(mounts.mount_all(self.host.state_dir, mount_root, self.job.raw,
                                                           self.username))  # the task's /mnt: what its job mounts
        env[contract.STALL_FILE] = str(workdir / STALL_NAME)  # node 0's hang watch: a stall
        env[contract.SLOW_FILE] = str(workdir / SLOW_NAME)  # node 0's slow-rank doctor: its verdict
        env[contract.RESTARTS_FILE] = str(workdir / RESTARTS_NAME)  # node 0: the attempt's restarts
        env[contract.RECORD_KEY] = task.record_key
        env[contract.NODE_KEY] = self.node_key
        return env, workdir

    def _task_env(self, task: Task) -> dict[str, str]:
        """OpenPAI's variables for this task. Gang allocation off: tasks are placed one by one in
        job order, so a task sees the host IPs of the tasks started before it (and its own)."""
        attempt = self.attempt
        self._placed.add((task.role.name, task.index))
        workdir = self.host.work_dir(self.job_id, attempt, task.role.name, task.index)
        return task_env(self.job, self.username, task.role.name, task.index, self.ports,
                        placed=None if self.job.gang_allocation else set(self._placed),
                        job_attempt=attempt, task_attempt=task.attempt, pod_uid=task.uid, work_dir=str(workdir))

    def _write_notes(self, task: Task, sink: LogSink) -> None:
        """Notes at the top of a task's stderr: why it is a retry, where the local cluster differs from OpenPAI."""
        for note in self.notes:
            sink.write("stderr", f"[paijob local] {note}\n".encode())
        self.notes.clear()
        if not self._announced_image:
            self._announced_image = True
            self._write_local_differences(task, sink)

    def _write_local_differences(self, task: Task, sink: LogSink) -> None:
        """Once per job: images are not pulled, what this machine lacks, settings that do not take effect."""
        note = (f"[paijob local] docker images are not pulled: role {task.role.name} asks for "
                f"'{self.job.image_uri(task.role)}'; commands run in this Python environment ({sys.executable})\n")
        sink.write("stderr", note.encode())
        dropped = split_env(os.environ, passed_env())[1]
        if dropped:  # names only: never a value
            shown = ", ".join(dropped[:10]) + (f" and {len(dropped) - 10} more" if len(dropped) > 10 else "")
            sink.write("stderr", f"[paijob local] not passed to the tasks, as they look like credentials: {shown} "
                                 "(a job that needs one sets it in its env, from an OpenPAI secret, or start the "
                                 f"cluster with {contract.LOCAL_PASS_ENV}=NAME)\n".encode())
        asked = [(r.instances, r.resources.gpu, r.resources.cpu, r.resources.memory_mb) for r in self.job.roles]
        for line in capacity.warnings(asked, capacity.this_machine(len(self.host.gpus))):
            sink.write("stderr", f"[paijob local] warning: {line}\n".encode())
        for line in mounts.unreachable(self.job.raw, self.username):
            sink.write("stderr", f"[paijob local] {line}\n".encode())
        if self.job.gang_allocation and any(r.raw.get("taskRetryCount") for r in self.job.roles):
            sink.write("stderr", b"[paijob local] taskRetryCount only takes effect with "
                                 b"extras.gangAllocation: false (as on OpenPAI); ignored\n")

    def _fail_unstarted(self, task: Task, sink: LogSink, code: int, message: str, hint: str = "") -> None:
        """A task that could not start: the run loop ends it as if it had exited with ``code``."""
        tasktmp.remove(task.tmp_folder)
        task.tmp_folder = None
        sink.write("stderr", f"[paijob local] {message}{hint}\n".encode())
        sink.close()
        task.state, task.code = "RUNNING", code
        self.store.update_task(self.username, self.name_, self.attempt, task.role.name, task.index, task.attempt,
                               diagnostics=message)

    @staticmethod
    def _close_sink_when_done(task: Task, sink: LogSink) -> None:
        for reader in task.readers:
            reader.join()
        sink.close()

    # ------------------------------------------------------------------ watching

    @staticmethod
    def exited(task: Task) -> int | None:
        """A running task's exit code once it has ended (None: still running, or not running at all)."""
        if task.state != "RUNNING":
            return None
        if task.proc is None:  # could not even be started
            return task.code if task.code is not None else 127
        if task.proc.poll() is None:
            return None
        return exit_code(task.proc.returncode)

    @staticmethod
    def no_log_fault(tasks: list[Task]) -> None:
        """A task whose log cannot be written is a fault of this machine, not of the job."""
        for task in tasks:
            if task.sink is not None and task.sink.fault is not None:
                raise faults.MachineFault(f"writing the log of task {task.key}", task.sink.fault)

    def no_full_disk(self, task: Task, raw: int) -> None:
        """A task that failed while its folder's or its log's disk is full ends the job: a retry cannot fit."""
        for where in (self.host.work_dir(self.job_id, task.job_attempt, task.role.name, task.index), task.log_dir):
            if faults.full_disk_at(where):
                raise faults.MachineFault(f"task {task.key} exited with code {raw}; no space is left for {where}",
                                          disk_full=True)

    # ------------------------------------------------------------------ ending

    def finish(self, task: Task, state: str, code: int | None) -> None:
        """Record ``task`` ended as ``state`` with ``code``; like a container, when its main process has
        ended, whatever it left behind dies too."""
        if task.proc is not None:
            self.host.tracker.end([task.uid], [], grace=0.5)
            for reader in task.readers:
                reader.join(timeout=5)
        tasktmp.remove(task.tmp_folder)  # its processes are gone: its short TMPDIR link goes too
        task.tmp_folder = None
        task.state, task.code = state, code
        self.store.update_task(self.username, self.name_, task.job_attempt, task.role.name, task.index, task.attempt,
                               state=state, exit_code=code, completed_time=now_ms())

    def end(self, tasks: list[Task]) -> list[Task]:
        """SIGTERM, the grace period, SIGKILL to those of ``tasks`` that run, all at once; the tasks it
        ended. Records nothing: the runner's last resort calls it when the store itself may fail."""
        live = [t for t in tasks if t.proc is not None and t.state == "RUNNING"]
        if live:
            procs = [t.proc for t in live if t.proc is not None]
            self.host.tracker.end([t.uid for t in live], [p.pid for p in procs], stop_grace(), waiters=procs)
        for task in live:
            tasktmp.remove(task.tmp_folder)
            task.tmp_folder = None
        return live

    def kill(self, tasks: list[Task], state: str) -> None:
        """Stop the given running tasks (all at once): SIGTERM, grace, SIGKILL; each recorded as ``state``."""
        for task in self.end(tasks):
            assert task.proc is not None
            code = task.proc.poll()
            self.finish(task, state, exit_code(code) if code is not None else None)
