"""The slow-rank doctor on real jobs (slow stage): 2 nodes x 2 gloo workers on loopback, one rank
slowed in compute or in data loading, and a balanced job that must stay quiet.

The verdict's rules are pinned on synthetic jobs in test_straggler.py and test_slow_doctor.py;
these check the whole path (sampler, flight recorder, files, store, node 0's line). The five jobs
run at once (about 2 minutes for all, not 8): their steps mostly sleep, so they share two busy
cores without stretching one rank more than another."""

from __future__ import annotations

import re
import textwrap

import pytest
from runtime_helpers import MASTER_TIMEOUT, Task, task_env, wait_all

from paijob.common.ports import draw

SECONDS = 80  # of training: start-up, then 3 looks in a row (10 s apart) on evidence written every 5 s

TRAINS_WITH_ONE_SLOW_RANK = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    how, slow_rank, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])


    class Items(torch.utils.data.Dataset):
        def __len__(self):
            return 1 << 20

        def __getitem__(self, index):
            if how == "data" and rank == slow_rank:
                time.sleep(0.015)  # a slow disk, for this rank only
            return torch.ones(16)


    def heavy(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass


    def evaluate(seconds):
        time.sleep(seconds)  # rank 0 alone, by design: the others wait at the next collective


    loader = iter(torch.utils.data.DataLoader(Items(), batch_size=4))
    t = torch.zeros(1000)
    began = time.time()
    end = began + seconds
    evaluated = False
    while True:
        if how == "evaluate" and rank == 0 and not evaluated and time.time() > began + 30:
            evaluate(30)
            evaluated = True
        batch = next(loader)
        time.sleep(0.03)  # the step's own work
        if (how == "compute" and rank == slow_rank) or (how == "node" and rank // 2 == slow_rank):
            heavy(0.06)
        t.fill_(1.0 if time.time() >= end else 0.0)  # every rank stops after the same step
        dist.all_reduce(t)
        if t[0].item() > 0:
            break
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    """
)


# name: (how, slowed rank (or node), seconds of training)
JOBS = {
    "compute": ("compute", 3, SECONDS),
    "data": ("data", 3, SECONDS),
    "node": ("node", 1, SECONDS),
    "evaluate": ("evaluate", 0, 90),
    "balanced": ("balanced", 3, SECONDS),
}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Every job of this module started at once, two paijob-runtime nodes each on loopback."""
    started: dict[str, list[Task]] = {}
    for (name, (how, slowed, seconds)), port in zip(JOBS.items(), draw(len(JOBS)), strict=True):
        folder = tmp_path_factory.mktemp(name)
        script = folder / "train.py"
        script.write_text(TRAINS_WITH_ONE_SLOW_RANK)
        args = ["train", "--master-timeout", str(MASTER_TIMEOUT), "--grace-period", "3", "--nproc-per-node", "2",
                "--hang-timeout", "120", str(script), how, str(slowed), str(seconds)]
        started[name] = [Task(args, task_env(port, i), folder / f"node{i}.log", folder) for i in (0, 1)]
    yield started
    for tasks in started.values():
        for task in tasks:
            if task.proc.poll() is None:
                task.proc.kill()
                task.proc.wait()


def node_0_output(jobs, name: str) -> str:  # type: ignore[no-untyped-def]
    """Node 0's output once both nodes of job ``name`` ended 0."""
    tasks = jobs[name]
    codes = wait_all(tasks, timeout=JOBS[name][2] + 240)
    assert codes == [0, 0], "\n".join(t.output for t in tasks)
    return tasks[0].output


@pytest.mark.slow
@pytest.mark.parametrize(("how", "doing"), [("compute", "computing ("),
                                            ("data", "in the DataLoader (next() at train.py:")])
def test_one_slow_rank_is_named_with_what_it_does(how: str, doing: str, jobs):  # type: ignore[no-untyped-def]
    output = node_0_output(jobs, how)
    lines = re.findall(r"slow-rank doctor: slow rank: .*", output)
    assert lines, output
    assert lines[0].startswith("slow-rank doctor: slow rank: rank 3 (node rank 1, "), output
    assert "holds the job back: ranks 0-2 wait for it" in lines[0] and doing in lines[0], output
    # the line: the one most sampled for that activity (see docs/runtime/faults.md on a CPU-starved machine)
    assert re.search(r"slow-rank doctor: over the run: slow rank: rank 3 \(node rank 1", output), output


@pytest.mark.slow
def test_a_whole_slow_node_is_named_as_the_node(jobs):  # type: ignore[no-untyped-def]
    """Both ranks of node 1 compute 60 ms more each step (one machine slower than the other)."""
    output = node_0_output(jobs, "node")
    lines = re.findall(r"slow-rank doctor: slow node: .*", output)
    assert lines, output
    assert lines[0].startswith("slow-rank doctor: slow node: node rank 1 (host "), output
    assert "ranks 2-3) holds the job back: ranks 0-1 wait for it" in lines[0], output
    assert "slow rank:" not in output, output


@pytest.mark.slow
def test_a_rank_0_evaluation_by_design_is_reported_as_a_phase_not_a_straggler(jobs):  # type: ignore[no-untyped-def]
    """Rank 0 evaluates alone for 30 s, 30 s into training; the others wait for it at the next all_reduce."""
    output = node_0_output(jobs, "evaluate")
    assert re.search(r"slow-rank doctor: one rank works alone: rank 0 \(node rank 0, .*\) works in host-side "
                     r"work \(evaluate\(\) at train.py:\d+\) while ranks 1-3 wait in all_reduce at train.py:\d+, "
                     r"up to 3\ds at a time", output), output
    assert "slow rank:" not in output and "slow node:" not in output, output


@pytest.mark.slow
def test_a_balanced_job_says_nothing(jobs):  # type: ignore[no-untyped-def]
    output = node_0_output(jobs, "balanced")
    assert "slow-rank doctor" not in output, output
