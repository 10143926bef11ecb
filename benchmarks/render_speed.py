"""`paijob render ddp` against `python -c "import jinja2, yaml"`, in CPU time (target: at most 1.25x).

    .venv/bin/python benchmarks/render_speed.py            # 21 pairs
    .venv/bin/python benchmarks/render_speed.py --pairs 41

Why this yardstick: Jinja2 and PyYAML are what rendering needs, so the ratio is
paijob's own work (its imports, rendering, validation) over the libraries' import.
Each command runs as a whole process; its CPU time (user + system) is the
operating system's account of the finished child (``getrusage(RUSAGE_CHILDREN)``).
The two alternate (A B A B ...) and the ratio is taken pair by pair, then the
median: a machine whose speed drifts during the run moves both halves of a pair.

paijob is measured as a pip install leaves it: byte-compiled first (a checkout
run with PYTHONDONTWRITEBYTECODE would otherwise recompile every module each
time) and imported from this checkout by the path finder (PYTHONPATH), not through
an editable install's import hook, which a real install does not have.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile

from harness import BIN, PYTHON, ROOT, machine_info

TARGET = 1.25
RENDER = [str(BIN / "paijob"), "render", "ddp"]
YARDSTICK = [PYTHON, "-c", "import jinja2, yaml"]


def cpu_seconds(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """User + system seconds of one run of ``argv``, as the kernel accounts the finished child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(pairs: int) -> dict[str, object]:
    compileall.compile_dir(str(ROOT / "paijob"), quiet=1)
    compileall.compile_dir(str(ROOT / "templates"), quiet=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    render: list[float] = []
    bare: list[float] = []
    with tempfile.TemporaryDirectory() as cwd:  # no paijob.yaml of the caller's in the way
        for argv in (RENDER, YARDSTICK):  # warm-up: page cache, Jinja's bytecode cache
            cpu_seconds(argv, env, cwd)
        for _ in range(pairs):
            render.append(cpu_seconds(RENDER, env, cwd))
            bare.append(cpu_seconds(YARDSTICK, env, cwd))
    ratios = [a / b for a, b in zip(render, bare, strict=True) if b > 0]
    return {
        "pairs": pairs,
        "render_cpu_median_s": statistics.median(render),
        "yardstick_cpu_median_s": statistics.median(bare),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "target": TARGET,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=21, help="alternating runs of each command (default 21)")
    args = parser.parse_args()
    machine = machine_info()
    print(f"machine: {machine['cpu_model']}, {machine['cpu_cores']} cores, {machine['memory_gib']} GiB, "
          f"Python {machine['python']}, {machine['platform']}, paijob {machine['paijob_commit']}")
    result = measure(args.pairs)
    print(f"paijob render ddp:            {result['render_cpu_median_s'] * 1000:.1f} ms CPU (median)")
    print(f"python -c 'import jinja2, yaml': {result['yardstick_cpu_median_s'] * 1000:.1f} ms CPU (median)")
    print(f"ratio, median of {args.pairs} pairs: {result['ratio_median']:.2f} "
          f"(min {result['ratio_min']:.2f}, max {result['ratio_max']:.2f}; target <= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
