"""Run paijob's benchmarks: one command, JSON and a PNG chart out.

    python benchmarks/run.py                 # everything, 5 samples each
    python benchmarks/run.py --quick         # a smoke of the harness (minutes; CI runs client,launch)
    python benchmarks/run.py --only client,launch --samples 9

Benchmarks are measurements, not tests: they print the machine, every raw
sample and the medians, and write them to OUT/benchmarks-DATE.json. Ratios are
measured side by side in one run; quote absolute times only with the machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import bench_client
import bench_failure
import bench_gpu
import bench_launch
import bench_throughput
from harness import ROOT, machine_info, progress, write_json

BENCHMARKS = ("client", "launch", "throughput", "scaling", "failure", "gpu")


def _plan(samples: int, quick: bool) -> dict[str, Callable[[], dict[str, object]]]:
    max_procs = max(1, min(4, os.cpu_count() or 1))
    return {
        # Start-up times are short and noisy; more samples cost seconds.
        "client": lambda: bench_client.run(samples if quick else max(samples, 25)),
        "launch": lambda: bench_launch.run(samples),
        "throughput": lambda: bench_throughput.run(
            samples, epochs=1 if quick else 2, size=800 if quick else 4000,
            resnet_size=800 if quick else 2000),
        # Steady-state rates need more than 2 steps of 100 images per process and epoch.
        "scaling": lambda: bench_throughput.run_scaling(
            samples, max_procs, epochs=1 if quick else 2, size=400 * max_procs if quick else 4000),
        "failure": lambda: bench_failure.run(samples),
        # Ceiling, recipe and seed-004 tutorial on a GPU; recorded as skipped without CUDA.
        "gpu": lambda: bench_gpu.run(samples, quick),
    }


def _machine_tag(machine: dict[str, object]) -> str:
    """'h200' or 'cpu2': enough to tell result files of different machines apart."""
    gpus = machine.get("gpus") or []
    if isinstance(gpus, list) and gpus:
        return "-".join(str(gpus[0]).lower().replace("nvidia", "").split()) + f"x{len(gpus)}"
    return f"cpu{machine.get('cpu_cores')}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(BENCHMARKS),
                        help=f"comma list out of {','.join(BENCHMARKS)} (default: all)")
    parser.add_argument("--samples", type=int, default=5, help="runs per side (default 5)")
    parser.add_argument("--quick", action="store_true",
                        help="1 sample, tiny workloads: checks the harness, measures nothing worth quoting")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out",
                        help="folder for the JSON and the PNG (default benchmarks/out)")
    parser.add_argument("--no-chart", action="store_true", help="skip the PNG (no matplotlib needed)")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {','.join(BENCHMARKS)}")
    samples = 1 if args.quick else args.samples

    machine = machine_info()
    print("machine:", json.dumps(machine, sort_keys=True))
    results: dict[str, object] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        "samples_per_side": samples,
        "quick": args.quick,
        "benchmarks": {},
    }
    plan = _plan(samples, args.quick)
    json_path = args.out / f"benchmarks-{datetime.date.today().isoformat()}-{_machine_tag(machine)}.json"
    for name in chosen:
        progress(f"running {name}")
        outcome = plan[name]()
        results["benchmarks"][name] = outcome  # type: ignore[index]
        print(f"{name}:", json.dumps(outcome, sort_keys=True))
        write_json(json_path, results)  # after each, so a late failure loses nothing
    print(f"wrote {json_path}")
    if not args.no_chart:
        from chart import draw

        png = draw(results, json_path.with_suffix(".png"))
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
