"""End to end on CPU: real ``paijob-runtime train`` processes with OpenPAI's environment."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from runtime_helpers import ROOT, RUNTIME, base_env, free_port, task_env, wait_all

ALLREDUCE = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist

    dist.init_process_group(os.environ["PAIJOB_BACKEND"])
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    assert world == 4, world
    assert total.item() == 0 + 1 + 2 + 3
    local = int(os.environ["LOCAL_RANK"])
    node = int(os.environ["NODE_RANK"])
    assert rank == node * int(os.environ["LOCAL_WORLD_SIZE"]) + local
    print(f"hello from rank {rank}", flush=True)
    with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as fh:
        json.dump({k: os.environ[k] for k in (
            "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
            "NNODES", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT")}, fh)
    dist.destroy_process_group()
    """
)


def test_two_nodes_with_two_workers_each_form_one_world(tmp_path: Path, start_task):
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    port = free_port()
    args = ["train", "--nproc-per-node", "2", str(script), str(tmp_path)]
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    codes = wait_all(tasks, timeout=120)
    assert codes == [0, 0], "\n".join(t.output for t in tasks)

    layout = {r: json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)}
    for rank, env in layout.items():
        assert env["RANK"] == str(rank)
        assert env["LOCAL_RANK"] == str(rank % 2)
        assert env["NODE_RANK"] == env["GROUP_RANK"] == str(rank // 2)
        assert env["WORLD_SIZE"] == "4" and env["LOCAL_WORLD_SIZE"] == "2"
        assert env["NNODES"] == "2" and env["NPROC_PER_NODE"] == "2"
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", str(port))
    # worker output is line-prefixed with the global rank
    assert "[rank3]: hello from rank 3" in tasks[1].output
    assert "[rank0]: hello from rank 0" in tasks[0].output
    # no silence between waiting for the other nodes and the workers' first words
    for task in tasks:
        assert f"all 2 nodes joined the rendezvous at 127.0.0.1:{port}; starting 2 worker(s)" in (
            task.output
        )


SPAWNING = textwrap.dedent(
    """
    import os, sys
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    def train(gpu, nproc):
        rank = int(os.environ["NODE_RANK"]) * nproc + gpu
        dist.init_process_group("gloo", init_method="env://",
                                world_size=int(os.environ["WORLD_SIZE"]), rank=rank)
        total = torch.tensor([1.0])
        dist.all_reduce(total)
        assert total.item() == dist.get_world_size() == 2
        print(f"spawned rank {rank} of {dist.get_world_size()}", flush=True)
        dist.destroy_process_group()

    if __name__ == "__main__":
        assert "RANK" not in os.environ  # per-node: the script makes its own ranks
        n = int(os.environ["NPROC_PER_NODE"])
        mp.spawn(train, nprocs=n, args=(n,))
    """
)


def test_per_node_mode_runs_the_command_once_per_node(tmp_path: Path, start_task):
    script = tmp_path / "spawning.py"
    script.write_text(SPAWNING)
    port = free_port()
    args = ["train", "--mode", "per-node", "--nproc-per-node", "1", str(script)]
    tasks = [start_task(args, task_env(port, i), name=f"node{i}") for i in (0, 1)]
    codes = wait_all(tasks, timeout=120)
    assert codes == [0, 0], "\n".join(t.output for t in tasks)
    assert "spawned rank 0 of 2" in tasks[0].output
    assert "spawned rank 1 of 2" in tasks[1].output


LEGACY = textwrap.dedent(
    """
    import argparse, os
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--tag")
    args = parser.parse_args()
    assert args.local_rank == int(os.environ["LOCAL_RANK"]), args
    assert args.tag == "x y"
    dist.init_process_group("gloo")
    total = torch.tensor([1.0])
    dist.all_reduce(total)
    print(f"legacy local_rank={args.local_rank} world={int(total.item())}", flush=True)
    dist.destroy_process_group()
    """
)


def test_standalone_without_pai_variables_and_local_rank_arg(tmp_path: Path, start_task):
    script = tmp_path / "legacy.py"
    script.write_text(LEGACY)
    task = start_task(
        ["train", "--nproc-per-node", "2", "--local-rank-arg", str(script), "--tag", "x y"],
        base_env(),
    )
    assert task.wait(timeout=120) == 0, task.output
    assert "legacy local_rank=0 world=2" in task.output
    assert "legacy local_rank=1 world=2" in task.output
    assert "standalone" in task.output and "127.0.0.1" in task.output


def test_local_rank_arg_auto_passes_the_dash_spelling_to_newer_scripts(tmp_path: Path):
    script = tmp_path / "newer.py"
    script.write_text(textwrap.dedent(
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--local-rank", type=int, required=True)  # torch >= 2.0 launch
        print(f"dash local_rank={parser.parse_args().local_rank}")
        """
    ))
    out = subprocess.run(
        [*RUNTIME, "train", "--mode", "per-node", "--local-rank-arg", str(script)],
        env=base_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "dash local_rank=0" in out.stdout


ENDS_WITH_A_STORE_CALL_IN_FLIGHT = textwrap.dedent(
    """
    import gc, sys, threading, time
    from datetime import timedelta
    from torch.distributed import TCPStore
    from paijob.runtime import cli

    class ReleasedAtTheEnd:
        # Garbage collected only by the interpreter's last collection, once it finalises: then it sets the key
        # the thread waits for and gives the thread's store call time to return (a loaded machine's timing).
        def __init__(self, store, sleep):
            self.store, self.sleep, self.cycle = store, sleep, self

        def __del__(self):
            self.store.set("go", "1")
            self.sleep(3)

    def fake_main(argv=None):
        timeout = timedelta(seconds=60)
        server = TCPStore("127.0.0.1", int(sys.argv[1]), is_master=True, wait_for_workers=False, timeout=timeout)
        client = TCPStore("127.0.0.1", server.port, is_master=False, wait_for_workers=False, timeout=timeout)
        threading.Thread(target=lambda: client.get("go"), daemon=True).start()  # a watcher's call, abandoned
        gc.set_threshold(0)  # no collection before the last one
        ReleasedAtTheEnd(server, time.sleep)
        print("node done", end="")
        ending = sys.argv[2]
        if ending == "raises":
            raise RuntimeError("a bug in paijob-runtime")
        if ending == "exits":
            sys.exit(3)
        return 0

    cli.main = fake_main
    cli.main_and_exit()
    """
)


@pytest.mark.parametrize(("ending", "code"), [("returns", 0), ("raises", 1), ("exits", 3)])
def test_paijob_runtime_exits_with_mains_code_while_a_store_call_is_still_inside_torch(
        tmp_path: Path, ending: str, code: int):
    """A daemon thread of the launcher's watchers may still be inside a torch store call when the node is done
    (a call past its bound on a loaded machine). The process must end with main's code and its output, not
    abort when that call returns during interpreter finalisation ("terminate called without an active
    exception", exit -6 on a node whose job succeeded), however main ends: a return, an exception nothing
    caught (a bug: Python's traceback and exit 1), ``sys.exit``."""
    script = tmp_path / "ends.py"
    script.write_text(ENDS_WITH_A_STORE_CALL_IN_FLIGHT)
    env = {k: v for k, v in base_env().items() if k != "PYTHONUNBUFFERED"}  # pipes buffer, as in a job
    out = subprocess.run([sys.executable, str(script), str(free_port()), ending], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert (out.returncode, out.stdout) == (code, "node done"), out.stderr
    assert ("RuntimeError: a bug in paijob-runtime" in out.stderr) == (ending == "raises"), out.stderr
    entry = configparser.ConfigParser()
    entry.read(ROOT / "setup.cfg")
    assert "paijob-runtime = paijob.runtime.cli:main_and_exit" in entry["options.entry_points"]["console_scripts"]


def test_env_command_prints_the_layout_without_importing_torch():
    probe = textwrap.dedent(
        """
        import sys
        from paijob.runtime.cli import main
        code = main(["env", "--json", "--nproc-per-node", "2"])
        assert "torch" not in sys.modules, "paijob-runtime env imported torch"
        sys.exit(code)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=task_env(15123, 1), capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    layout = json.loads(out.stdout)
    assert layout["node_rank"] == 1 and layout["world_size"] == 4
    assert layout["ranks"] == [2, 3] and layout["master_port"] == 15123
    assert layout["env"]["NODE_RANK"] == "1"


def test_env_command_prints_shell_exports():
    out = subprocess.run(
        [*RUNTIME, "env"], env=task_env(15124, 0), capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "export MASTER_PORT=15124" in out.stdout and "export NODE_RANK=0" in out.stdout


def test_missing_port_label_is_a_configuration_error(tmp_path: Path):
    env = task_env(15125, 1)
    del env["PAI_PORT_LIST_worker_0_SynPort"], env["PAI_worker_0_SynPort_PORT"]
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('must not run')\n")
    out = subprocess.run(
        [*RUNTIME, "train", str(script)], env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert "PAI_PORT_LIST_worker_0_SynPort" in out.stderr and "ports: {SynPort: 1}" in out.stderr
    assert "Traceback" not in out.stderr


def test_missing_script_is_a_configuration_error(tmp_path: Path):
    out = subprocess.run(
        [*RUNTIME, "train", str(tmp_path / "nope.py")], env=base_env(), capture_output=True,
        text=True, timeout=60, check=False,
    )
    assert out.returncode == 2 and "nope.py" in out.stderr and "not found" in out.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--master-timeout", "nan"], "--master-timeout must be a positive number of seconds, got nan"),
        (["--master-timeout", "inf"], "--master-timeout must be a positive number of seconds, got inf"),
        (["--master-timeout", "-1"], "--master-timeout must be a positive number of seconds, got -1"),
        (["--heartbeat-timeout", "nan"], "--heartbeat-timeout must be a positive number"),
        (["--nproc-per-node", "100000"], "--nproc-per-node 100000 is more than 4 workers per CPU core"),
        (["--log-dir", "/proc/x"], "--log-dir '/proc/x' cannot be used"),
        (["-m", "nosuch.module"], "module 'nosuch.module' not found"),
        (["--local-rank-arg=both", "t.py"], "invalid choice: 'both'"),
    ],
)
def test_bad_runtime_input_is_one_line_and_exit_2(tmp_path: Path, args, message):
    (tmp_path / "t.py").write_text("raise SystemExit('must not run')\n")
    if args[0] != "-m" and not args[-1].endswith(".py"):
        args = [*args, "t.py"]
    out = subprocess.run([*RUNTIME, "train", *args], env=base_env(), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr and "must not run" not in out.stderr
    assert len(out.stderr.strip().splitlines()) <= 3  # argparse: usage + error; ours: one line


def test_contradictory_pai_variables_are_one_line_and_exit_2(tmp_path: Path):
    env = task_env(15126, 1)
    env["PAI_TASK_INDEX"] = "0"
    out = subprocess.run([*RUNTIME, "train", "t.py"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert "PAI_TASK_INDEX=0 disagree" in out.stderr and "Traceback" not in out.stderr


SLOT = textwrap.dedent(
    """
    import json, os, sys
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK",
            "PAIJOB_PRECISION", "PAIJOB_BACKEND")
    print("slot", json.dumps({k: os.environ.get(k) for k in keys}), sys.argv[1:])
    import apex.amp  # paijob's stand-in: real apex is not installed here
    sys.exit(int(os.environ["RANK"]) + 3)
    """
)


def test_horovod_mode_runs_the_script_in_the_mpi_slot(tmp_path: Path):
    script = tmp_path / "slot.py"
    script.write_text(SLOT)
    env = base_env()
    env.update({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})
    out = subprocess.run(
        [*RUNTIME, "train", "--mode", "horovod", "--precision", "bf16", "--local-rank-arg=dash",
         str(script), "--x"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert out.returncode == 4, out.stderr  # the script's own sys.exit(RANK + 3)
    line = next(line for line in out.stdout.splitlines() if line.startswith("slot "))
    seen = json.loads(line[5:line.index("} ") + 1])
    assert seen == {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                    "NODE_RANK": "0", "PAIJOB_PRECISION": "bf16", "PAIJOB_BACKEND": "gloo"}
    assert line.endswith("['--local-rank=1', '--x']")


def test_horovod_mode_outside_mpi_says_how_to_start_it(tmp_path: Path):
    (tmp_path / "t.py").write_text("raise SystemExit('must not run')\n")
    out = subprocess.run([*RUNTIME, "train", "--mode", "horovod", "t.py"], env=base_env(),
                         cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "mpirun -np N" in out.stderr


THREADS = textwrap.dedent(
    """
    import os
    print(f"threads local_rank={os.environ['LOCAL_RANK']} omp={os.environ.get('OMP_NUM_THREADS')}")
    """
)


def test_workers_share_the_cores_unless_the_user_set_omp_num_threads(tmp_path: Path, start_task):
    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    env = base_env()
    del env["OMP_NUM_THREADS"]
    sized = start_task(["train", "--nproc-per-node", "2", str(script)], env, name="sized")
    assert sized.wait(timeout=120) == 0, sized.output
    expected = max(1, len(os.sched_getaffinity(0)) // 2)
    assert f"threads local_rank=1 omp={expected}" in sized.output

    kept = start_task(["train", "--nproc-per-node", "2", str(script)],
                      {**env, "OMP_NUM_THREADS": "7"}, name="kept")
    assert kept.wait(timeout=120) == 0, kept.output
    assert "threads local_rank=0 omp=7" in kept.output


TRAINS = textwrap.dedent(
    """
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_a_training_run_leaves_nothing_in_tmpdir(tmp_path: Path, start_task):
    script = tmp_path / "trains.py"
    script.write_text(TRAINS)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = base_env()
    env["TMPDIR"] = str(tmpdir)
    # torch's per-user compile cache (torchinductor_$USER, made when an optimizer is built,
    # kept on purpose across runs) is the user's torch's, not the runtime's: put it aside
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor-cache")
    task = start_task(["train", "--nproc-per-node", "2", str(script)], env)
    assert task.wait(timeout=120) == 0, task.output
    assert "[rank1]: step 4 loss" in task.output
    assert list(tmpdir.iterdir()) == []  # was torchelastic_*/ with every worker's output
