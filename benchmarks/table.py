"""Prints the performance table of docs/performance.md from a results JSON, so the page quotes the file.

    python benchmarks/table.py benchmarks/results/benchmarks-DATE-MACHINE.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench_throughput import RESNET, comparisons


def _launch_row(label: str, entry: dict[str, Any]) -> str:
    ours, theirs = entry["paijob-runtime"]["median"], entry["torchrun"]["median"]
    return f"| {label} | {entry['ratio']:.2f} ({ours:.1f} s / {theirs:.1f} s) | ≤ 1.05 |"


def _context(entry: dict[str, Any]) -> str:
    """The wall-clock ratio and the thread-capped tutorial, when the run measured them."""
    extra = ""
    if "whole_loop" in entry:
        whole = entry["whole_loop"]
        extra += (f"; whole loop incl. each epoch's start-up {whole['ratio']:.1f}× "
                  f"({whole['recipe']['median']:.0f} / {whole['tutorial']['median']:.0f})")
    if "ratio_to_threads_capped" in entry:
        capped = entry["tutorial_threads_capped"]
        extra += (f"; {entry['ratio_to_threads_capped']:.2f}× the tutorial at OMP_NUM_THREADS="
                  f"{capped['omp_num_threads']} ({capped['median']:.0f})")
    return extra


def gpu_rows(gpu: dict[str, Any]) -> list[str]:
    """The GPU block: recipe / ceiling per precision, recipe / tutorial on JPEGs, scaling."""
    if "skipped" in gpu:
        return [f"| GPU sides (ceiling, recipe, seed-004 tutorial) | not measured: {gpu['skipped']} | — |"]
    rows = []
    where = f"{gpu['gpu']}, {gpu['arch']}, batch {gpu['batch_size_per_gpu']}"
    for precision, entry in gpu.get("synthetic", {}).items():
        for mode in ("eager", "compiled"):
            recipe, ceiling = entry[f"recipe_{mode}"]["median"], entry[f"ceiling_{mode}"]["median"]
            rows.append(f"| images/s, `--recipe imagenet --data synthetic` / the ceiling step, {mode}, "
                        f"{precision}, {where} | {entry[f'of_ceiling_{mode}']:.2f} ({recipe:.0f} / {ceiling:.0f})"
                        f" | ≥ 0.9 |")
        if "recipe_compiled_cudagraphs" in entry:
            graphs, ceiling = entry["recipe_compiled_cudagraphs"]["median"], entry["ceiling_compiled"]["median"]
            rows.append(f"| same, `--compile-mode reduce-overhead` (CUDA graphs), {precision} | "
                        f"{graphs / ceiling:.2f} ({graphs:.0f} / {ceiling:.0f}) | ≥ 0.9 |")
        startup = entry.get("compile_startup_seconds")
        if startup:
            rows.append(f"| `--compile` start-up cost, {precision} | {startup['median']:.0f} s | — |")
    jpeg = gpu.get("jpeg", {})
    if "skipped" in jpeg:
        rows.append(f"| images/s on a JPEG ImageFolder tree | not measured: {jpeg['skipped']} | — |")
    elif jpeg:
        rows.append(f"| images/s, `--recipe imagenet` / the seed-004 tutorial loop, JPEG tree of {jpeg['images']} "
                    f"images, {jpeg['workers']} workers, O2, {where} | {jpeg['ratio_O2']:.2f}× "
                    f"({jpeg['recipe_O2']['median']:.0f} / {jpeg['tutorial_O2']['median']:.0f}) | ≥ 1.3 |")
    scaling = gpu.get("scaling", {})
    if "points" in scaling:
        points = scaling["points"]
        speeds = " → ".join(f"{p['images_per_second']:.0f}" for p in points)
        efficiency = ", ".join(f"{p['efficiency']:.0%}" for p in points[1:])
        rows.append(f"| scaling, recipe images/s at {' → '.join(str(p['gpus']) for p in points)} GPUs, bf16 | "
                    f"{speeds} (efficiency {efficiency}) | — |")
    return rows


def table(results: dict[str, Any]) -> str:
    found = results["benchmarks"]
    rows = ["| measure | median | target |", "| --- | --- | --- |"]
    if "launch" in found:
        launch = found["launch"]
        nproc = launch["nproc_per_node"]
        rows.append(_launch_row(f"launch to first training step, `paijob-runtime train` (simulated 1-node "
                                f"PAI job) / `torchrun --standalone`, {nproc} workers", launch["to_first_step"]))
        rows.append(_launch_row("launch to exit, same", launch["to_exit"]))
    throughput = found.get("throughput", {})
    words = {"synthetic": "synthetic data", "cifar10-format": "CIFAR-10-format files"}
    for model, data, entry in comparisons(throughput):
        steady = "steady-state " if "whole_loop" in entry else ""
        rows.append(
            f"| {steady}images/s, `--recipe cifar10` / the tutorial's hand-written DDP loop, {model}, "
            f"{words[data]}, {throughput['nproc_per_node']} processes, {throughput['precision']}, batch "
            f"{throughput['batch_size_per_process']} | {entry['ratio']:.2f}× ({entry['recipe']['median']:.0f}"
            f" / {entry['tutorial']['median']:.0f}){_context(entry)} | ≥ 1.0 on CPU, ≥ 1.25 on GPU |")
    skipped = throughput.get(RESNET, {}).get("skipped")
    if skipped:
        rows.append(f"| images/s, ResNet-18 | not measured: {skipped} | — |")
    if "client" in found:
        client = found["client"]
        bare = client["python -c pass"]["median"] * 1000
        for name in ("paijob render ddp", "paijob validate"):
            entry = client[name]
            met = "" if entry["ratio_to_bare_python"] < entry["target"] else " — **not met**"
            rows.append(f"| `{name}` / `python -c pass` | {entry['ratio_to_bare_python']:.1f}× "
                        f"({entry['median'] * 1000:.0f} ms / {bare:.0f} ms) | < 4×{met} |")
    if "failure" in found:
        rows.append("| one worker crashes in a 2-node local job → both nodes' `paijob-runtime` exited | "
                    f"{found['failure']['crash_to_both_nodes_exited']['median']:.2f} s | ≤ 5 s |")
    if "scaling" in found:
        points = found["scaling"]["points"]
        speeds = " → ".join(f"{p['images_per_second']:.0f}" for p in points)
        efficiency = ", ".join(f"{p['efficiency']:.0%}" for p in points[1:])
        rows.append(f"| scaling, recipe images/s at 1 → {points[-1]['processes']} processes | {speeds} "
                    f"(efficiency {efficiency}) | — |")
    if "gpu" in found:
        rows.extend(gpu_rows(found["gpu"]))
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(json.loads(Path(sys.argv[1]).read_text())))
