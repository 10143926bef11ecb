"""Failures: a worker dies, the job is stopped, the master never comes."""

from __future__ import annotations

import os
import re
import signal
import textwrap
import time
from pathlib import Path

import pytest
from runtime_helpers import base_env, free_port, root_cause, task_env, wait_all

from paijob.common import contract, exitcodes, records

TORCH_LOG_LINE = re.compile(r"^[DIWEF]\d{4} \d\d:\d\d:\d\d", re.MULTILINE)  # glog-style W1123 ...

RAISES_BEFORE_JOINING = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist

    if os.environ["RANK"] == "1":
        with open(sys.argv[1], "w") as fh:
            fh.write(str(time.time()))
        raise ValueError("bad batch on purpose")
    # rank 0 waits for a peer that never joins: without paijob it would hang here
    dist.init_process_group("gloo")
    time.sleep(600)
    """
)


def test_one_worker_raises_and_both_nodes_exit_non_zero_within_15s(tmp_path: Path, start_task):
    script = tmp_path / "raises.py"
    script.write_text(RAISES_BEFORE_JOINING)
    stamp = tmp_path / "failed_at"
    port = free_port()
    args = ["train", "--nproc-per-node", "1", "--grace-period", "5", str(script), str(stamp)]
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    codes = wait_all(tasks, timeout=120)
    failed_at = float(stamp.read_text())
    for task, code in zip(tasks, codes, strict=True):
        assert code == 1, task.output  # a Python exception: the worker's own exit code
        assert task.ended_at is not None and task.ended_at - failed_at < 15, task.output
        # the root cause, on both nodes
        assert "worker rank 1 (node rank 1, local rank 0) failed with exit code 1" in task.output
        assert "ValueError: bad batch on purpose" in task.output
    assert "(on another node)" in tasks[0].output


SLEEPS = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a stubborn worker: needs SIGKILL
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.path.join(sys.argv[1], os.environ["LOCAL_RANK"]), "w") as fh:
        fh.write(f"{os.getpid()} {child.pid}")
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # zombies are dead
    except FileNotFoundError:
        return False


def test_sigterm_stops_every_worker_and_its_children_within_the_grace_period(
    tmp_path: Path, start_task
):
    script = tmp_path / "sleeps.py"
    script.write_text(SLEEPS)
    pids_dir = tmp_path / "pids"
    pids_dir.mkdir()
    task = start_task(
        ["train", "--nproc-per-node", "2", "--grace-period", "2", str(script), str(pids_dir)],
        base_env(),
    )
    deadline = time.time() + 90
    while len(list(pids_dir.iterdir())) < 2:
        assert task.poll() is None and time.time() < deadline, task.output
        time.sleep(0.1)
    time.sleep(0.3)
    pids = [int(p) for f in pids_dir.iterdir() for p in f.read_text().split()]
    assert all(_alive(pid) for pid in pids)
    sent = time.time()
    task.proc.send_signal(signal.SIGTERM)
    # the promise: every worker and child is gone when the grace period is over (SIGKILL then);
    # the launcher's own exit after that (interpreter and torch teardown) is CPU work that a
    # busy machine stretches, so it has the test's 30 s
    while [pid for pid in pids if _alive(pid)] and time.time() - sent < 30:
        time.sleep(0.05)
    stopped_after = time.time() - sent
    code = task.wait(timeout=30)
    assert code == exitcodes.from_signal(signal.SIGTERM) == 143, task.output
    assert not [pid for pid in pids if _alive(pid)], f"orphans left: {pids}"
    assert stopped_after < 2 + 3, f"workers stopped {stopped_after:.1f}s after SIGTERM (grace period 2s)"
    # the log ends with paijob saying the job was stopped, not with torch's logger
    assert task.output.rstrip().splitlines()[-1] == (
        "paijob-runtime: stopped: received SIGTERM, so node rank 0's 2 worker(s) stopped (the "
        "job was stopped, or the task preempted); exit 143"
    ), task.output
    assert "death signal" not in task.output


def test_master_that_never_comes_up_gives_a_clear_timeout(tmp_path: Path, start_task):
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('must not run')\n")
    env = task_env(free_port(), 1)
    started = time.time()
    task = start_task(["train", "--master-timeout", "1.5", str(script)], env)
    code = task.wait(timeout=60)
    assert code == exitcodes.INFRA_FAILURE, task.output
    assert time.time() - started < 30
    out = task.output
    assert "the master at 127.0.0.1:" in out and "(port label 'SynPort')" in out
    assert "did not accept connections within" in out
    assert "master task" in out and "firewall" in out and "--master-timeout" in out
    assert "must not run" not in out


def test_exit_codes_follow_the_worker_status():
    assert exitcodes.from_worker_status(0) == 0
    assert exitcodes.from_worker_status(3) == 3
    assert exitcodes.from_worker_status(-signal.SIGSEGV) == 139
    assert exitcodes.from_worker_status(-signal.SIGKILL) == 137
    assert exitcodes.describe_status(-signal.SIGSEGV) == "signal SIGSEGV"
    assert os.EX_OK == exitcodes.OK


JOINS_AND_WAITS = textwrap.dedent(
    """
    import os, sys, time
    import torch.distributed as dist

    dist.init_process_group("gloo")
    with open(os.path.join(sys.argv[1], os.environ["RANK"]), "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(600)
    """
)


def test_a_frozen_peer_is_declared_lost_and_both_nodes_exit_143(tmp_path: Path, start_task):
    script = tmp_path / "waits.py"
    script.write_text(JOINS_AND_WAITS)
    joined = tmp_path / "joined"
    joined.mkdir()
    port = free_port()
    args = ["train", "--nproc-per-node", "1", "--heartbeat-timeout", "3", "--grace-period", "3",
            str(script), str(joined)]
    master, peer = (start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1))
    deadline = time.time() + 90
    while len(list(joined.iterdir())) < 2:
        assert master.poll() is None and peer.poll() is None, master.output + peer.output
        assert time.time() < deadline
        time.sleep(0.1)
    workers = [int(f.read_text()) for f in joined.iterdir()]
    peer.proc.send_signal(signal.SIGSTOP)  # the node's agent stops answering, like a lost host
    frozen_at = time.time()
    try:
        assert master.wait(timeout=60) == exitcodes.INFRA_FAILURE, master.output
        assert master.ended_at is not None and master.ended_at - frozen_at < 15
        assert "node rank 1 (worker:1 at 127.0.0.1) stopped sending heartbeats" in master.output
    finally:
        peer.proc.send_signal(signal.SIGCONT)
    # the peer wakes up to a vanished store (node 0 hosted it) and stops too
    assert peer.wait(timeout=60) == exitcodes.INFRA_FAILURE, peer.output
    assert "node rank 0 (the master, rendezvous store at 127.0.0.1:" in peer.output
    assert "was lost" in peer.output and "frame #" not in peer.output  # one line, no C++ stack
    assert not [pid for pid in workers if _alive(pid)]


OVERRIDES_MASTER = textwrap.dedent(
    """
    import os, sys
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "localhost"  # the tutorial's lines
    os.environ["MASTER_PORT"] = sys.argv[1]
    dist.init_process_group("gloo", rank=int(os.environ["NODE_RANK"]), world_size=2)
    print("joined", flush=True)
    """
)


@pytest.mark.slow  # ~20 s of real jobs: the slow stage keeps the README's command under 10 min
def test_per_node_script_that_sets_its_own_master_port_is_a_configuration_error_on_both_nodes(
    tmp_path: Path, start_task
):
    script = tmp_path / "overrides.py"
    script.write_text(OVERRIDES_MASTER)
    port, own_port = free_port(), free_port()
    args = ["train", "--mode", "per-node", "--nproc-per-node", "1", str(script), str(own_port)]
    started = time.time()
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    codes = wait_all(tasks, timeout=120)
    took = max(t.ended_at or time.time() for t in tasks) - started
    assert codes == [exitcodes.CONFIG_ERROR] * 2, "\n".join(t.output for t in tasks)
    assert took < 60, f"took {took:.0f}s"
    for task in tasks:
        assert f"listens on port {own_port} but not on the rendezvous port {port}" in task.output
        assert "sets MASTER_ADDR/MASTER_PORT itself" in task.output
    assert "node rank 0 stopped the job" in tasks[1].output
    assert "joined" not in tasks[0].output


def test_the_port_watch_needs_a_listener_elsewhere_for_the_whole_confirm_time():
    from paijob.runtime.watch.node.portwatch import MasterPortWatch

    watch = MasterPortWatch(23456, port_label="SynPort", confirm=15)
    assert watch.judge([], now=0) is None  # still starting: nothing listens yet
    assert watch.judge([12355], now=1) is None
    assert watch.judge([], now=5) is None  # gone again: start over
    assert watch.judge([12355], now=6) is None
    assert watch.judge([12355], now=20) is None
    message = watch.judge([12355], now=21)
    assert message is not None and "port 12355 but not on the rendezvous port 23456" in message
    assert "(port label 'SynPort')" in message


FAILS_AFTER_THE_OTHER_FINISHED = textwrap.dedent(
    """
    import os, time
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if os.environ["RANK"] == "0":
        time.sleep(3)  # rank 1 is done by now, its node waiting in torch's exit barrier
        raise ValueError("late failure on purpose")
    """
)


@pytest.mark.slow
def test_a_node_whose_workers_finished_reports_a_later_failure_elsewhere(
    tmp_path: Path, start_task
):
    script = tmp_path / "late.py"
    script.write_text(FAILS_AFTER_THE_OTHER_FINISHED)
    port = free_port()
    args = ["train", "--nproc-per-node", "1", "--grace-period", "3", str(script)]
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    codes = wait_all(tasks, timeout=120)
    assert codes == [1, 1], tasks[0].output + tasks[1].output
    # not torch's 300 s barrier wait, nor success after it
    assert abs((tasks[1].ended_at or 0) - (tasks[0].ended_at or 0)) < 10
    assert "worker rank 0 (node rank 0, local rank 0) failed with exit code 1 (on another node)" in (
        tasks[1].output
    )
    assert "ValueError: late failure on purpose" in tasks[1].output


KNOCK_ON = textwrap.dedent(
    """
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if os.environ["RANK"] == "1":
        raise ValueError("bad batch on purpose")
    dist.all_reduce(torch.zeros(1))  # rank 0: its peer is gone, a knock-on error
    """
)


def test_a_failure_reads_as_its_cause_once_and_leaves_nothing_in_tmpdir(tmp_path: Path, start_task):
    script = tmp_path / "knock_on.py"
    script.write_text(KNOCK_ON)
    port = free_port()
    tmpdirs = [tmp_path / f"tmp{i}" for i in (0, 1)]
    tasks = []
    for i, tmpdir in enumerate(tmpdirs):
        tmpdir.mkdir()
        env = task_env(port, i)
        env["TMPDIR"] = str(tmpdir)
        tasks.append(start_task(["train", "--nproc-per-node", "1", "--grace-period", "3",
                                 str(script)], env, name=f"node{i}"))
    assert wait_all(tasks, timeout=120) == [1, 1], tasks[0].output + tasks[1].output
    cause, knock_on = tasks[1].output, tasks[0].output
    # the worker's traceback, prefixed once (torch's excepthook adds a second [rank1]:)
    assert "[rank1]: Traceback (most recent call last):" in cause
    assert "[rank1]: ValueError: bad batch on purpose" in cause
    assert "[rank1]: [rank1]:" not in cause
    # rank 0 died of its peer: stopped before its knock-on traceback could bury the cause
    assert "Connection closed by peer" not in knock_on and "[rank0]:" not in knock_on
    for task in tasks:
        assert not TORCH_LOG_LINE.search(task.output), task.output  # W... closing signal, E... failed
        assert "paijob-runtime: error: worker rank 1 (node rank 1, local rank 0) failed" in task.output
        *human, record = task.output.rstrip().splitlines()  # the human lines end with the cause, then its record
        assert human[-1].endswith("ValueError: bad batch on purpose")
        assert records.read_failure_line(record).error == "ValueError: bad batch on purpose"
    # the workers' output copies torch's tailer reads went with the run
    assert [list(tmpdir.iterdir()) for tmpdir in tmpdirs] == [[], []]


TRAINS_AND_WRITES_ITS_PID = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    with open(os.path.join(sys.argv[1], os.environ["RANK"]), "w") as fh:
        fh.write(str(os.getpid()))
    t = torch.zeros(10)
    while True:  # trains until a rank is killed
        dist.all_reduce(t)
        time.sleep(0.05)
    """
)


