"""The ``paijob-runtime`` command line and the small pieces the launcher is built from."""

from __future__ import annotations

import pytest

from paijob.common.cwd_safe import module_args
from paijob.common.options import build_parsers, split_train_argv
from paijob.runtime.config import LOCAL_RANK_MACRO, WorkerCommand, local_rank_style
from paijob.runtime.failure import Failure, choose_root_cause, is_consequence
from paijob.runtime.probe import count_visible_gpus


@pytest.mark.parametrize(
    ("argv", "ours", "command"),
    [
        (["train.py", "--lr", "1"], [], ["train.py", "--lr", "1"]),
        (["--nproc-per-node", "2", "train.py", "--mode", "x"], ["--nproc-per-node", "2"],
         ["train.py", "--mode", "x"]),
        (["--mode=per-node", "--local-rank-arg", "t.py"], ["--mode=per-node", "--local-rank-arg"],
         ["t.py"]),
        (["--backend", "gloo", "-m", "pkg.train", "--backend", "nccl"], ["--backend", "gloo"],
         ["-m", "pkg.train", "--backend", "nccl"]),
        (["--recipe", "cifar10", "--epochs", "1"], ["--recipe", "cifar10"], ["--epochs", "1"]),
        (["--apex-compat", "t.py"], ["--apex-compat"], ["t.py"]),
        (["--port-label", "p", "--", "--weird.py"], ["--port-label", "p"], ["--weird.py"]),
    ],
)
def test_options_stop_where_the_training_command_starts(argv, ours, command):
    _, train = build_parsers()
    assert split_train_argv(train, argv) == (ours, command)


def test_worker_command_forms():
    wrap = ("-u", *module_args("paijob.runtime.worker"))
    script = WorkerCommand(script="t.py", args=("--a", "1"), apex_compat="off")
    assert script.python_args() == (*wrap, "t.py", "--a", "1")
    legacy = WorkerCommand(script="t.py", args=("--a",), local_rank_arg="underscore",
                           apex_compat="off")
    assert legacy.python_args() == (*wrap, "t.py", f"--local_rank={LOCAL_RANK_MACRO}", "--a")
    assert legacy.python_args(3)[len(wrap) + 1] == "--local_rank=3"
    dash = WorkerCommand(script="t.py", local_rank_arg="dash", apex_compat="off")
    assert dash.python_args(1)[len(wrap) + 1] == "--local-rank=1"
    module = WorkerCommand(module="pkg.train", args=("x",))
    assert module.python_args() == (*wrap, "-m", "pkg.train", "x")
    recipe = WorkerCommand(recipe="cifar10", args=("--epochs", "1"))
    assert recipe.python_args() == (*wrap, "-m", "paijob.runtime.recipes", "cifar10", "--epochs",
                                    "1")
    apex = WorkerCommand(script="t.py", apex_compat="on")
    assert apex.python_args() == (*wrap, "-m", "paijob.runtime.apex_compat", "t.py")


@pytest.mark.parametrize(
    ("source", "style"),
    [
        ("p.add_argument('--local-rank', type=int)", "dash"),
        ('p.add_argument("--local_rank", type=int)', "underscore"),
        ("p.add_argument('--local-rank', '--local_rank', type=int)", "dash"),
        ("import os; rank = int(os.environ['LOCAL_RANK'])", "underscore"),
    ],
)
def test_local_rank_arg_auto_follows_the_spelling_the_script_declares(tmp_path, source, style):
    script = tmp_path / "t.py"
    script.write_text(source + "\n")
    assert local_rank_style("auto", str(script)) == style
    assert local_rank_style("dash", str(script)) == "dash"
    assert local_rank_style("auto", None) == "underscore"


def test_torchrun_underscore_spellings_are_aliases():
    parser, train = build_parsers()
    ours, rest = split_train_argv(train, ["--nproc_per_node=2", "--node_rank", "0",
                                          "--master_addr", "10.0.0.1", "--master_port", "29500",
                                          "--nnodes", "1", "--log_dir", "logs", "t.py"])
    assert rest == ["t.py"]
    args = parser.parse_args(["train", *ours])
    assert (args.nproc_per_node, args.node_rank, args.master_addr, args.master_port,
            args.nnodes, args.log_dir) == ("2", 0, "10.0.0.1", 29500, 1, "logs")


def test_apex_compat_auto_asks_the_detector(tmp_path):
    plain = tmp_path / "plain.py"
    plain.write_text("import torch\n")
    assert not WorkerCommand(script=str(plain)).uses_apex_compat()


def test_count_visible_gpus_without_torch():
    assert count_visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,3"}) == 3
    assert count_visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert count_visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == 0
    assert count_visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,2"}) == 1
    assert count_visible_gpus({}, nvidia_smi=lambda: 8) == 8
    assert count_visible_gpus({}, nvidia_smi=lambda: None) == 0


def _failure(rank, secondary, at, node=0):
    return Failure(node_rank=node, rank=rank, local_rank=0, returncode=1, secondary=secondary,
                   time=at)


def test_root_cause_prefers_the_first_real_failure_over_its_consequences():
    consequence = _failure(0, True, 1.0)
    cause = _failure(3, False, 2.0, node=1)
    later = _failure(2, False, 3.0, node=1)
    assert choose_root_cause([consequence, later, cause]) is cause
    assert choose_root_cause([]) is None
    assert is_consequence(RuntimeError("[gloo] Connection closed by peer [127.0.0.1]:1"))
    assert not is_consequence(ValueError("bad batch"))

    class DistNetworkError(RuntimeError):  # torch's own type, whatever its message says
        pass

    assert is_consequence(DistNetworkError("the store is gone"))
    again = Failure.from_json(cause.to_json())
    assert again == cause and again.exit_code == 1


def test_infrastructure_failures_exit_143():
    lost = Failure(node_rank=1, rank=None, local_rank=None, returncode=None, secondary=False,
                   time=0.0, reason="node rank 1 stopped sending heartbeats")
    assert lost.exit_code == 143 and lost.headline().startswith("node rank 1")


@pytest.mark.parametrize("style", ["auto", "dash", "underscore"])
def test_the_templates_local_rank_arg_value_reaches_paijob_runtime(style):
    import shlex

    from paijob.render.templating import render_template

    text = render_template("ddp", sets=["script=t.py", f"localRankArg={style}"]).text
    (command,) = [line for line in text.splitlines() if "paijob-runtime train" in line]
    words = shlex.split(command.split("- ", 1)[1])
    parser, train = build_parsers()
    ours, rest = split_train_argv(train, words[2:])
    assert rest == ["t.py"]
    assert parser.parse_args(["train", *ours]).local_rank_arg == style


def test_env_into_a_closed_pipe_is_quiet():
    """`paijob-runtime env | head -1`: the reader leaving early is no error and prints no traceback."""
    import os
    import subprocess
    import sys

    env = {"PAI_JOB_NAME": "u~j", "PAI_TASK_ROLE_LIST": "worker", "PAI_TASK_ROLE_TASK_COUNT_worker": "1",
           "PAI_CURRENT_TASK_ROLE_NAME": "worker", "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": "0",
           "PAI_HOST_IP_worker_0": "127.0.0.1", "PATH": "/usr/bin:/bin"}
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails with EPIPE
    try:
        done = subprocess.run([sys.executable, "-m", "paijob.runtime.cli", "env"], env=env, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 0
