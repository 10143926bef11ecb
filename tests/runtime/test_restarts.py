"""Recovery inside the attempt (``--max-restarts``): every node's workers start again together, what cannot
recover is not restarted, every restart is told; two paijob-runtime processes on loopback, as two tasks."""

from __future__ import annotations

import signal
import textwrap
import time
from pathlib import Path

import pytest
from restart_programs import RESTART_LINE, TRAINS, TRAINS_LONGER, TRAINS_RAISES_AT, trains
from runtime_helpers import free_port, root_cause, task_env, wait_all

from paijob.common import exitcodes, records


def _two_nodes(tmp_path: Path, start_task, extra: list[str], crash_at: int, how: str, nproc: int = 1):
    script = tmp_path / "trains.py"
    script.write_text(TRAINS)
    port = free_port()
    args = ["train", "--nproc-per-node", str(nproc), "--grace-period", "3", *extra, str(script), str(tmp_path),
            str(crash_at), how]
    return [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]


def test_a_worker_that_fails_once_is_restarted_on_every_node_and_the_job_ends_0(tmp_path: Path, start_task):
    tasks = _two_nodes(tmp_path, start_task, ["--max-restarts", "2"], crash_at=7, how="once")
    codes = wait_all(tasks, timeout=180)
    assert codes == [0, 0], "\n".join(t.output for t in tasks)
    done = (tmp_path / "done.json").read_text()
    # the last step's value: step 11 summed over the 2 ranks; resumed after the checkpoint of step 5
    assert '"last": 22.0' in done and '"restart": 1' in done and '"start": 6' in done, done
    node0 = tasks[0].output
    lines = RESTART_LINE.findall(node0)
    assert len(lines) == 1, node0
    number, limit, cause = lines[0]
    assert (number, limit) == ("1", "2")
    assert "worker rank 1 (node rank 1, local rank 0) failed with exit code 1" in cause
    assert f"ValueError: bad batch on purpose (trains.py:{TRAINS_RAISES_AT} in <module>)" in cause
    assert "world size 2" in cause and "after the failure" in cause
    told = records.restarts_in(node0)
    assert [(r.number, r.limit, r.exit_code, r.nodes) for r in told] == [(1, 2, 1, 2)], node0
    assert told[0].signature == f"ValueError: bad batch on purpose at trains.py:{TRAINS_RAISES_AT} in <module>"
    assert records.restarts_in(tasks[1].output) == []  # node 0 keeps the record
    assert root_cause(node0) is None  # it ended well: no failure record


def test_the_same_exception_twice_in_a_row_ends_after_two_starts(tmp_path: Path, start_task):
    tasks = _two_nodes(tmp_path, start_task, ["--max-restarts", "3"], crash_at=4, how="always")
    codes = wait_all(tasks, timeout=180)
    assert codes == [1, 1], "\n".join(t.output for t in tasks)
    for task in tasks:
        out = task.output
        assert len(RESTART_LINE.findall(out)) == 1, out  # two starts: the first and one restart
        assert (f"the same failure twice in a row: ValueError: bad batch on purpose at trains.py:{TRAINS_RAISES_AT} in <module> "
                "(before restart 1 and after it): a bug, not a fault; not restarting") in out, out
        assert "ValueError: bad batch on purpose" in (root_cause(out) or ""), out
    assert not (tmp_path / "done.json").exists()


@pytest.mark.slow
def test_without_max_restarts_a_failure_ends_the_job_as_before(tmp_path: Path, start_task):
    tasks = _two_nodes(tmp_path, start_task, [], crash_at=1, how="once")
    codes = wait_all(tasks, timeout=120)
    assert codes == [1, 1], "\n".join(t.output for t in tasks)
    for task in tasks:
        assert not RESTART_LINE.findall(task.output)
        assert "not restarting" not in task.output


