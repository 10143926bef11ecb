"""The launcher->worker contract: every PAIJOB_* name written once, one worker environment for every mode.

Also OpenPAI's side of it: the fixed PAI_* names paijob-runtime reads are written once, in
paijob.openpai.taskenv (the module that builds a task's environment), and imported from there."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from paijob.common import contract
from paijob.common.contract import worker_env
from paijob.openpai import taskenv
from paijob.runtime.env import CLIENT_VARIABLES

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "paijob"
NAME = re.compile(r"\bPAIJOB_[A-Z0-9_]+")
FIXED_PAI = {k: v for k, v in vars(taskenv).items() if k.startswith("PAI_") and isinstance(v, str)}
ANY_PAI = re.compile(r"\bPAI_[A-Z0-9_]*[A-Z0-9]")
# Not yet converted on this branch: agent.py is being reworked beside it (issue 34); drop it from here once
# it imports its two PAI_* names from paijob.openpai.taskenv.
LAYOUT = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "4",
          "LOCAL_WORLD_SIZE": "2", contract.BACKEND: "gloo"}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (prose may name a variable)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for statement in body:
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                    found.add(id(statement.value))  # a docstring, or a string after an assignment
    return found


def _spelled(path: Path, pattern: re.Pattern[str] = NAME) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    prose = _docstrings(tree)
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
        for name in pattern.findall(node.value)
    ]


def _paijob_modules() -> list[Path]:
    """paijob's own code: not the contract, not paijob/scaffold (files `paijob init` gives the user)."""
    return [path for path in sorted(PACKAGE.rglob("*.py"))
            if path != PACKAGE / "common" / "contract.py" and "scaffold" not in path.parts]


def test_no_paijob_variable_is_spelled_outside_the_contract():
    spelled = [hit for path in _paijob_modules() for hit in _spelled(path)]
    assert spelled == [], "use paijob.common.contract's names:\n" + "\n".join(spelled)


def test_the_contract_names_every_variable_once_with_its_meaning():
    source = (PACKAGE / "common" / "contract.py").read_text()
    names = [v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)]
    assert len(names) == len(set(names))
    for name in names:
        assert re.search(rf'= "{name}"\n"""[^"]+', source), f"{name} has no docstring"


def test_the_fixed_pai_names_are_written_once_in_taskenv_as_themselves():
    assert {"PAI_TASK_ROLE_LIST", "PAI_CURRENT_TASK_ROLE_NAME", "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX",
            "PAI_TASK_INDEX", "PAI_JOB_NAME", "PAI_CURRENT_CONTAINER_IP", "PAI_CONTAINER_HOST_IP"} <= set(FIXED_PAI)
    assert all(name == value for name, value in FIXED_PAI.items())
    source = (PACKAGE / "openpai" / "taskenv.py").read_text()
    for name in FIXED_PAI:
        assert source.count(f'"{name}"') == 1, f"{name} is spelled more than once in taskenv.py"


def test_no_fixed_pai_name_is_spelled_outside_taskenv():
    fixed = re.compile(r"\b(" + "|".join(sorted(FIXED_PAI, key=len, reverse=True)) + r")\b")
    spelled = [hit for path in _paijob_modules() if path != PACKAGE / "openpai" / "taskenv.py"
               for hit in _spelled(path, fixed)]
    assert spelled == [], "import the name from paijob.openpai.taskenv:\n" + "\n".join(spelled)


def test_the_runtime_spells_no_pai_name_but_the_clients_own():
    """A PAI_* name the runtime reads comes from taskenv (a fixed one) or its functions (per role, per task)."""
    runtime = [path for path in sorted((PACKAGE / "runtime").rglob("*.py"))]
    spelled = [hit for path in runtime for hit in _spelled(path, ANY_PAI)
               if hit.rsplit(": ", 1)[1] not in CLIENT_VARIABLES]
    assert spelled == [], "name it in paijob.openpai.taskenv and import it:\n" + "\n".join(spelled)


def test_per_gpu_workers_get_the_layout_the_launcher_and_thread_share():
    env = worker_env({"PATH": "/bin"}, LAYOUT, mode="per-gpu", launcher_pid=7, precision="bf16",
                     world_size=4, workers=2, cores=8)
    assert env == {**LAYOUT, "PATH": "/bin", "PYTHONUNBUFFERED": "1", contract.PRECISION: "bf16",
                   contract.LAUNCHER_PID: "7", contract.RANK_PREFIXED: "1",
                   contract.KNOCK_ON_HOLD: "5.0", "OMP_NUM_THREADS": "4"}


def test_the_users_own_settings_win_and_the_base_is_not_changed():
    base = {"OMP_NUM_THREADS": "3", contract.KNOCK_ON_HOLD: "60", "PYTHONUNBUFFERED": "0"}
    env = worker_env(base, LAYOUT, mode="per-gpu", launcher_pid=7, world_size=4, workers=2, cores=8)
    assert env["OMP_NUM_THREADS"] == "3" and env[contract.KNOCK_ON_HOLD] == "60"
    assert env["PYTHONUNBUFFERED"] == "0" and contract.PRECISION not in env
    assert base == {"OMP_NUM_THREADS": "3", contract.KNOCK_ON_HOLD: "60", "PYTHONUNBUFFERED": "0"}


def test_a_worker_alone_holds_nothing_back():
    env = worker_env({}, LAYOUT, mode="per-gpu", launcher_pid=7, world_size=1, workers=1, cores=1)
    assert contract.KNOCK_ON_HOLD not in env and env["OMP_NUM_THREADS"] == "1"


