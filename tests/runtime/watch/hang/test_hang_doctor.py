"""The hang watch: a stuck rank is found, named with its file:line, and the job ends with exit 124.

The verdict's rules are pinned on plain data in test_verdict.py; the five hangs of issue 26 run as real
2-node gloo jobs on loopback (slow stage), one of them also in the everyday suite on one node.
"""

from __future__ import annotations

import gc
import re
import shutil
import signal
import sys
import textwrap
import threading
import time
import weakref
from pathlib import Path
from types import SimpleNamespace

import pytest
from hang_programs import HANGS, SLEEPS_BEFORE_ALL_REDUCE
from runtime_helpers import (
    base_env,
    free_port,
    has_gloo_flight_recorder,
    root_cause,
    task_env,
    wait_all,
)

from paijob.common import exitcodes
from paijob.common.options import build_parsers
from paijob.runtime.cli import hang_settings
from paijob.runtime.config import HangSettings, LaunchError
from paijob.runtime.failure import Failure
from paijob.runtime.watch.node.eyes import process_ended
from paijob.runtime.watch.node.storelink import VERDICT_KEY, StoreLink
from paijob.runtime.watch.worker import process
from paijob.runtime.watch.worker.process import collectives_issued
from paijob.runtime.watch.worker.sampler import Sampler
from paijob.runtime.watch.worker.spawn import child_rank

C10D = "/venv/site-packages/torch/distributed/distributed_c10d.py"
SETTINGS = HangSettings(timeout=20, first_timeout=60, hard_limit=3)


def stacks_of(output: str, cwd: Path) -> str:
    """The stacks file a verdict names (``every rank's full stack: PATH``), read and removed; it is
    never in the working directory (the user's checkout)."""
    found = re.findall(r"every rank's full stack: (\S+)", output)
    assert found, output
    path = Path(found[-1])
    assert not (cwd / "paijob-stacks.txt").exists() and cwd not in path.parents
    text = path.read_text()
    if path.parent.name.startswith("paijob-stacks-"):
        shutil.rmtree(path.parent)
    return text


def test_hang_limits_come_from_the_option_else_the_environment_else_the_default():
    _, train = build_parsers()
    args = train.parse_args(["--hang-timeout", "30"])
    settings = hang_settings(args, {"PAIJOB_HANG_TIMEOUT": "99", "PAIJOB_HANG_HARD_LIMIT": "5"})
    assert (settings.timeout, settings.first_timeout, settings.hard_limit) == (30, 1800, 5)
    defaults = hang_settings(train.parse_args([]), {})
    assert defaults.timeout == 600 and defaults.timeout <= 600
    assert defaults.calibrate and not settings.calibrate  # only a timeout the user did not choose
    assert not hang_settings(train.parse_args([]), {"PAIJOB_HANG_TIMEOUT": "600"}).calibrate
    with pytest.raises(LaunchError, match="PAIJOB_HANG_TIMEOUT='soon'"):
        hang_settings(train.parse_args([]), {"PAIJOB_HANG_TIMEOUT": "soon"})
    with pytest.raises(LaunchError, match="--hang-hard-limit"):
        HangSettings(hard_limit=0.5).check()


# -- calibration: a shorter timeout only where every rank waits in a torch.distributed call -------

class _Group:
    def __init__(self, seq: int | None) -> None:
        self.seq = seq

    def _get_sequence_number_for_group(self) -> int:
        if self.seq is None:
            raise RuntimeError("ProcessGroup mpi does not yet support sequence numbers.")
        return self.seq


def test_a_collective_too_fast_to_be_sampled_is_counted_from_torchs_sequence_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delitem(sys.modules, "torch.distributed.distributed_c10d", raising=False)
    assert collectives_issued() is None  # torch.distributed not loaded: the stack alone tells
    world = SimpleNamespace(pg_map={_Group(7): None, _Group(None): None, _Group(2): None})
    monkeypatch.setitem(sys.modules, "torch.distributed.distributed_c10d",
                        SimpleNamespace(_world=world))
    assert collectives_issued() == 9
    sampler = Sampler(str(tmp_path), 0)
    report = sampler.sample()  # this thread is in no collective now: all 9 have completed
    assert report["collectives_done"] == 9 and report["c10d"] is False