@pytest.mark.slow
def test_a_crash_on_a_node_of_two_workers_each_restarts_the_2x2_world(tmp_path: Path, start_task):
    tasks = _two_nodes(tmp_path, start_task, ["--max-restarts", "2"], crash_at=7, how="once", nproc=2)
    codes = wait_all(tasks, timeout=240)
    assert codes == [0, 0], "\n".join(t.output for t in tasks)
    done = (tmp_path / "done.json").read_text()
    assert '"last": 44.0' in done and '"world": 4' in done and '"restart": 1' in done, done
    assert len(RESTART_LINE.findall(tasks[0].output)) == 1


# Rank 1 sleeps outside any collective in the first start, at step 5, while the others wait in all_reduce.
HANGS_ONCE = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    t = torch.ones(1)
    for step in range(30):
        if step == 5 and dist.get_rank() == 1 and restart == 0:
            time.sleep(600)  # the culprit
        dist.all_reduce(t)
        time.sleep(0.05)
    if dist.get_rank() == 0:
        open(sys.argv[1], "w").write(str(restart))
    """
)


@pytest.mark.slow
def test_a_hang_the_doctor_names_is_followed_by_a_restart_and_exit_0(tmp_path: Path, start_task):
    script = tmp_path / "hangs.py"
    script.write_text(HANGS_ONCE)
    done = tmp_path / "done"
    port = free_port()
    args = ["train", "--nproc-per-node", "1", "--grace-period", "3", "--hang-timeout", "5",
            "--hang-first-timeout", "5", "--max-restarts", "1", str(script), str(done)]
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    codes = wait_all(tasks, timeout=240)
    assert codes == [0, 0], "\n".join(t.output for t in tasks)
    assert done.read_text() == "1"
    lines = RESTART_LINE.findall(tasks[0].output)
    assert len(lines) == 1 and "hang: no rank made progress" in lines[0][2], tasks[0].output
    assert "hangs.py:11" in lines[0][2]
    told = records.restarts_in(tasks[0].output)
    assert told[0].exit_code == exitcodes.HANG and told[0].signature == "hang at hangs.py:11", told


KEEPS_TRAINING = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    open(os.path.join(sys.argv[1], os.environ["RANK"]), "w").write("1")
    t = torch.ones(1)
    while True:
        dist.all_reduce(t)
        time.sleep(0.05)
    """
)


@pytest.mark.slow
def test_killing_node_0_ends_every_node_with_openpais_retried_code(tmp_path: Path, start_task):
    script = tmp_path / "trains_on.py"
    script.write_text(KEEPS_TRAINING)
    port = free_port()
    args = ["train", "--nproc-per-node", "1", "--grace-period", "3", "--heartbeat-timeout", "10",
            "--max-restarts", "2", str(script), str(tmp_path)]
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    deadline = time.time() + 120
    while not all((tmp_path / str(rank)).exists() for rank in (0, 1)):
        assert time.time() < deadline and all(t.poll() is None for t in tasks), "\n".join(t.output for t in tasks)
        time.sleep(0.1)
    tasks[0].kill()  # node 0's whole task: its agent (the store) and its worker
    code = tasks[1].wait(timeout=60)
    assert code == exitcodes.INFRA_FAILURE, tasks[1].output
    out = tasks[1].output
    assert "node rank 0 (the master, rendezvous store at 127.0.0.1:" in out, out
    assert not RESTART_LINE.findall(out)
    assert tasks[0].wait(timeout=10) == -signal.SIGKILL


def _recipe_on_two_nodes(tmp_path: Path, start_task, fault: str) -> dict:
    import json

    from paijob.common import contract

    out = tmp_path / "out"
    port = free_port()
    args = ["train", "--nproc-per-node", "1", "--grace-period", "3", "--max-restarts", "2", "--recipe", "cifar10",
            "--epochs", "3", "--steps-per-epoch", "4", "--synthetic-size", "256", "--batch-size", "32",
            "--output-dir", str(out)]
    tasks = [start_task(args, {**task_env(port, i), contract.FAULT_AT: fault}, name=f"node{i}") for i in (0, 1)]
    codes = wait_all(tasks, timeout=300)
    assert codes == [0, 0], "\n".join(t.output for t in tasks)
    assert len(RESTART_LINE.findall(tasks[0].output)) == 1, tasks[0].output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epochs"] == 3 and summary["status"] == "completed", summary
    assert [(r["number"], r["limit"]) for r in summary["restarts"]] == [(1, 2)], summary["restarts"]
    assert "resumed from" in tasks[0].output
    return summary