def test_one_process_modes_get_no_rank_prefix_and_dataparallel_is_rank_zero_of_one():
    per_node = worker_env({}, LAYOUT, mode="per-node", launcher_pid=7)
    assert per_node == {**LAYOUT, "PYTHONUNBUFFERED": "1", contract.LAUNCHER_PID: "7",
                        contract.SPAWN_HOOK: "1"}  # the ranks are its mp.spawn children
    dp = worker_env({}, LAYOUT, mode="dataparallel", launcher_pid=7)
    assert {k: dp[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}


def test_the_hang_watchs_folder_and_interval_are_part_of_the_one_worker_environment():
    # assembled once here for every mode (launch.py and agent.py each used to add them)
    for mode in ("per-gpu", "per-node", "dataparallel"):
        env = worker_env({}, LAYOUT, mode=mode, launcher_pid=7, hang_dir="/tmp/h", hang_interval=0.5)
        assert env[contract.HANG_DIR] == "/tmp/h" and env[contract.HANG_INTERVAL] == "0.5"
    off = worker_env({}, LAYOUT, mode="per-gpu", launcher_pid=7, hang_dir=None)
    assert contract.HANG_DIR not in off and contract.HANG_INTERVAL not in off


def test_a_gloo_jobs_workers_keep_torchs_flight_recorder_while_the_hang_watch_is_on():
    """The evidence that names the rank whose collective differs (paijob.runtime.watch.node.recorder):
    on for gloo with the watch; the user's own setting (either of torch's names) wins; NCCL's,
    whose recorder also dumps files on a timeout, is left to the user."""
    on = worker_env({}, LAYOUT, mode="per-gpu", launcher_pid=7, hang_dir="/tmp/h")
    assert on[contract.FLIGHT_RECORDER] == str(contract.FLIGHT_RECORDER_ENTRIES)
    for base in ({contract.FLIGHT_RECORDER: "0"}, {"TORCH_NCCL_TRACE_BUFFER_SIZE": "100"}):
        env = worker_env(base, LAYOUT, mode="per-gpu", launcher_pid=7, hang_dir="/tmp/h")
        assert env.get(contract.FLIGHT_RECORDER) == base.get(contract.FLIGHT_RECORDER)
    off = worker_env({}, LAYOUT, mode="per-gpu", launcher_pid=7, hang_dir=None)
    nccl = worker_env({}, {**LAYOUT, contract.BACKEND: "nccl"}, mode="per-gpu", launcher_pid=7,
                      hang_dir="/tmp/h")
    assert contract.FLIGHT_RECORDER not in off and contract.FLIGHT_RECORDER not in nccl


def test_a_worker_gets_neither_the_stall_file_nor_the_record_key():
    """The local cluster shows a stall only from the runtime's own report (PAIJOB_STALL_FILE), and takes a
    failure record only signed with the task's key (PAIJOB_RECORD_KEY): the launcher has both, the user's
    code in a worker neither."""
    base = {contract.STALL_FILE: "/state/work/job/0/worker-0/.paijob-stall.json", contract.RECORD_KEY: "k",
            "HOME": "/root"}
    for mode in ("per-gpu", "per-node", "dataparallel", "horovod"):
        env = worker_env(base, LAYOUT, mode=mode)
        assert contract.STALL_FILE not in env and contract.RECORD_KEY not in env and env["HOME"] == "/root"
    assert contract.STALL_FILE in base  # the launcher's own environment is not changed


def test_the_runtime_takes_what_is_its_alone_out_of_its_environment_before_anything_starts(monkeypatch, capsys):
    """Per-gpu workers inherit the launcher's own environment (torch's agent): the keys and the cluster's
    record files must leave it (issue 55: they were in every worker's /proc/<pid>/environ)."""
    from paijob.runtime import cli, held

    given = {contract.RECORD_KEY: "the task's key", contract.NODE_KEY: "ab" * 16,
             contract.STALL_FILE: "/state/stall.json", contract.SLOW_FILE: "/state/slow.json"}
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(held, "_held", {})
    seen = {}
    monkeypatch.setattr(cli, "cmd_env", lambda args: seen.setdefault("env", dict(os.environ)) and 0)
    cli.main(["env"])
    assert not set(given) & set(seen["env"])
    assert {name: held.value(name) for name in given} == given and held.node_key() == b"ab" * 16


def test_on_openpai_the_node_key_is_the_jobs_own_secret(monkeypatch, tmp_path):
    from paijob.runtime import held

    monkeypatch.setattr(held, "_held", {})
    secrets = tmp_path / "secrets.yaml"
    assert held.node_key(str(secrets)) is None  # a job without it (rendered by an older paijob)
    secrets.write_text(f"other: x\n{contract.NODE_KEY_SECRET}: {'c' * 64}\n")  # js-yaml's dump of the map
    assert held.node_key(str(secrets)) == b"c" * 64
    secrets.write_text(f"{contract.NODE_KEY_SECRET}: not-hex\n")
    assert held.node_key(str(secrets)) is None


def test_a_horovod_slot_is_its_own_launcher():
    env = worker_env({}, {"RANK": "1"}, mode="horovod", precision="O1")
    assert env == {"RANK": "1", "PYTHONUNBUFFERED": "1", contract.PRECISION: "O1"}


def test_both_commands_end_an_interrupt_with_the_same_code(monkeypatch, capsys):
    from paijob import cli
    from paijob.commands import templates
    from paijob.common import exitcodes
    from paijob.runtime import cli as runtime_cli

    def interrupted(*_args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(templates, "list_templates", interrupted)
    monkeypatch.setattr(runtime_cli, "cmd_env", interrupted)
    assert cli.main(["templates"]) == exitcodes.INTERRUPTED == 130
    assert runtime_cli.main(["env"]) == exitcodes.INTERRUPTED
    assert capsys.readouterr().err == "paijob: interrupted\npaijob-runtime: interrupted\n"
