"""Runs one module's tests against mutant after mutant, each in a fork of a warm process.

Why: starting Python and importing pytest, hypothesis and the test files'
third-party packages costs more than the tests of a pure module take. This
process imports all of that once, then forks a child per mutant that loads
the mutant in place of the module (``overlay/sitecustomize.py``) and runs
``pytest.main``. paijob's own modules and the tests are never imported here,
so every child imports them afresh, the mutant included.

Protocol (``mutate.py`` drives it): argv is the pytest arguments; each stdin
line is JSON ``{"module", "file", "timeout"}`` (module null: no mutant); each
reply line is JSON ``{"rc"}``, rc null when the child ran past its timeout.
The first reply is the warm-up run's, with no mutant.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import sitecustomize  # the overlay's (PYTHONPATH), which install()s a mutant

ROOT = Path.cwd().resolve()
sys.path.insert(0, str(ROOT))  # the checkout being tested, not whichever one paijob is installed from


def _child(args: list[str], module: str | None, file: str | None, timeout: float, modules_out: str | None) -> None:
    code = 3
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # stdin and stdout are this server's protocol: no test may touch them
            os.dup2(devnull, fd)
        signal.alarm(max(1, int(timeout)))  # mutate.py passes -p no:timeout, whose alarm would replace this
        if module and file:
            sitecustomize.install(module, file)
        import pytest

        code = int(pytest.main(args))
        if modules_out:
            Path(modules_out).write_text("\n".join(sorted(sys.modules)))
    finally:
        os._exit(code)


def run(args: list[str], module: str | None, file: str | None, timeout: float,
        modules_out: str | None = None) -> int | None:
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        _child(args, module, file, timeout, modules_out)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return None if os.WTERMSIG(status) == signal.SIGALRM else -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _ours() -> set[str]:
    """Top-level names of paijob and of every module under tests/ (pytest puts test folders on sys.path)."""
    names = {"paijob", "conftest", "__main__"}
    for path in (ROOT / "tests").rglob("*"):
        if path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").is_file()):
            names.add(path.stem)
    return names


def warm(args: list[str]) -> int | None:
    """Run the tests once without a mutant, then import what they imported from outside the checkout."""
    with tempfile.NamedTemporaryFile("r", suffix=".txt") as listing:
        code = run(args, None, None, 600, listing.name)
        names = listing.read().split()
    ours = _ours()
    for name in names:
        if name.split(".")[0] in ours:
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - one that imports only inside pytest is left to the child
            continue
    leaked = sorted(name for name in sys.modules if name.split(".")[0] in ours - {"__main__"})
    if leaked:  # a third-party module imported paijob or a test helper: the children would share it
        raise SystemExit(f"forkserver: warming up imported {', '.join(leaked)}")
    return code


def main() -> None:
    args = sys.argv[1:]
    # every child's temporary files under one folder of this server's, removed when it ends: a child stopped
    # at its timeout never runs the tests' own clean-up (tests/conftest.py's scratch folder stayed in /tmp)
    own = tempfile.mkdtemp(prefix="paijob-mutation-")
    os.environ["TMPDIR"] = own
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    try:
        print(json.dumps({"rc": warm(args)}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            print(json.dumps({"rc": run(args, request["module"], request["file"], request["timeout"])}), flush=True)
    finally:
        shutil.rmtree(own, ignore_errors=True)


if __name__ == "__main__":
    main()