@pytest.mark.slow
def test_a_recipe_killed_mid_epoch_resumes_from_its_last_checkpoint_after_the_restart(tmp_path: Path, start_task):
    summary = _recipe_on_two_nodes(tmp_path, start_task, "1:2:kill:1")  # rank 1 dies at epoch 1, step 2
    assert summary["resumed_from"].endswith("ckpt-e0001-s000000.pt"), summary
    assert summary["restarts"][0]["exit_code"] == 137 and "exit code 137" in summary["restarts"][0]["cause"]


@pytest.mark.slow
def test_a_crash_while_a_checkpoint_is_written_resumes_from_the_one_before(tmp_path: Path, start_task):
    summary = _recipe_on_two_nodes(tmp_path, start_task, "2:0:save:0")  # rank 0 dies writing epoch 2's
    assert summary["resumed_from"].endswith("ckpt-e0001-s000000.pt"), summary
    names = sorted(p.name for p in (tmp_path / "out" / "checkpoints").iterdir())
    assert not [name for name in names if name.endswith(".tmp")], names  # the half-written one went


def _two_nodes_training_on(tmp_path: Path, start_task, extra: list[str], nproc: int = 1):
    script = tmp_path / "trains.py"
    script.write_text(TRAINS_LONGER)
    port = free_port()
    args = ["train", "--nproc-per-node", str(nproc), "--grace-period", "3", "--heartbeat-timeout", "5", *extra,
            str(script), str(tmp_path)]
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    deadline = time.time() + 120
    while not (tmp_path / "ckpt.json").exists():  # training, with a first checkpoint
        assert time.time() < deadline and all(t.poll() is None for t in tasks), "\n".join(t.output for t in tasks)
        time.sleep(0.1)
    return tasks


@pytest.mark.slow
def test_with_min_nodes_a_lost_node_leaves_node_0_to_finish_alone(tmp_path: Path, start_task):
    tasks = _two_nodes_training_on(tmp_path, start_task, ["--max-restarts", "1", "--min-nodes", "1"])
    tasks[1].kill()  # node 1's whole task: its agent and its workers
    code = tasks[0].wait(timeout=180)
    assert code == 0, tasks[0].output
    done = (tmp_path / "done.json").read_text()
    assert '"world": 1' in done and '"restart": 1' in done and '"last": 59.0' in done, done
    lines = RESTART_LINE.findall(tasks[0].output)
    assert len(lines) == 1 and "node rank 1 was lost; going on with 1 of 2 nodes (--min-nodes 1)" in lines[0][2]
    assert "world size 1" in lines[0][2]


# 80 steps; after a restart it holds at step 50 until the test writes "go-on" (so a node can come back
# meanwhile), and in restart 1 rank 0 then raises once where "crash" exists.
GATED = trains(80, """\
    if step == 50 and restart >= 1:
        while not os.path.exists(os.path.join(folder, "go-on")):
            time.sleep(0.1)
        if restart == 1 and rank == 0 and os.path.exists(os.path.join(folder, "crash")):
            raise ValueError("once more")
""")


def _lose_node_1_and_bring_it_back(tmp_path: Path, start_task):
    """Two nodes with --min-nodes 1; node 1's task is killed (node 0 goes on alone, restart 1), then started
    again (its task retried) and waits to join."""
    script = tmp_path / "gated.py"
    script.write_text(GATED)
    port = free_port()
    args = ["train", "--nproc-per-node", "1", "--grace-period", "3", "--heartbeat-timeout", "5",
            "--max-restarts", "2", "--min-nodes", "1", str(script), str(tmp_path)]
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    deadline = time.time() + 120
    while not (tmp_path / "ckpt.json").exists():
        assert time.time() < deadline and all(t.poll() is None for t in tasks), "\n".join(t.output for t in tasks)
        time.sleep(0.1)
    tasks[1].kill()
    while not RESTART_LINE.findall(tasks[0].output):
        assert time.time() < deadline and tasks[0].poll() is None, tasks[0].output
        time.sleep(0.1)
    back = start_task(args, task_env(port, 1), name="node1-retried")
    while "joins them at the next restart" not in back.output:
        assert time.time() < deadline and back.poll() is None, back.output
        time.sleep(0.1)
    return tasks[0], back