def test_a_rank_killed_from_outside_is_the_named_cause_on_both_nodes_within_seconds(tmp_path: Path, start_task):
    """Issue 53: a worker ended by a signal paijob-runtime did not send (the OOM killer, a user's kill -9) is a
    primary failure, named on every node at once, not a consequence waited on for the heartbeat timeout."""
    script = tmp_path / "trains.py"
    script.write_text(TRAINS_AND_WRITES_ITS_PID)
    pids = tmp_path / "pids"
    pids.mkdir()
    port = free_port()
    args = ["train", "--nproc-per-node", "2", "--grace-period", "3", "--heartbeat-timeout", "60", str(script),
            str(pids)]
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    deadline = time.monotonic() + 120
    while len(list(pids.iterdir())) < 4 and time.monotonic() < deadline:
        assert all(t.poll() is None for t in tasks), "\n".join(t.output for t in tasks)
        time.sleep(0.1)
    time.sleep(1.0)  # training: a few all_reduces done
    killed_at = time.time()
    os.kill(int((pids / "3").read_text()), signal.SIGKILL)
    codes = wait_all(tasks, timeout=60)
    for task, code in zip(tasks, codes, strict=True):
        assert code == exitcodes.from_worker_status(-signal.SIGKILL), task.output
        assert task.ended_at is not None and task.ended_at - killed_at < 15, task.output  # not the 60 s timeout
        cause = root_cause(task.output)
        assert cause is not None and cause.startswith("worker rank 3 (node rank 1, local rank 1) failed with "
                                                      "signal SIGKILL"), task.output
        assert "killed by SIGKILL from outside paijob-runtime (the OOM killer?" in cause, task.output


