"""Draws the benchmark results as one PNG: ratios against their targets, and scaling."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def draw(results: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = results["benchmarks"]
    machine = results["machine"]
    figure, (ratios_axis, scaling_axis) = plt.subplots(1, 2, figsize=(12, 4.5))

    labels, values, targets = [], [], []
    if "launch" in found:
        for metric in ("to_first_step", "to_exit"):
            labels.append(f"launch {metric.replace('_', ' ')}\npaijob / torchrun")
            values.append(found["launch"][metric]["ratio"])
            targets.append(1.05)
    if "throughput" in found:
        for data in ("synthetic", "cifar10-format"):
            if data in found["throughput"]:
                labels.append(f"images/s {data}\nrecipe / tutorial")
                values.append(found["throughput"][data]["ratio"])
                targets.append(1.0)
    if "client" in found:
        for name in ("paijob render ddp", "paijob validate"):
            labels.append(f"{name}\n/ python -c pass")
            values.append(found["client"][name]["ratio_to_bare_python"])
            targets.append(4.0)
    if "failure" in found:
        labels.append("crash to exit (s)\n2-node local job")
        values.append(found["failure"]["crash_to_both_nodes_exited"]["median"])
        targets.append(5.0)
    positions = range(len(labels))
    ratios_axis.bar(positions, values, color="#4C72B0", label="measured (median)")
    ratios_axis.scatter(positions, targets, marker="_", s=900, color="#C44E52", label="target")
    ratios_axis.set_xticks(list(positions), labels, fontsize=7)
    ratios_axis.set_title("ratios and latencies against targets")
    ratios_axis.legend(fontsize=8)

    if "scaling" in found:
        points = found["scaling"]["points"]
        processes = [p["processes"] for p in points]
        scaling_axis.plot(processes, [p["images_per_second"] for p in points], "o-", label="measured")
        ideal = points[0]["images_per_second"]
        scaling_axis.plot(processes, [ideal * n for n in processes], "--", color="grey", label="linear")
        for p in points:
            scaling_axis.annotate(f"{p['efficiency']:.0%}", (p["processes"], p["images_per_second"]))
        scaling_axis.set_xlabel("processes")
        scaling_axis.set_ylabel("images/s (cifar10 recipe, synthetic)")
        scaling_axis.set_xticks(processes)
        scaling_axis.legend(fontsize=8)
    scaling_axis.set_title("scaling")
    gpus = ", ".join(machine.get("gpus") or []) or "no GPU"
    figure.suptitle(f"paijob benchmarks {results['date']} — {machine['cpu_model']}, "
                    f"{machine['cpu_cores']} cores, {gpus}, torch {machine.get('torch')}", fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
