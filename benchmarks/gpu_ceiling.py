"""The ceiling: the best-practice training step with nothing else in the way.

    python benchmarks/gpu_ceiling.py --arch resnet50 --batch-size 256 --precision bf16 [--compile]

One fixed batch lives on the device (no data loading at all), the model and input are
channels_last, cudnn.benchmark is on, the optimizer is the recipes' SGD (``make_sgd``: fused
where torch has it, zeroed momentum buffers), fp16 uses GradScaler, bf16 autocast, apex-style O2
maps to fp16 autocast here. Rates are timed after warm-up with the device synchronised only at
the ends. Each step's loss is kept on the device and read once at the end: the report says
whether all were finite and the mean of the first and last ten (a fixed batch is memorised, so
a step that trains shows a falling loss). The recipe is measured against this number. Runs on
a CPU too (for the harness's own tests), where it means little.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from paijob.runtime.recipes.models import build_model  # noqa: E402
from paijob.runtime.recipes.stepper import make_sgd  # noqa: E402

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16, "O1": torch.float16, "O2": torch.float16}


def measure(arch: str, batch: int, image_size: int, num_classes: int, precision: str, compile_mode: str | None,
            steps: int, warmup: int, device: torch.device) -> dict[str, object]:
    cuda = device.type == "cuda"
    torch.backends.cudnn.benchmark = True
    model = build_model(arch, num_classes, image_size).to(device)
    memory = torch.channels_last if cuda else torch.contiguous_format
    model = model.to(memory_format=memory)  # type: ignore[call-overload]
    optimizer = make_sgd(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, fused=cuda)
    dtype = DTYPES[precision]
    if dtype is torch.float16 and not cuda:
        dtype = torch.bfloat16
    scaler = torch.amp.GradScaler(device.type, enabled=dtype is torch.float16)
    images = torch.randn(batch, 3, image_size, image_size, device=device).contiguous(memory_format=memory)
    labels = torch.randint(0, num_classes, (batch,), device=device)
    criterion = nn.CrossEntropyLoss()
    forward = torch.compile(model, mode=compile_mode) if compile_mode is not None else model

    losses = torch.zeros(warmup + steps, device=device)

    def step(index: int) -> None:
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = criterion(forward(images).float(), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses[index].copy_(loss.detach())

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    start = time.perf_counter()
    for index in range(warmup):
        step(index)
    sync()
    warmup_s = time.perf_counter() - start
    start = time.perf_counter()
    for index in range(warmup, warmup + steps):
        step(index)
    sync()
    seconds = time.perf_counter() - start
    values = losses.tolist()
    ends = max(1, min(10, len(values) // 2))
    return {
        "arch": arch, "batch_size": batch, "image_size": image_size, "precision": precision,
        "compile_mode": compile_mode, "steps": steps, "warmup_steps": warmup,
        "warmup_seconds": warmup_s, "images_per_second": batch * steps / seconds,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__,
        "losses_finite": all(math.isfinite(v) for v in values),
        "loss_first": sum(values[:ends]) / ends, "loss_last": sum(values[-ends:]) / ends,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--precision", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--compile-mode", default=None, help="torch.compile mode (implies --compile)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--report-json", type=Path, default=None)
    args = parser.parse_args(argv)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    mode = args.compile_mode or ("default" if args.compile else None)
    result = measure(args.arch, args.batch_size, args.image_size, args.num_classes, args.precision, mode,
                     args.steps, args.warmup, device)
    text = json.dumps(result, sort_keys=True)
    if args.report_json:
        args.report_json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
