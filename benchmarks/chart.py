"""Draws the benchmark results as one PNG: each measure against its target, and scaling.

    python benchmarks/chart.py benchmarks/results/benchmarks-DATE-MACHINE.json   # redraw one
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench_throughput import comparisons


def _measures(found: dict[str, Any], throughput_target: float) -> list[tuple[str, float, float, bool]]:
    """(label, measured median, target, higher_is_better) for every measure present."""
    rows: list[tuple[str, float, float, bool]] = []
    if "launch" in found:
        for metric in ("to_first_step", "to_exit"):
            rows.append((f"launch {metric.replace('_', ' ')}: paijob-runtime / torchrun",
                         found["launch"][metric]["ratio"], 1.05, False))
    for model, data, entry in comparisons(found.get("throughput", {})):
        rows.append((f"steady images/s, {model}, {data}: recipe / tutorial loop",
                     entry["ratio"], throughput_target, True))
    if "client" in found:
        for name in ("paijob render ddp", "paijob validate"):
            rows.append((f"{name} / python -c pass", found["client"][name]["ratio_to_bare_python"],
                         4.0, False))
    if "failure" in found:
        rows.append(("crash to both nodes exited, seconds",
                     found["failure"]["crash_to_both_nodes_exited"]["median"], 5.0, False))
    return rows


def draw(results: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = results["benchmarks"]
    machine = results["machine"]
    figure, (measures_axis, scaling_axis) = plt.subplots(
        1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [1.6, 1]})

    rows = _measures(found, 1.25 if machine.get("gpus") else 1.0)  # the GPU / CPU targets
    positions = list(range(len(rows)))[::-1]
    for y, (_label, value, target, higher_is_better) in zip(positions, rows, strict=True):
        met = value >= target if higher_is_better else value <= target
        measures_axis.barh(y, value, color="#55A868" if met else "#C44E52")
        measures_axis.plot([target, target], [y - 0.4, y + 0.4], color="black", linewidth=2)
        goal = ">=" if higher_is_better else "<="
        measures_axis.annotate(f"{value:.2f} (target {goal} {target:g})", (value, y),
                               xytext=(4, -3), textcoords="offset points", fontsize=8)
    measures_axis.set_yticks(positions, [row[0] for row in rows], fontsize=8)
    measures_axis.set_xscale("log")
    measures_axis.set_title("medians against targets (black line; green = met)", fontsize=10)

    if "scaling" in found:
        points = found["scaling"]["points"]
        processes = [p["processes"] for p in points]
        scaling_axis.plot(processes, [p["images_per_second"] for p in points], "o-", label="measured")
        base = points[0]["images_per_second"]
        scaling_axis.plot(processes, [base * n for n in processes], "--", color="grey", label="linear")
        for p in points:
            scaling_axis.annotate(f"{p['efficiency']:.0%}", (p["processes"], p["images_per_second"]),
                                  xytext=(4, 4), textcoords="offset points")
        scaling_axis.set_xlabel("processes on one node")
        scaling_axis.set_ylabel("images/s (cifar10 recipe, synthetic, fp32)")
        scaling_axis.set_xticks(processes)
        scaling_axis.legend(fontsize=8)
    scaling_axis.set_title("scaling (label: efficiency)", fontsize=10)
    gpus = ", ".join(machine.get("gpus") or []) or "no GPU"
    figure.suptitle(f"paijob benchmarks {results['date']} — {machine['cpu_model']}, "
                    f"{machine['cpu_cores']} cores, {gpus}, torch {machine.get('torch')}", fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


if __name__ == "__main__":
    source = Path(sys.argv[1])
    print(draw(json.loads(source.read_text()), source.with_suffix(".png")))