def test_the_sampler_never_drops_the_last_reference_to_a_process_group(
    monkeypatch: pytest.MonkeyPatch
):
    """Freeing a gloo group under the GIL can deadlock (torch 2.4): the sampler keeps what it read."""
    group = _Group(3)
    world = SimpleNamespace(pg_map={group: None})
    monkeypatch.setitem(sys.modules, "torch.distributed.distributed_c10d",
                        SimpleNamespace(_world=world))
    monkeypatch.setattr(process, "_READ_GROUPS", {})
    assert collectives_issued() == 3
    freed = weakref.ref(group)
    world.pg_map.clear()  # the main thread destroys the group
    del group
    gc.collect()
    assert freed() is not None


def test_torchs_sequence_numbers_count_plain_collectives_and_ddps_gradient_all_reduce(
    monkeypatch: pytest.MonkeyPatch
):
    """The real API (torch 2.4.1 to 2.13), not a stand-in: DDP's all-reduce is issued from C++."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    monkeypatch.setattr(process, "_READ_GROUPS", {})  # the group goes with this test

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert collectives_issued() == 0
        dist.all_reduce(torch.ones(1))
        assert collectives_issued() == 1
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
        before = collectives_issued()
        assert before is not None
        model(torch.ones(1, 2)).sum().backward()
        after = collectives_issued()
        assert after is not None and after > before
    finally:
        dist.destroy_process_group()
    assert collectives_issued() is None


def test_the_longest_wait_inside_one_collective_is_measured_from_the_samples(tmp_path: Path):
    sampler = Sampler(str(tmp_path), 0)
    for now in (100.0, 101.0, 102.0):  # the same all_reduce (sequence number 4) for 3 samples
        sampler.follow_collectives("all_reduce", True, None, 4, now)
    assert sampler.collectives_done == 3 and sampler.longest_wait == 0
    sampler.follow_collectives(None, False, None, 4, 103.5)  # left it
    assert sampler.collectives_done == 4 and sampler.longest_wait == 3.5
    sampler.follow_collectives("all_reduce", True, None, 5, 104.0)  # the next one, not the same
    sampler.follow_collectives("all_reduce", True, None, 6, 105.0)
    assert sampler.longest_wait == 3.5 and sampler.collectives_done == 5


def test_data_moved_by_any_thread_of_the_rank_is_noted(tmp_path: Path):
    """A huge collective's transfer runs in gloo's threads while the main thread waits: the
    calibrated timeout must see it."""
    sampler = Sampler(str(tmp_path), 0)
    sampler.sample()
    quiet_since = sampler.data_moved_at
    time.sleep(0.01)
    sampler.sample()
    assert sampler.data_moved_at == quiet_since  # the sampler's own reads and writes are not data

    def transfer() -> None:
        (tmp_path / "blob").write_bytes(b"x" * (2 << 20))

    mover = threading.Thread(target=transfer)
    mover.start()
    mover.join()
    report = sampler.sample()
    assert sampler.data_moved_at > quiet_since and report["data_moved_at"] == sampler.data_moved_at


FAST_STEPS_THEN_STUCK = textwrap.dedent(
    """
    import os, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    for step in range(60):  # healthy steps whose all_reduce takes microseconds: never sampled in it
        dist.all_reduce(t)
        time.sleep(0.05)
    if os.environ["RANK"] == "1":
        time.sleep(600)  # the culprit
    dist.all_reduce(t)
    """
)


@pytest.mark.slow
def test_a_fast_jobs_first_progress_is_seen_and_its_later_hang_judged_on_the_hang_timeout(
    tmp_path: Path, start_task
):
    """Its collectives are far too short for a once-a-second sample to catch; torch's sequence
    numbers still show every rank past its first one, so --hang-timeout applies, not the first."""
    script = tmp_path / "fast.py"
    script.write_text(FAST_STEPS_THEN_STUCK)
    task = start_task(["train", "--nproc-per-node", "2", "--grace-period", "3", "--hang-timeout",
                       "6", "--hang-first-timeout", "900", str(script)], base_env())
    code = task.wait(timeout=240)  # well short of the first timeout
    assert code == exitcodes.HANG, task.output
    cause = root_cause(task.output)
    assert cause is not None and cause.startswith("hang: no rank made progress for"), task.output
    assert "(--hang-timeout 6s)" in cause
    assert "local rank 1) is stuck at fast.py:12" in cause


def test_one_node_a_rank_asleep_before_its_all_reduce_is_named_and_the_job_ends_124(
    tmp_path: Path, start_task
):
    script = tmp_path / "sleeps.py"
    script.write_text(SLEEPS_BEFORE_ALL_REDUCE)
    timeout = 6
    task = start_task(["train", "--nproc-per-node", "2", "--grace-period", "3", "--hang-timeout",
                       str(timeout), "--hang-first-timeout", str(timeout), str(script)], base_env())
    started = time.time()
    code = task.wait(timeout=120)
    out = task.output
    assert code == exitcodes.HANG == 124, out
    assert task.ended_at is not None and task.ended_at - started < 20 + timeout + 30
    cause = root_cause(out)
    assert cause is not None and cause.startswith("hang: no rank made progress for"), out
    assert "rank 1 (node rank 0, host " in cause and "local rank 1) is stuck at sleeps.py:8" in cause
    assert "rank 0 waits in all_reduce at sleeps.py:9" in cause
    stacks = stacks_of(task.output, tmp_path)
    assert "--- rank 0 " in stacks and "--- rank 1 " in stacks and "time.sleep(600)" in stacks


def test_dataparallel_mode_is_watched_too(tmp_path: Path, start_task):
    script = tmp_path / "loads.py"
    script.write_text("import time\nprint('loading', flush=True)\ntime.sleep(600)\n")
    task = start_task(["train", "--mode", "dataparallel", "--grace-period", "2", "--hang-timeout", "4",
                       "--hang-first-timeout", "4", str(script)], base_env())
    assert task.wait(timeout=60) == exitcodes.HANG, task.output
    cause = root_cause(task.output)
    assert cause is not None and "rank 0 (node rank 0, host " in cause, task.output
    assert "is stuck at loads.py:3 in <module>, outside any collective" in cause
    assert stacks_of(task.output, tmp_path)


SPAWNS_AND_SLEEPS = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def train(local_rank, nprocs, pause, pids, culprit):
        rank = int(os.environ["NODE_RANK"]) * nprocs + local_rank
        open(os.path.join(pids, str(os.getpid())), "w").close()
        dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
        t = torch.ones(1)
        for step in range(20):
            if rank == culprit and step == 3:
                time.sleep(pause)  # the culprit, when the pause outlasts the timeout
            dist.all_reduce(t)
        os.write(1, f"finished {rank}\\n".encode())  # one write: the two children share stdout


    if __name__ == "__main__":
        nprocs = int(os.environ["NPROC_PER_NODE"])
        mp.spawn(train, args=(nprocs, float(sys.argv[1]), sys.argv[2], int(sys.argv[3])), nprocs=nprocs)
    """
)


