"""The hang watch on real gloo jobs: it never changes the program it watches, no
default kills a healthy job, and a stuck rank is named where it really is, every thread of it.

One node here (fast); the two-node shapes of issue 33 are in the slow stage below.
"""

from __future__ import annotations

import re
import shutil
import textwrap
import time
from pathlib import Path

import pytest
from runtime_helpers import base_env, free_port, root_cause, task_env, wait_all

from paijob.common import contract, exitcodes
from paijob.runtime.watch.node import outside

GIL_SLEEP_RETURNS_IN_FULL = textwrap.dedent(
    """
    import ctypes, os, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    for step in range(5):
        dist.all_reduce(t)
        time.sleep(0.1)
    if os.environ["RANK"] == "1":
        began = time.monotonic()
        left = ctypes.PyDLL(None).sleep(13)  # holds the GIL: the sampler cannot run meanwhile
        print(f"slept {time.monotonic() - began:.1f}s, {left}s left", flush=True)
    dist.all_reduce(t)
    """
)


@pytest.mark.slow  # ~20 s of real jobs: the slow stage keeps the README's command under 10 min
def test_a_c_call_holding_the_gil_is_not_interrupted_by_the_watch(tmp_path: Path, start_task):
    """The watch used to send SIGUSR2 to a silent rank (after 10 s): libc's sleep returned early."""
    script = tmp_path / "gil.py"
    script.write_text(GIL_SLEEP_RETURNS_IN_FULL)
    task = start_task(["train", "--nproc-per-node", "2", "--grace-period", "3", "--hang-timeout",
                       "40", str(script)], base_env())
    assert task.wait(timeout=150) == 0, task.output
    found = re.search(r"slept ([\d.]+)s, (\d+)s left", task.output)
    assert found is not None, task.output
    assert found.group(2) == "0" and float(found.group(1)) >= 12.9, task.output


FOUR_WAYS_TO_BE_STUCK = textwrap.dedent(
    """
    import ctypes, os, signal, threading, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    t = torch.ones(1)
    for step in range(25):  # past the first step: collectives in several samples
        dist.all_reduce(t)
        time.sleep(0.2)  # the line a stuck rank left
    first, second = threading.Lock(), threading.Lock()

    def holder():
        with second:
            time.sleep(0.5)
            first.acquire()  # the other side of the deadlock

    if rank == 1:
        ctypes.PyDLL(None).sleep(600)  # a C call holding the GIL
    elif rank == 2:
        threading.Thread(target=holder, name="holder", daemon=True).start()
        with first:
            time.sleep(0.2)
            second.acquire()  # deadlocked with its own thread
    elif rank == 3:
        os.kill(os.getpid(), signal.SIGSTOP)  # frozen
    dist.all_reduce(t)
    """
)


@pytest.mark.slow  # a 2 x 2 job whose four ranks hang in four places, judged at --hang-timeout (about 25 s)
def test_each_stuck_rank_is_named_where_it_really_is_with_every_thread(tmp_path: Path, start_task):
    """One job, four ranks: rank 0 waits in all_reduce; rank 1 sits in a C call holding the GIL,
    rank 2 is deadlocked with its own thread, rank 3 is stopped. The headline names each at its
    real line, the report shows the deadlock's other thread, the job ends promptly."""
    script = tmp_path / "stuck.py"
    script.write_text(FOUR_WAYS_TO_BE_STUCK)
    started = time.time()
    task = start_task(["train", "--nproc-per-node", "4", "--hang-timeout", "6",
                       "--hang-first-timeout", "60", str(script)], base_env())
    code = task.wait(timeout=180)
    out = task.output
    assert code == exitcodes.HANG, out
    assert root_cause(out) is not None, out
    cause = next(line for line in out.splitlines() if "error: hang:" in line)  # whole, not shortened
    assert "rank 1 (node rank 0, host " in cause and "a C call holding the GIL), is at stuck.py:20" in cause
    assert "local rank 2) is stuck at stuck.py:25 in <module>, outside any collective" in cause
    assert "local rank 3) is stopped (T state in /proc: SIGSTOP or a debugger)" + stopped_at(27) in cause
    assert "rank 0 waits in all_reduce at stuck.py:28" in cause
    assert "its thread 'holder':" in out and "stuck.py:17 in holder" in out  # the other side
    # every node logs the timeouts in force and how they were chosen
    assert "watching for hangs: --hang-timeout 6s (--hang-timeout); until a rank's first " \
        "training step, --hang-first-timeout 60s" in out
    # ended well within the grace period's default 30 s of the verdict, the stopped rank included
    assert (task.ended_at or time.time()) - started < 100
    stacks = stacks_file(out, tmp_path)
    assert "first.acquire()" in stacks and "second.acquire()" in stacks  # every thread
    assert "faulthandler's watchdog" in stacks and 'stuck.py", line 20' in stacks
    if outside.find_py_spy() is not None:  # the stopped rank's every thread, read from outside
        assert 'stuck.py", line 27, in <module>\n    os.kill(os.getpid(), signal.SIGSTOP)' in stacks


DDP_THEN_A_LONG_LOAD = textwrap.dedent(
    """
    import time
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(4, 2))  # broadcasts the parameters: a collective
    dist.barrier()
    time.sleep(9)  # then the data: longer than --hang-timeout, before the first step
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(8):
        model(torch.ones(3, 4)).sum().backward()
        optimizer.step()
        time.sleep(0.3)
    print("trained", flush=True)
    """
)


