"""`paijob render ddp` against `python -c "import jinja2, yaml"`, in CPU time (target: at most 1.25x).

    .venv/bin/python benchmarks/render_speed.py            # 21 pairs
    .venv/bin/python benchmarks/render_speed.py --pairs 41

Why this yardstick: Jinja2 and PyYAML are what rendering needs, so the ratio is
paijob's own work (its imports, rendering, validation) over the libraries' import.
Each command runs as a whole process; its CPU time (user + system) is the
operating system's account of the finished child (``getrusage(RUSAGE_CHILDREN)``).
The two alternate (A B A B ...) and the ratio is taken pair by pair, then the
median: a machine whose speed drifts during the run moves both halves of a pair.

paijob is measured as a pip install leaves it: a throwaway virtual environment
gets a copy of the package (the ``templates`` folder inside it as
``paijob.templates``, as setup.cfg's package_dir maps it), byte-compiled, and
the ``paijob`` console script this checkout's install wrote, pointed at that
environment's Python. Jinja2 and PyYAML come from this interpreter's
site-packages through a ``.pth`` line. Both commands run on that environment's
Python, so neither pays for the import hook of an editable install (the hook
loads ``pathlib``, ``re`` and ``importlib.util`` at start-up, which would
flatter paijob) and neither has anything the other lacks.
"""

from __future__ import annotations

import argparse
import compileall
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import BIN, PYTHON, ROOT, machine_info

TARGET = 1.25
ENTRY_POINT = BIN / "paijob"  # the console script pip wrote for this checkout


def cpu_seconds(argv: list[str], cwd: str) -> float:
    """User + system seconds of one run of ``argv``, as the kernel accounts the finished child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=cwd, stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def installed(where: Path) -> Path:
    """A virtual environment under ``where`` holding paijob as a pip install would; its ``bin`` folder."""
    import jinja2
    import yaml

    venv = where / "venv"
    subprocess.run([PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    site = Path(purelib)
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "paijob", site / "paijob", ignore=skip)
    shutil.copytree(ROOT / "templates", site / "paijob" / "templates", ignore=skip)
    compileall.compile_dir(str(site / "paijob"), quiet=1)
    libraries = {str(Path(module.__file__).parents[1]) for module in (jinja2, yaml)}
    (site / "render-speed-libraries.pth").write_text("".join(f"{path}\n" for path in sorted(libraries)))
    script = ENTRY_POINT.read_text(encoding="utf-8").split("\n", 1)[1]
    (venv / "bin" / "paijob").write_text(f"#!{python}\n{script}", encoding="utf-8")
    (venv / "bin" / "paijob").chmod(0o755)
    return venv / "bin"


def measure(pairs: int) -> dict[str, object]:
    render: list[float] = []
    bare: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = installed(Path(tmp))
        commands = ([str(bin_dir / "paijob"), "render", "ddp"],
                    [str(bin_dir / "python"), "-c", "import jinja2, yaml"])
        cwd = tempfile.mkdtemp(dir=tmp)  # no paijob.yaml of the caller's in the way
        for argv in commands:  # warm-up: page cache, Jinja's bytecode cache
            cpu_seconds(argv, cwd)
        for _ in range(pairs):
            render.append(cpu_seconds(commands[0], cwd))
            bare.append(cpu_seconds(commands[1], cwd))
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