def run_spawning_script(tmp_path: Path, start_task, pause: float, timeout: float):  # type: ignore[no-untyped-def]
    """``per-node`` mode, 2 ``mp.spawn`` children on one node; rank 1 pauses ``pause`` s at step 3."""
    script = tmp_path / "spawns.py"
    script.write_text(SPAWNS_AND_SLEEPS)
    pids = tmp_path / "pids"
    pids.mkdir()
    task = start_task(["train", "--mode", "per-node", "--nproc-per-node", "2", "--grace-period", "3",
                       "--hang-timeout", str(timeout), "--hang-first-timeout", str(timeout),
                       str(script), str(pause), str(pids), "1"], base_env())
    started = time.time()
    code = task.wait(timeout=150)
    children = [int(p.name) for p in pids.iterdir()]
    return task, code, (task.ended_at or time.time()) - started, children


@pytest.mark.slow
def test_per_node_mode_watches_the_mp_spawn_children_and_names_the_stuck_one(
    tmp_path: Path, start_task
):
    timeout = 8
    task, code, took, children = run_spawning_script(tmp_path, start_task, 600, timeout)
    out = task.output
    assert code == exitcodes.HANG, out
    assert took < 25 + timeout + 30, f"took {took:.0f}s"  # start-up on a busy machine, then the limit
    cause = root_cause(out)
    assert cause is not None and cause.startswith("hang: no rank made progress for"), out
    assert "rank 1 (node rank 0, host " in cause and "local rank 1) is stuck at spawns.py:15 in train" \
        ", outside any collective" in cause, out
    assert "rank 0 waits in all_reduce at spawns.py:16" in cause, out
    stacks = stacks_of(task.output, tmp_path)
    assert "--- rank 0 " in stacks and "--- rank 1 " in stacks and "time.sleep(pause)" in stacks
    assert len(children) == 2 and all(process_ended_within(pid, 10) for pid in children)