@pytest.mark.slow  # ~20 s of real jobs: the slow stage keeps the README's command under 10 min
def test_a_model_built_before_a_long_load_is_still_before_the_first_step(tmp_path: Path,
                                                                          start_task):
    """DDP built, then a load longer than --hang-timeout: still the first-progress allowance."""
    script = tmp_path / "ddp_load.py"
    script.write_text(DDP_THEN_A_LONG_LOAD)
    task = start_task(["train", "--nproc-per-node", "2", "--hang-timeout", "4",
                       "--hang-first-timeout", "90", str(script)], base_env())
    assert task.wait(timeout=180) == 0, task.output
    assert task.output.count("trained") == 2 and "hang:" not in task.output


FORGES_THE_STUCK_RANKS_FILE = textwrap.dedent(
    f"""
    import json, os, threading, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    t = torch.ones(1)
    for step in range(25):
        dist.all_reduce(t)
        time.sleep(0.2)
    folder = os.environ["{contract.HANG_DIR}"]
    with open("/proc/self/stat") as fh:
        start = int(fh.read().rpartition(")")[2].split()[19])

    def forge():  # rank 0 says, 20 times a second, that rank 1 is busy and well
        while True:
            now = time.time()
            fake = dict(rank=1, local_rank=1, pid=os.getpid(), start_time=start, seq=1, time=now,
                        active_at=now, moved_at=now, data_moved_at=now, busy=True, cpu_share=1.0,
                        wait=None, collective=False, c10d=False, collectives_done=99,
                        first_progress=True, frames=[["/elsewhere.py", 1, "innocent"]])
            with open(os.path.join(folder, "forged"), "w") as fh:
                json.dump(fake, fh)
            os.replace(os.path.join(folder, "forged"), os.path.join(folder, "rank1.json"))
            time.sleep(0.05)

    if rank == 0:
        threading.Thread(target=forge, daemon=True).start()
    if rank == 1:
        time.sleep(600)  # the culprit
    dist.all_reduce(t)
    """
)


@pytest.mark.slow  # the mechanism is pinned fast in node/test_believed.py
def test_a_forged_sampler_file_hides_no_rank(tmp_path: Path, start_task):
    """Rank 0 overwrites rank 1's sampler file with a busy, healthy rank 1: the watch used to
    believe it (a straggler, ended only at 3 x the timeout); it believes rank 1's own reports."""
    script = tmp_path / "forge.py"
    script.write_text(FORGES_THE_STUCK_RANKS_FILE)
    task = start_task(["train", "--nproc-per-node", "2", "--grace-period", "3", "--hang-timeout",
                       "6", "--hang-first-timeout", "60", str(script)], base_env())
    assert task.wait(timeout=120) == exitcodes.HANG, task.output
    cause = next(line for line in task.output.splitlines() if "error: hang:" in line)
    assert "rank 1 (node rank 0, host " in cause and "forge.py:" in cause, cause
    assert "straggler" not in task.output and "elsewhere.py" not in cause and "innocent" not in cause
    stacks_file(task.output, tmp_path)


def stacks_file(output: str, cwd: Path) -> str:
    """The stacks file a verdict names, read and removed; never in the working directory."""
    found = re.findall(r"every rank's full stack: (\S+)", output)
    assert found, output
    path = Path(found[-1])
    assert cwd not in path.parents
    text = path.read_text()
    if path.parent.name.startswith("paijob-stacks-"):
        shutil.rmtree(path.parent)
    return text


def stopped_at(line: int, script: str = "stuck.py") -> str:
    """How a headline places a stopped rank: read from outside by py-spy, at the line it stopped
    at; without py-spy (an image without paijob[train]), its last sample's line and the way out."""
    if outside.find_py_spy() is not None:
        return f" at {script}:{line} in <module>"
    return f", last seen at {script}:"


STOPS_ON_NODE_1 = textwrap.dedent(
    """
    import os, signal, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    for step in range(25):
        dist.all_reduce(t)
        time.sleep(0.2)
    if int(os.environ["RANK"]) == 2:
        os.kill(os.getpid(), signal.SIGSTOP)  # frozen
    dist.all_reduce(t)
    """
)


@pytest.mark.slow
def test_a_stopped_rank_on_node_1_is_named_and_both_nodes_end_within_seconds(tmp_path: Path,
                                                                             start_task):
    script = tmp_path / "stop.py"
    script.write_text(STOPS_ON_NODE_1)
    port = free_port()
    args = ["train", "--nproc-per-node", "2", "--hang-timeout", "8", "--hang-first-timeout", "60",
            str(script)]
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    assert wait_all(tasks, timeout=240) == [exitcodes.HANG] * 2
    ends = [t.ended_at or time.time() for t in tasks]
    assert abs(ends[0] - ends[1]) < 10, ends
    for task in tasks:
        cause = root_cause(task.output)
        assert cause is not None and "rank 2 (node rank 1, host 127.0.0.1, local rank 0) is " \
            "stopped (T state in /proc: SIGSTOP or a debugger)" + stopped_at(12, "stop.py") in cause, \
            task.output