@pytest.mark.slow
def test_a_node_that_comes_back_waits_for_a_restart_and_ends_0_when_the_job_finishes_without_it(
        tmp_path: Path, start_task):
    node0, back = _lose_node_1_and_bring_it_back(tmp_path, start_task)
    (tmp_path / "go-on").write_text("")
    assert wait_all([node0, back], timeout=120) == [0, 0], node0.output + back.output
    assert '"world": 1' in (tmp_path / "done.json").read_text()
    assert ("the job's workers are at restart 1 (this task was retried, or started late): node rank 1 joins them "
            "at the next restart") in back.output
    assert "the job's workers finished without this node" in back.output


@pytest.mark.slow
def test_a_node_that_comes_back_joins_at_the_next_restart(tmp_path: Path, start_task):
    node0, back = _lose_node_1_and_bring_it_back(tmp_path, start_task)
    (tmp_path / "crash").write_text("")
    (tmp_path / "go-on").write_text("")
    assert wait_all([node0, back], timeout=180) == [0, 0], node0.output + back.output
    done = (tmp_path / "done.json").read_text()
    assert '"world": 2' in done and '"restart": 2' in done and '"last": 158.0' in done, done
    lines = RESTART_LINE.findall(node0.output)
    assert [line[:2] for line in lines] == [("1", "2"), ("2", "2")], node0.output
    assert "world size 2" in lines[1][2]
    assert "node rank 1 came back (its task was retried) and joins restart 2" in node0.output


@pytest.mark.parametrize(("options", "message"), [
    (["--max-restarts", "-1"], "--max-restarts must be a whole number of restarts from 0 to 100, got '-1'"),
    (["--max-restarts", "abc"], "--max-restarts must be a whole number of restarts from 0 to 100, got 'abc'"),
    (["--max-restarts", "1000000"], "--max-restarts 1000000 is more than 100 restarts in one attempt"),
    (["--max-restarts", "1", "--min-nodes", "0"], "--min-nodes must be a whole number of nodes, at least 1"),
    (["--max-restarts", "1", "--min-nodes", "3"], "--min-nodes 3 must be from 1 to the job's 2 node(s)"),
    (["--min-nodes", "1"], "--min-nodes 1 needs --max-restarts 1 or more"),
    (["--mode", "per-node", "--max-restarts", "1"], "--max-restarts needs --mode per-gpu"),
    (["--mode", "per-node", "--min-nodes", "2"], "--min-nodes needs --mode per-gpu"),
])
def test_bad_recovery_options_are_one_line_and_exit_2_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, options, message):
    from paijob.runtime import cli

    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('must not run')\n")
    for key, value in task_env(free_port(), 0).items():
        monkeypatch.setenv(key, value)
    assert cli.main(["train", *options, str(script)]) == exitcodes.CONFIG_ERROR
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if not line.startswith(records.MARKER)]
    assert said == [f"paijob-runtime: error: {said[0].split('error: ', 1)[1]}"] and message in said[0], err
    assert "must not run" not in err


def test_with_min_nodes_a_task_started_before_the_master_has_an_address_exits_143(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    from paijob.runtime import cli

    env = task_env(free_port(), 1)
    del env["PAI_HOST_IP_worker_0"]  # gang allocation off: task 0 not placed yet
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("PAI_HOST_IP_worker_0", raising=False)
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('must not run')\n")
    assert cli.main(["train", "--max-restarts", "1", "--min-nodes", "1", str(script)]) == exitcodes.INFRA_FAILURE
    assert "OpenPAI starts this task before the master task is placed; exit 143" in capsys.readouterr().err
    assert cli.main(["train", str(script)]) == exitcodes.CONFIG_ERROR  # without --min-nodes: the job's fault
