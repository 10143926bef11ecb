"""The client side never imports torch, and `paijob render` stays fast."""

from __future__ import annotations

import subprocess
import sys
import time

from render_helpers import ROOT

SCRIPT = """
import sys, io, contextlib
from paijob.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(["render", "ddp", "--set", "instances=4", "--set", "gpu=8"])
assert code == 0, code
assert "paijob-runtime train" in out.getvalue()
assert "torch" not in sys.modules, "paijob render imported torch"
print("ok")
"""


def test_render_in_a_fresh_interpreter_never_imports_torch() -> None:
    # A fresh interpreter: other tests in this process may have imported torch.
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_render_in_process_is_fast_once_imported() -> None:
    from paijob.render.templating import render_template

    render_template("ddp")  # warm: imports and template compilation
    # this process's CPU time, not the wall clock: other work on a busy machine stretches the
    # latter without making paijob any slower (the benchmarks measure wall time, on a quiet one)
    start = time.process_time()
    for _ in range(10):
        render_template("ddp", sets=["instances=4", "gpu=8"])
    per_render = (time.process_time() - start) / 10
    assert per_render < 0.05, f"{per_render * 1000:.1f} ms of CPU per render"


def test_building_the_cli_parser_does_not_load_jinja() -> None:
    # `paijob --help`, `paijob status` ... must not pay for the template engine.
    assert_not_loaded_after(
        "from paijob.cli import build_parser\nbuild_parser()\n",
        ("jinja2", "paijob.render.templating", "paijob.validate.report", "torch"),
    )


def test_render_imports_neither_the_cluster_verbs_nor_requests() -> None:
    assert_not_loaded_after(
        "import io, contextlib\nfrom paijob.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['render', 'ddp']) == 0\n",
        ("paijob.commands._common", "paijob.remote.client", "requests", "torch", "jsonschema"),
    )


def assert_not_loaded_after(code: str, modules: tuple[str, ...]) -> None:
    """Run ``code`` in a fresh interpreter and check it imported none of ``modules``."""
    script = f"import sys\n{code}loaded = [m for m in {modules!r} if m in sys.modules]\nassert not loaded, loaded\n"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
