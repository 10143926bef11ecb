"""Client latency: `paijob render ddp` and `paijob validate` against a bare interpreter start.

Target: each under 4x `python -c pass`, and no torch import on the client side.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness import BIN, PYTHON, check, progress, summarize, timed

NO_TORCH_PROBE = (
    "import sys; from paijob.cli import main; "
    "code = main(['render', 'ddp', '-o', sys.argv[1]]); "
    "assert code == 0, code; "
    "assert 'torch' not in sys.modules, 'the client imported torch'"
)


def run(samples: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.yaml"
        check(timed([PYTHON, "-c", NO_TORCH_PROBE, str(job)]))
        commands = {
            "python -c pass": [PYTHON, "-c", "pass"],
            "paijob render ddp": [str(BIN / "paijob"), "render", "ddp"],
            "paijob validate": [str(BIN / "paijob"), "validate", str(job)],
        }
        for argv in commands.values():  # warm-up: bytecode caches, page cache
            check(timed(argv))
        raw: dict[str, list[float]] = {name: [] for name in commands}
        for i in range(samples):
            progress(f"client latency: round {i + 1}/{samples}")
            for name, argv in commands.items():  # alternated, so drift hits all alike
                raw[name].append(check(timed(argv)).seconds)
    bare = summarize(raw["python -c pass"])["median"]
    result: dict[str, object] = {"raw_seconds": raw, "torch_imported": False}
    for name in ("paijob render ddp", "paijob validate"):
        stats = summarize(raw[name])
        result[name] = {**stats, "ratio_to_bare_python": stats["median"] / bare, "target": 4.0}
    result["python -c pass"] = summarize(raw["python -c pass"])
    return result