def process_ended_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` is gone (or a zombie left for init to reap) within ``seconds``."""
    deadline = time.time() + seconds
    while not process_ended(pid):
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_an_mp_spawn_child_reports_as_node_rank_times_processes_per_node_plus_its_index():
    assert child_rank(3, {"NODE_RANK": "2", "NPROC_PER_NODE": "4"}) == 11
    assert child_rank(1, {}) == 1  # no layout: the index alone


@pytest.mark.slow
def test_a_per_node_pause_shorter_than_the_timeout_is_not_touched(tmp_path: Path, start_task):
    task, code, _took, _children = run_spawning_script(tmp_path, start_task, 3, 15)
    assert code == 0, task.output
    assert "finished 0" in task.output and "finished 1" in task.output
    assert "hang watch:" not in task.output and "error:" not in task.output


def start_two_nodes(start_task, tmp_path: Path, name: str, source: str, options: list[str],
                    script_args: tuple[str, ...] = ()) -> list:  # type: ignore[no-untyped-def]
    """``source`` as ``tmp_path/name``, run by two paijob-runtime nodes on loopback with ``options``."""
    script = tmp_path / name
    script.write_text(source)
    port = free_port()
    args = ["train", "--grace-period", "3", *options, str(script), *script_args]
    return [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]


class FakeStore:
    """TCPStore's calls the hang watch makes, on a dict shared by the 'nodes' of a test."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def set(self, key: str, value: str | bytes) -> None:
        with self.lock:
            self.data[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        with self.lock:
            return self.data[key]

    def check(self, keys: list[str]) -> bool:
        with self.lock:
            return all(k in self.data for k in keys)

    def add(self, key: str, amount: int) -> int:
        with self.lock:
            value = int(self.data.get(key, b"0")) + amount
            self.data[key] = str(value).encode()
            return value


def test_node_0s_verdict_reaches_the_other_node_before_node_0_ends_its_ranks():
    store = FakeStore()
    links = [StoreLink("127.0.0.1", 1, prefix="p", node_rank=n, nnodes=2, connect=lambda: store)
             for n in (0, 1)]
    verdict = Failure(node_rank=0, rank=None, local_rank=None, returncode=None, secondary=False,
                      time=1.0, reason="hang: rank 3 is stuck", exit_status=exitcodes.HANG)
    assert links[0].verdict() is None and links[1].verdict() is None  # nothing judged yet
    declaring = threading.Thread(target=links[0].declare, args=(verdict,))
    declaring.start()
    deadline = time.time() + 10
    while not store.check([VERDICT_KEY]):
        assert time.time() < deadline
        time.sleep(0.01)
    assert declaring.is_alive()  # node 0 holds its ranks until node 1 has read the verdict
    links[1]._next_poll = 0.0  # noqa: SLF001 - poll now, not a second later
    assert links[1].verdict() == verdict
    assert links[0].verdict() == verdict  # waits for the declaration to finish
    declaring.join(5)
    assert links[0].verdict() is None  # once


@pytest.mark.slow
def test_per_node_mode_on_two_nodes_names_the_stuck_mp_spawn_child_and_ends_both_nodes_124(
    tmp_path: Path, start_task
):
    """2 nodes x 2 mp.spawn children on loopback; rank 3 (node rank 1, local rank 1) sleeps."""
    timeout = 8
    pids = tmp_path / "pids"
    pids.mkdir()
    tasks = start_two_nodes(start_task, tmp_path, "spawns.py", SPAWNS_AND_SLEEPS, [
        "--mode", "per-node", "--nproc-per-node", "2", "--hang-timeout", str(timeout),
        "--hang-first-timeout", str(timeout)], ("600", str(pids), "3"))
    started = time.time()
    codes = wait_all(tasks, timeout=150)
    outputs = "\n".join(t.output for t in tasks)
    assert codes == [exitcodes.HANG] * 2, outputs
    took = max(t.ended_at or time.time() for t in tasks) - started
    assert took < 25 + timeout + 30, f"took {took:.0f}s"  # start-up on a busy machine, then the limit
    for task in tasks:
        cause = root_cause(task.output)
        assert cause is not None and cause.startswith("hang: no rank made progress for"), task.output
        assert "rank 3 (node rank 1, host 127.0.0.1, local rank 1) is stuck at spawns.py:15 in " \
            "train, outside any collective" in cause, task.output
        assert "ranks 0-2 wait in all_reduce at spawns.py:16" in cause, task.output
    stacks = stacks_of(tasks[0].output, tmp_path)
    assert "--- rank 0 " in stacks and "--- rank 3 " in stacks and "time.sleep(pause)" in stacks
    children = [int(p.name) for p in pids.iterdir()]
    assert len(children) == 4 and all(process_ended_within(pid, 10) for pid in children)


@pytest.mark.slow
def test_a_healthy_per_node_run_on_two_nodes_is_untouched_and_quiet(tmp_path: Path, start_task):
    """The watches' store client leaves no trace in the logs (the store vanishes with rank 0)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    tasks = start_two_nodes(start_task, tmp_path, "spawns.py", SPAWNS_AND_SLEEPS, [
        "--mode", "per-node", "--nproc-per-node", "2", "--hang-timeout", "15",
        "--hang-first-timeout", "15"], ("3", str(pids), "3"))
    codes = wait_all(tasks, timeout=150)
    outputs = "\n".join(t.output for t in tasks)
    assert codes == [0, 0], outputs
    assert all(f"finished {rank}" in outputs for rank in range(4)), outputs
    assert "hang watch:" not in outputs and "error:" not in outputs
    assert "[W" not in outputs and "[E" not in outputs, outputs  # no torch C++ log lines


# -- the five hangs of issue 26 (hang_programs.py), 2 nodes on loopback (slow stage) -------


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HANGS))
def test_each_hang_of_the_issue_names_its_rank_and_ends_both_nodes_124(
    name: str, tmp_path: Path, start_task
):
    source, culprit, phrase = HANGS[name]
    timeout, hard_limit = 10, 2
    busy = name == "spin-loop-mid-training"
    nproc = 2 if name == "skipped-collective" else 1
    tasks = start_two_nodes(start_task, tmp_path, "hang.py", source, [
        "--nproc-per-node", str(nproc), "--hang-timeout", str(timeout), "--hang-first-timeout",
        str(timeout), "--hang-hard-limit", str(hard_limit)])
    started = time.time()
    codes = wait_all(tasks, timeout=150)
    outputs = "\n".join(t.output for t in tasks)
    assert codes == [exitcodes.HANG] * 2, outputs
    limit = hard_limit * timeout if busy else timeout
    took = max(t.ended_at or time.time() for t in tasks) - started
    assert took < 25 + limit + 30, f"took {took:.0f}s"  # start-up on a busy machine, then the limit
    for task in tasks:
        cause = root_cause(task.output)
        assert cause is not None and cause.startswith("hang: "), task.output
        node, local = divmod(culprit, nproc)
        assert f"rank {culprit} (node rank {node}, host 127.0.0.1, local rank {local}) {phrase}" in (
            cause)
        assert f"exit {exitcodes.HANG}" in cause
        assert "(on another node)" not in task.output
    if busy:
        assert "warning: straggler: rank 1" in tasks[0].output
    stacks = stacks_of(tasks[0].output, tmp_path)
    assert "--- rank 0 " in stacks and "--- rank 1 " in stacks
    if name == "dataloader-worker-hang":  # the worker's own report: no signal sent to it
        assert "its DataLoader worker 0 (pid " in stacks and "this DataLoader worker hangs" in stacks


CHECKPOINT_PAUSE = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    for step in range(40):
        dist.all_reduce(t)
        if step == 10 and dist.get_rank() == 0:
            pause = float(sys.argv[1])
            end = time.time() + pause
            if sys.argv[2] == "busy":  # a save that keeps writing
                with open(os.path.join(os.environ["TMPDIR"], "ckpt.bin"), "wb") as fh:
                    while time.time() < end:
                        fh.write(os.urandom(1 << 16))
            else:
                time.sleep(pause)  # a save blocked on storage: no CPU, no I/O we can see
        time.sleep(0.02)
    print("finished", dist.get_rank())
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["idle", "busy"])
def test_a_rank_0_checkpoint_pause_is_not_a_hang(kind: str, tmp_path: Path, start_task):
    """An idle pause shorter than the timeout is untouched; a busy one longer than the timeout is
    reported as a straggler but not ended before the hard limit."""
    timeout = 8
    pause = 5 if kind == "idle" else 14  # busy: past the timeout, short of 3 x the timeout
    tasks = start_two_nodes(start_task, tmp_path, "ckpt.py", CHECKPOINT_PAUSE, [
        "--nproc-per-node", "1", "--hang-timeout", str(timeout), "--hang-first-timeout",
        str(timeout)], (str(pause), kind))
    codes = wait_all(tasks, timeout=150)
    outputs = "\n".join(t.output for t in tasks)
    assert codes == [0, 0], outputs
    assert "finished 0" in outputs and "finished 1" in outputs
    assert "hang watch:" not in outputs and "error:" not in outputs
    if kind == "busy":
        assert "warning: straggler: rank 0 (node rank 0, host 127.0.0.1, local rank 0) is busy " \
            "at ckpt.py:" in tasks[0].output, outputs
    else:
        assert "straggler" not in outputs


PG_TIMEOUT_FIRST = textwrap.dedent(
    """
    import time
    from datetime import timedelta
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=8))
    t = torch.ones(1)
    for step in range(5):
        dist.all_reduce(t)
    if dist.get_rank() == 1:
        time.sleep(600)  # never arrives
    dist.all_reduce(t)
    """
)


@pytest.mark.slow
def test_when_torchs_own_timeout_fires_first_the_rank_that_never_arrived_is_named(
    tmp_path: Path, start_task
):
    tasks = start_two_nodes(start_task, tmp_path, "pg.py", PG_TIMEOUT_FIRST, ["--nproc-per-node", "1"])
    codes = wait_all(tasks, timeout=150)
    outputs = "\n".join(t.output for t in tasks)
    assert codes == [1, 1], outputs  # the timed-out worker's own exit code
    for task in tasks:
        cause = root_cause(task.output)
        assert cause is not None and cause.startswith(
            "torch's process-group timeout fired in rank 0's all_reduce at pg.py:13; the rank "
            "that never arrived: rank 1 (node rank 1, host 127.0.0.1, local rank 0) is stuck at "
            "pg.py:12"), task.output


@pytest.mark.slow
def test_when_torchs_timeout_fires_on_the_other_node_every_node_prints_the_same_root_cause(
    tmp_path: Path, start_task
):
    """2 x 2, rank 1 (node 0) never arrives, timeout 15 s: node 1's ranks time out waiting for
    it; node 1 used to blame its own healthy rank. Now it waits for node 0's account."""
    source = PG_TIMEOUT_FIRST.replace("seconds=8", "seconds=15")
    tasks = start_two_nodes(start_task, tmp_path, "pg.py", source, ["--nproc-per-node", "2"])
    codes = wait_all(tasks, timeout=200)
    outputs = "\n".join(t.output for t in tasks)
    assert codes[0] != 0 and codes[1] != 0, outputs
    causes = [root_cause(task.output) for task in tasks]
    assert causes[0] is not None and causes[0] == causes[1], outputs
    assert "the rank that never arrived: rank 1 (node rank 0, host 127.0.0.1, local rank 1) is " \
        "stuck at pg.py:12" in causes[0], outputs


SPAWNS_AND_TIMES_OUT = textwrap.dedent(
    """
    import os, sys, time
    from datetime import timedelta
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp


    def train(local_rank, nprocs, culprit):
        rank = int(os.environ["NODE_RANK"]) * nprocs + local_rank
        dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
                                timeout=timedelta(seconds=12))
        t = torch.ones(1)
        for step in range(5):
            dist.all_reduce(t)
        if rank == culprit:
            time.sleep(600)  # never arrives
        dist.all_reduce(t)


    if __name__ == "__main__":
        nprocs = int(os.environ["NPROC_PER_NODE"])
        mp.spawn(train, args=(nprocs, int(sys.argv[1])), nprocs=nprocs)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize(("nproc", "culprit", "waiter"), [(2, 1, 0), (1, 0, 1)],
                         ids=["store gone with rank 0: the notice", "store alive: the store"])
def test_per_node_mode_every_node_prints_the_rank_that_never_arrived_when_torchs_timeout_fires(
    nproc: int, culprit: int, waiter: int, tmp_path: Path, start_task
):
    """2 nodes of ``mp.spawn`` children, the script's own 12 s timeout fires first. Used to be:
    each node said only "node rank N failed with exit code 1". (2, 1): the waiting rank 0 hosts
    the store and ends with it, node 0 tells node 1 on the declared port; (1, 0): the culprit
    rank 0 keeps the store alive, node 1's timed-out rank reaches node 0 through it."""
    tasks = start_two_nodes(start_task, tmp_path, "spawns.py", SPAWNS_AND_TIMES_OUT, [
        "--mode", "per-node", "--nproc-per-node", str(nproc)], (str(culprit),))
    codes = wait_all(tasks, timeout=200)
    outputs = "\n".join(t.output for t in tasks)
    assert codes == [1, 1], outputs  # the timed-out worker's own exit code
    causes = [root_cause(task.output) for task in tasks]
    assert causes[0] is not None and causes[0] == causes[1], outputs
    assert causes[0].startswith(
        f"torch's process-group timeout fired in rank {waiter}'s all_reduce at spawns.py:18; the "
        f"rank that never arrived: rank {culprit} (node rank 0, host 127.0.0.1, local rank "
        f"{culprit}) is stuck at spawns.py:17"), outputs


MISMATCHED_SIZES = textwrap.dedent(
    """
    import sys, time, traceback
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1000)
    for step in range(3):
        dist.all_reduce(t)
    big = torch.ones(int(sys.argv[2]) if rank == int(sys.argv[1]) else 1000)
    try:
        dist.all_reduce(big)
    except RuntimeError:
        if rank >= 2 and sys.argv[3:] == ["slow"]:  # node 1's ranks said why, then linger
            traceback.print_exc()
            time.sleep(60)
        raise
    """
)
MISMATCH_LINE = 13  # dist.all_reduce(big)


@pytest.mark.slow
@pytest.mark.parametrize(("detail", "odd", "size", "slow"), [
    (False, 1, 2000, False), (False, 0, 500, False), (True, 1, 2000, False), (True, 1, 2000, True)],
    ids=["the flight recorder", "the flight recorder, the receiver's call differs",
         "torch's fingerprints", "torch's fingerprints, node 1 slow to exit"])
def test_a_collective_whose_sizes_disagree_is_told_the_same_on_every_node(
    detail: bool, odd: int, size: int, slow: bool, tmp_path: Path, start_task
):
    """2 x 2, one rank all-reduces another size than the others. Used to be: exit 134 in 8 s and
    the healthy rank gloo aborted named as the root cause. Now the rank whose call differs is
    named with its line on every node: from torch's flight recorder, which the launcher keeps on
    for gloo (the ranks gloo did not abort say their calls); with TORCH_DISTRIBUTED_DEBUG=DETAIL,
    from torch's fingerprints. Where the receiver's own call is the odd one, every other rank
    agrees, and it is named. On a torch without the recorder, the receiver is named as such.

    "slow": node 1's ranks raise but do not exit, so node 0's record stops them before torch
    reports them failed (what CI's busy machine did once: node 0 then named no rank, its own
    two ranks' words alone cannot tell who differs); node 1 still publishes what they said."""
    script = tmp_path / "sizes.py"
    script.write_text(MISMATCHED_SIZES)
    port = free_port()
    tasks = []
    for i in (0, 1):
        env = task_env(port, i)
        if detail:
            env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        tasks.append(start_task(["train", "--grace-period", "3", "--nproc-per-node", "2",
                                 "--hang-timeout", "60", str(script), str(odd), str(size),
                                 *(["slow"] if slow else [])], env, name=f"node{i}"))
    codes = wait_all(tasks, timeout=150)
    outputs = "\n".join(t.output for t in tasks)
    causes = [root_cause(task.output) for task in tasks]
    assert causes[0] is not None and causes[0] == causes[1], outputs
    if detail:
        assert codes == [1, 1], outputs  # the account's: rank 1's own exit code
        assert causes[0].startswith("mismatched collectives (torch's fingerprint check): rank 1 calls "
                                    f"ALLREDUCE [2000] Float at sizes.py:{MISMATCH_LINE}; ranks 0, "), \
            outputs
        return
    assert codes[0] == codes[1] == 134, outputs  # the receiver's, whom gloo aborted
    if not has_gloo_flight_recorder():
        assert causes[0].startswith("mismatched collectives: gloo aborted rank ") and "it is the " \
            "receiver, not necessarily the rank whose call differs" in causes[0], outputs
    elif odd == 1:
        assert causes[0].startswith("mismatched collectives (torch's flight recorder): rank 1 calls "
                                    f"all_reduce [2000] Float at sizes.py:{MISMATCH_LINE}; ranks "), \
            outputs
    else:  # gloo aborts rank 0, the odd one: every other rank says the same call
        assert causes[0].startswith("mismatched collectives (torch's flight recorder): rank 0's call "
                                    "differs: gloo aborted it on receiving ") and \
            f"ranks 1, 2, 3 call all_reduce [1000] Float at sizes.py:{MISMATCH_LINE}" in causes[0], outputs


TRAINS_A_WHILE = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    open(os.path.join(sys.argv[1], str(dist.get_rank())), "w").close()
    end = time.time() + 12
    while time.time() < end:
        dist.all_reduce(t)
        time.sleep(0.05)
    """
)


@pytest.mark.slow
def test_sigusr1_to_one_node_prints_every_ranks_stack_on_every_node_and_the_job_goes_on(
    tmp_path: Path, start_task
):
    ready = tmp_path / "ready"
    ready.mkdir()
    tasks = start_two_nodes(start_task, tmp_path, "trains.py", TRAINS_A_WHILE,
                            ["--nproc-per-node", "1"], (str(ready),))
    deadline = time.time() + 90
    while len(list(ready.iterdir())) < 2:
        assert all(t.poll() is None for t in tasks) and time.time() < deadline, tasks[0].output
        time.sleep(0.1)
    time.sleep(2)  # a sample or two of each rank
    tasks[1].proc.send_signal(signal.SIGUSR1)
    assert wait_all(tasks, timeout=90) == [0, 0], tasks[0].output + tasks[1].output
    assert "paijob-runtime: stacks on request (SIGUSR1): node rank 1 (127.0.0.1), 1 rank(s)" in (
        tasks[1].output)
    assert "stacks asked for (SIGUSR1, or a hang verdict): node rank 0 (127.0.0.1), 1 rank(s)" in (
        tasks[0].output)
    for task in tasks:
        assert 'trains.py", line ' in task.output


def test_closing_the_store_link_waits_for_a_call_still_inside_torch_past_its_own_timeout(monkeypatch):
    """paijob-runtime ends only once no store call is inside torch's C++ code: a call to a store that went away
    returns late on a loaded machine, and a process that ends under it aborts ("terminate called without an
    active exception", exit -6 on a node whose job succeeded)."""
    from paijob.runtime.watch.node import storelink

    monkeypatch.setattr(storelink, "CLOSE_WAIT", 10.0, raising=False)
    released = threading.Event()

    def slow_get(store: object) -> bytes:
        time.sleep(2.5)  # past the call's bounded wait (0.2 s) and what close used to wait (timeout + 1 s)
        released.set()
        return b""

    link = StoreLink("127.0.0.1", 1, prefix="p", node_rank=1, nnodes=2, connect=FakeStore)
    assert link.call(lambda store: store, timeout=1.0) is not None  # connected
    caller = threading.Thread(target=link.call, args=(slow_get,), kwargs={"timeout": 0.2}, daemon=True)
    caller.start()
    time.sleep(0.1)
    monkeypatch.setattr(storelink, "CALL_TIMEOUT", 0.2)
    link.close()
    assert released.is_set(), "close returned while a store call was still running"


def test_closing_the_store_link_waits_for_a_call_whose_thread_had_not_started_yet(monkeypatch):
    """A call the hang watch's tick made as the launcher closed the link: it passed the closed check, but its
    thread had yet to run (a loaded machine) when close looked for calls in flight. close must wait for it, or
    the interpreter ends while it is inside torch and aborts ("terminate called without an active exception",
    exit -6 on a node whose job succeeded)."""
    from paijob.runtime.watch import lifecycle
    from paijob.runtime.watch.node import storelink

    late = threading.Event()  # the call's thread is being started, late
    go = threading.Event()

    def late_bounded(fn, timeout):  # type: ignore[no-untyped-def]
        late.set()
        assert go.wait(10)
        return lifecycle.bounded(fn, timeout)

    entered_after_close: list[bool] = []
    closed = threading.Event()

    def slow_get(store: object) -> bytes:
        entered_after_close.append(closed.is_set())
        time.sleep(0.3)  # inside torch
        return b""

    link = StoreLink("127.0.0.1", 1, prefix="p", node_rank=1, nnodes=2, connect=FakeStore)
    assert link.call(lambda store: store, timeout=1.0) is not None  # connected
    monkeypatch.setattr(storelink, "bounded", late_bounded)
    caller = threading.Thread(target=link.call, args=(slow_get,), daemon=True)
    caller.start()
    assert late.wait(10)
    threading.Timer(0.3, go.set).start()  # the thread runs once close has looked
    link.close()
    closed.set()
    go.set()
    caller.join(10)
    assert entered_after_close == [False], "a store call went into torch after close returned"
    assert link.call(slow_get) is None  # closed: no call goes in any more
