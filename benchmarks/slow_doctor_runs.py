"""How often the slow-rank doctor is right: the slow stage's real jobs, run again and again.

``tests/runtime/watch/slow/test_slow_ranks.py`` starts six 2-node x 2-worker gloo jobs at once on
loopback (one rank slowed in compute, one in data loading, one under a 1 % CPU quota, a whole node
slowed, rank 0 evaluating alone for 30 s, a balanced job) and checks what node 0's doctor said.
One pass of it is one sample; this runs it ``--runs`` times and counts, per test, how many passed,
optionally with every core kept busy by ``stress-ng --cpu N`` (the "busy machine" of issue 44) and
with a longer training time (``PAIJOB_TEST_SLOW_SECONDS``: 180 gives the balanced job 3 minutes).
A test passes only when its verdict was said while the job trained (the first line, not the
final summary), so "named" here means named within the training time.

    python benchmarks/slow_doctor_runs.py --runs 5 [--stress] [--seconds 180] [--out FILE]

Writes the tally and every run's outcomes as JSON (``--out``; default
``benchmarks/results/slow-doctor-runs-DATE[-stress]-cpuN.json``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE = "tests/runtime/watch/slow/test_slow_ranks.py"


def one_run(seconds: float | None, folder: Path) -> tuple[dict[str, str], float]:
    """One pass of the module: each test's outcome (passed, failed, skipped, error), and its wall time."""
    report = folder / "junit.xml"
    env = dict(os.environ)
    if seconds is not None:
        env["PAIJOB_TEST_SLOW_SECONDS"] = str(seconds)
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "pytest", "-m", "slow", MODULE, "-q", "-p", "no:randomly",
                    f"--basetemp={folder / 'tmp'}", f"--junitxml={report}"],
                   cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.monotonic() - began
    outcomes: dict[str, str] = {}
    if report.exists():
        for case in ET.parse(report).getroot().iter("testcase"):
            found = {child.tag for child in case}
            outcomes[case.get("name", "?")] = ("failed" if "failure" in found else "error" if "error" in found
                                               else "skipped" if "skipped" in found else "passed")
    return outcomes, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="passes of the module (default 5)")
    parser.add_argument("--stress", action="store_true", help="keep every core busy with stress-ng --cpu N")
    parser.add_argument("--seconds", type=float, default=None,
                        help="training seconds of each job (default: the module's own, 80)")
    parser.add_argument("--out", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    cores = os.cpu_count() or 1
    stress = None
    if args.stress:
        if shutil.which("stress-ng") is None:
            parser.error("--stress needs stress-ng (apt-get install stress-ng)")
        stress = subprocess.Popen(["stress-ng", "--cpu", str(cores), "--quiet"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = []
    try:
        for index in range(args.runs):
            load = os.getloadavg()[0]
            with tempfile.TemporaryDirectory(prefix="paijob-slow-runs-") as folder:
                outcomes, wall = one_run(args.seconds, Path(folder))
            runs.append({"run": index + 1, "wall_s": round(wall, 1), "load_before": round(load, 2),
                         "outcomes": outcomes})
            passed = sum(o == "passed" for o in outcomes.values())
            print(f"run {index + 1}/{args.runs}: {passed}/{len(outcomes)} passed in {wall:.0f} s "
                  f"(load average {load:.1f} before)", flush=True)
    finally:
        if stress is not None:
            stress.terminate()
            stress.wait(timeout=30)
    tally: dict[str, dict[str, int]] = {}
    for run in runs:
        for name, outcome in run["outcomes"].items():
            tally.setdefault(name, {}).setdefault(outcome, 0)
            tally[name][outcome] += 1
    result = {
        "what": "tests/runtime/watch/slow/test_slow_ranks.py run again and again: each test's outcomes",
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {"cores": cores, "platform": platform.platform(), "python": platform.python_version()},
        "stress": f"stress-ng --cpu {cores}" if args.stress else None,
        "training_seconds": args.seconds or 80,
        "runs": runs,
        "tally": tally,
    }
    suffix = ("-stress" if args.stress else "") + (f"-{int(args.seconds)}s" if args.seconds else "")
    out = args.out or ROOT / "benchmarks" / "results" / f"slow-doctor-runs-{time.strftime('%Y-%m-%d')}{suffix}-cpu{cores}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for name, counts in sorted(tally.items()):
        print(f"{name}: " + ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