TRAINS_AND_READS_ITS_ENVIRONMENT = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    with open(f"/proc/{os.getpid()}/environ", "rb") as handle:  # what the job's own code can read
        names = sorted(item.split(b"=", 1)[0].decode() for item in handle.read().split(b"\\0") if b"=" in item)
    with open(os.path.join(sys.argv[1], os.environ["RANK"]), "w") as fh:
        fh.write(" ".join(names))
    t = torch.zeros(10)
    end = time.time() + float(sys.argv[2])
    while True:
        t.fill_(1.0 if time.time() >= end else 0.0)
        dist.all_reduce(t)
        if t[0].item() > 0:
            break
        time.sleep(0.05)
    print(f"rank {dist.get_rank()} done", flush=True)
    """
)


@pytest.mark.slow
def test_a_strangers_writes_into_the_jobs_store_change_nothing(tmp_path: Path, start_task):
    """Issue 55: the rendezvous store answers anyone who reaches node 0's port. A stranger's forged failure, a
    deep value under the hang watch's key and a bumped request for stacks change no verdict, no cause and no
    exit code of a healthy job; the per-job node key and the cluster's record files are in no worker's
    environment."""
    from datetime import timedelta

    from torch.distributed import PrefixStore, TCPStore

    from paijob.runtime.failure import Failure

    script = tmp_path / "trains.py"
    script.write_text(TRAINS_AND_READS_ITS_ENVIRONMENT)
    seen = tmp_path / "environ"
    seen.mkdir()
    port = free_port()
    args = ["train", "--nproc-per-node", "2", "--grace-period", "3", str(script), str(seen), "8"]
    secret = {contract.NODE_KEY: "ab" * 32, contract.SLOW_FILE: str(tmp_path / "slow.json"),
              contract.STALL_FILE: str(tmp_path / "stall.json"), contract.RECORD_KEY: "cd" * 16}
    tasks = [start_task(args, {**task_env(port, i), **secret}, name=f"node{i}") for i in (0, 1)]
    deadline = time.monotonic() + 120
    while len(list(seen.iterdir())) < 4 and time.monotonic() < deadline:
        assert all(t.poll() is None for t in tasks), "\n".join(t.output for t in tasks)
        time.sleep(0.1)
    stranger = PrefixStore("tester~runtime", TCPStore("127.0.0.1", port, is_master=False,
                                                      timeout=timedelta(seconds=10), wait_for_workers=False))
    forged = Failure(node_rank=1, rank=3, local_rank=1, returncode=1, secondary=False, time=time.time(),
                     error="MemoryError: FORGED BY A STRANGER")
    stranger.set("paijob/failure/1", forged.to_json())
    stranger.add("paijob/failures", 1)
    stranger.set("paijob/progress/1", "[" * 50_000)
    for _ in range(5):
        stranger.add("paijob/stacks/wanted", 1)
    codes = wait_all(tasks, timeout=120)
    for task, code in zip(tasks, codes, strict=True):
        assert code == 0, task.output
        assert "FORGED" not in task.output and "stacks asked for" not in task.output, task.output
    for rank in range(4):
        names = (seen / str(rank)).read_text().split()
        assert not set(secret) & set(names), names
