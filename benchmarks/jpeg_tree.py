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


def write_tree(root: Path, classes: int = 10, train_per_class: int = 100, val_per_class: int = 10,
               size: tuple[int, int] = (500, 375), seed: int = 0) -> Path:
    from PIL import Image, ImageFilter

    rng = random.Random(seed)
    width, height = size
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for cls in range(classes):
            folder = root / split / f"class{cls:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            base = tuple(rng.randrange(256) for _ in range(3))
            for index in range(count):
                image = Image.effect_noise((width // 8, height // 8), 64).convert("RGB")
                image = Image.blend(Image.new("RGB", image.size, base), image, 0.5)  # type: ignore[arg-type]
                image = image.resize((width, height), Image.BILINEAR).filter(ImageFilter.SMOOTH)
                noise = Image.effect_noise((width, height), 20).convert("RGB")
                image = Image.blend(image, noise, 0.15)
                image.save(folder / f"{split}_{cls}_{index:05d}.jpg", quality=90)
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
