"""End to end on CPU: real ``paijob-runtime train`` processes with OpenPAI's environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import RUNTIME, base_env, free_port, task_env, wait_all

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
