"""Write a small ImageNet-layout JPEG tree (``train/<class>/*.jpg``, ``val/<class>/*.jpg``), no download.

    python benchmarks/jpeg_tree.py OUT --classes 10 --train-per-class 1100 --val-per-class 50

Images are smooth per-class colour fields plus noise, at ImageNet-like sizes (about
500x375), JPEG quality 90, so decoding and RandomResizedCrop cost what they cost on
ImageNet. Deterministic for a seed. Needs PIL (Pillow); :func:`pil_missing` says why not.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
from pathlib import Path


def pil_missing() -> str | None:
    """None when PIL imports, else the reason to print and record."""
    if importlib.util.find_spec("PIL") is None:
        return "PIL (Pillow) is not installed: pip install pillow"
    return None


def _write_class(folder: Path, prefix: str, count: int, base: tuple[int, int, int], size: tuple[int, int]) -> None:
    from PIL import Image, ImageFilter

    width, height = size
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        image = Image.effect_noise((width // 8, height // 8), 64).convert("RGB")
        image = Image.blend(Image.new("RGB", image.size, base), image, 0.5)  # type: ignore[arg-type]
        image = image.resize((width, height), Image.BILINEAR).filter(ImageFilter.SMOOTH)
        noise = Image.effect_noise((width, height), 20).convert("RGB")
        image = Image.blend(image, noise, 0.15)
        image.save(folder / f"{prefix}_{index:05d}.jpg", quality=90)


def write_tree(root: Path, classes: int = 10, train_per_class: int = 100, val_per_class: int = 10,
               size: tuple[int, int] = (500, 375), seed: int = 0, workers: int = 1) -> Path:
    """The tree under ``root``; ``workers`` processes write classes side by side (the GPU check's
    minutes are counted)."""
    rng = random.Random(seed)
    jobs = []
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for cls in range(classes):
            base = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
            jobs.append((root / split / f"class{cls:04d}", f"{split}_{cls}", count, base, size))
    if workers <= 1:
        for job in jobs:
            _write_class(*job)
        return root
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers) as pool:
        for done in [pool.submit(_write_class, *job) for job in jobs]:
            done.result()
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--train-per-class", type=int, default=100)
    parser.add_argument("--val-per-class", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    reason = pil_missing()
    if reason:
        print(f"jpeg_tree: {reason}", file=sys.stderr)
        return 2
    write_tree(args.out, args.classes, args.train_per_class, args.val_per_class, seed=args.seed)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
