"""Data for the recipes: synthetic images, CIFAR-10 python pickles, ImageFolder trees.

Everything produces ``uint8`` image batches ``(B, 3, H, W)`` plus ``int64``
labels; conversion to float, normalisation and (for in-memory sources) the
random crop/flip augmentation run on the training device, batched, so no
DataLoader workers are needed for in-memory data.

The CIFAR-10 reader understands the official ``cifar-10-batches-py`` files
without numpy: the pickles hold a numpy array, which a restricted unpickler
rebuilds directly as bytes (and refuses any other global, so a malicious
pickle cannot run code).
"""

from __future__ import annotations

import codecs
import ctypes
import io
import os
import pickle
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from paijob.errors import PaijobError

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2023, 0.1994, 0.2010)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_FILES = ("test_batch",)


class DataError(PaijobError):
    """The data folder is missing or not in the expected layout."""


# ---------------------------------------------------------------------------------------
# In-memory sources


class InMemoryImages:
    """Images held as one uint8 tensor; ``get_batch`` is a single gather."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, num_classes: int) -> None:
        self.images = images
        self.labels = labels
        self.num_classes = num_classes

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def image_size(self) -> int:
        return int(self.images.shape[-1])

    def get_batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[indices], self.labels[indices]

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images, self.labels


class SyntheticImages:
    """Deterministic, learnable fake images: the same dataset on every rank for a seed.

    Each class has a smooth random prototype; an image is its class prototype
    plus one of a bank of noise images. Nothing depends on the rank or on the
    order of access: ``get_batch(i)`` is a pure function of (seed, split, i).
    Large image sizes (ImageNet) are generated on the fly, small ones kept.
    """

    def __init__(self, size: int, num_classes: int, image_size: int, seed: int, split: str) -> None:
        self.num_classes = num_classes
        self.image_size = image_size
        self._size = size
        proto_gen = torch.Generator().manual_seed(seed * 7919 + 17)
        split_gen = torch.Generator().manual_seed(seed * 7919 + (1 if split == "train" else 2))
        low = max(4, image_size // 8)
        prototypes = torch.rand(num_classes, 3, low, low, generator=proto_gen)
        self._prototypes = F.interpolate(prototypes, size=(image_size, image_size), mode="bilinear",
                                         align_corners=False) if num_classes * 3 * image_size**2 <= 2**24 else None
        self._low_prototypes = prototypes
        self.labels = torch.randint(0, num_classes, (size,), generator=split_gen)
        bank = min(size, 64)
        self._noise = torch.randn(bank, 3, image_size, image_size, generator=split_gen) * 0.35
        self._cache: torch.Tensor | None = None
        if size * 3 * image_size * image_size <= 256 * 2**20:
            self._cache = torch.cat([self._make(torch.arange(start, min(start + 256, size)))
                                     for start in range(0, size, 256)])

    def __len__(self) -> int:
        return self._size

    def _make(self, indices: torch.Tensor) -> torch.Tensor:
        labels = self.labels[indices]
        if self._prototypes is not None:
            proto = self._prototypes[labels]
        else:
            proto = F.interpolate(self._low_prototypes[labels], size=(self.image_size,) * 2,
                                  mode="bilinear", align_corners=False)
        noise = self._noise[indices % self._noise.shape[0]]
        return ((proto + noise).clamp_(0, 1) * 255).round_().to(torch.uint8)

    def get_batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cache is not None:
            return self._cache[indices], self.labels[indices]
        return self._make(indices), self.labels[indices]

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The whole set when it is kept (small sizes); None when images are made per batch."""
        return (self._cache, self.labels) if self._cache is not None else None

    def whole_on(self, device: torch.device, chunk: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole set made on ``device`` (``--data-placement device``).

        The same bytes as ``get_batch``: the device does the same elementwise arithmetic
        (add, clamp, scale, round half to even) on the same prototypes and noise, which are made
        on the host (prototypes too many to keep are interpolated here, a few classes at a
        time: interpolation may round differently on another device). A 224-pixel batch of 256
        takes about a second on 2 host cores and milliseconds on a GPU.
        """
        if self._prototypes is not None:
            prototypes = self._prototypes.to(device)
        else:
            low = self._low_prototypes
            prototypes = torch.empty((low.shape[0], 3, self.image_size, self.image_size), device=device)
            for start in range(0, low.shape[0], 64):
                prototypes[start:start + 64] = F.interpolate(low[start:start + 64], size=(self.image_size,) * 2,
                                                            mode="bilinear", align_corners=False)
        noise, labels = self._noise.to(device), self.labels.to(device)
        images = torch.empty((self._size, 3, self.image_size, self.image_size), dtype=torch.uint8, device=device)
        for start in range(0, self._size, chunk):
            index = torch.arange(start, min(start + chunk, self._size), device=device)
            mixed = prototypes[labels[index]] + noise[index % noise.shape[0]]
            images[start:start + len(index)] = (mixed.clamp_(0, 1) * 255).round_().to(torch.uint8)
        return images, labels


# ---------------------------------------------------------------------------------------
# CIFAR-10 python pickles (numpy-free)


class _NumpyArrayStub:
    """Stands in for ``numpy.ndarray`` while unpickling: keeps shape, dtype and raw bytes."""

    def __init__(self, *args: Any) -> None:
        self.shape: tuple[int, ...] = ()
        self.dtype = "|u1"
        self.data = b""
        self.fortran = False

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        # (version, shape, dtype, is_fortran, rawdata) or without version
        if len(state) == 5:
            _, shape, dtype, fortran, raw = state
        else:
            shape, dtype, fortran, raw = state
        self.shape = tuple(int(s) for s in shape)
        self.dtype = getattr(dtype, "descr", "|u1")
        self.fortran = bool(fortran)
        self.data = raw if isinstance(raw, bytes) else bytes(raw)

    def to_tensor(self) -> torch.Tensor:
        if self.dtype not in ("|u1", "u1", "<u1", "|i1"):
            raise DataError(f"CIFAR-10 pickle: expected uint8 image data, found dtype {self.dtype!r}")
        flat = torch.frombuffer(bytearray(self.data), dtype=torch.uint8)
        return flat.reshape(self.shape) if not self.fortran else flat.reshape(self.shape[::-1]).T


class _DtypeStub:
    def __init__(self, descr: Any = "u1", align: Any = False, copy: Any = True) -> None:
        self.descr = descr.decode() if isinstance(descr, bytes) else str(descr)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        # (version, byteorder, subdescr, names, fields, elsize, alignment, flags)
        order = state[1].decode() if len(state) > 1 and isinstance(state[1], bytes) else (
            state[1] if len(state) > 1 else "|")
        if isinstance(order, str) and len(order) == 1 and order in "|<>=":
            order = "|" if order == "=" else order
            if self.descr.lstrip("|<>=") == self.descr:
                self.descr = order + self.descr


def _reconstruct(cls: Any, shape: Any, dtype: Any) -> _NumpyArrayStub:
    return _NumpyArrayStub()


class _CifarUnpickler(pickle.Unpickler):
    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy", "ndarray"): _NumpyArrayStub,
        ("numpy", "dtype"): _DtypeStub,
        ("_codecs", "encode"): codecs.encode,  # how Python 3's protocol 2 stores bytes
    }

    def find_class(self, module: str, name: str) -> Any:
        target = self._ALLOWED.get((module, name))
        if target is None:
            raise pickle.UnpicklingError(f"CIFAR-10 pickle refers to {module}.{name}, which is not allowed")
        return target


def read_cifar_batch(path: str | os.PathLike[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """One ``data_batch_N`` / ``test_batch`` file → (uint8 images N×3×32×32, int64 labels)."""
    try:
        with open(path, "rb") as handle:
            entry = _CifarUnpickler(handle, encoding="bytes").load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, struct.error) as error:
        raise DataError(f"{path}: not a readable CIFAR-10 python batch ({error})") from error
    data = entry.get(b"data", entry.get("data"))
    labels = entry.get(b"labels", entry.get("labels"))
    if data is None or labels is None:
        raise DataError(f"{path}: CIFAR-10 batch without 'data'/'labels' keys")
    images = data.to_tensor() if isinstance(data, _NumpyArrayStub) else torch.tensor(data, dtype=torch.uint8)
    images = images.reshape(-1, 3, 32, 32)
    label_tensor = torch.tensor(list(labels), dtype=torch.int64)
    if images.shape[0] != label_tensor.shape[0]:
        raise DataError(f"{path}: {images.shape[0]} images but {label_tensor.shape[0]} labels")
    return images, label_tensor


def write_cifar_batch(path: str | os.PathLike[str], images: torch.Tensor, labels: Sequence[int],
                      batch_label: str = "generated batch") -> None:
    """Write a file in the official CIFAR-10 python format (numpy-free; for tests and demos).

    The opcodes are those Python 2's cPickle wrote for the official files: a
    dict of byte strings, a list of int labels and a numpy ``uint8`` array
    ``(N, 3072)`` (``numpy.core.multiarray._reconstruct`` + ``BUILD`` state).
    """
    data = images.to(torch.uint8).reshape(len(labels), 3072).contiguous()
    raw = ctypes.string_at(data.data_ptr(), data.numel())
    out = io.BytesIO()

    def string(value: bytes) -> None:  # SHORT_BINSTRING / BINSTRING
        if len(value) < 256:
            out.write(b"U" + bytes([len(value)]) + value)
        else:
            out.write(b"T" + struct.pack("<i", len(value)) + value)

    def integer(value: int) -> None:  # BININT
        out.write(b"J" + struct.pack("<i", value))

    out.write(b"\x80\x02}(")  # PROTO 2, EMPTY_DICT, MARK
    string(b"batch_label")
    string(batch_label.encode())
    string(b"labels")
    out.write(b"](")  # EMPTY_LIST, MARK
    for label in labels:
        integer(int(label))
    out.write(b"e")  # APPENDS
    string(b"data")
    out.write(b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n")
    integer(0)
    out.write(b"\x85")  # TUPLE1 -> (0,)
    string(b"b")
    out.write(b"\x87R(")  # TUPLE3, REDUCE, MARK (array state)
    integer(1)
    integer(len(labels))
    integer(3072)
    out.write(b"\x86")  # TUPLE2 -> shape
    out.write(b"cnumpy\ndtype\n")
    string(b"u1")
    integer(0)
    integer(1)
    out.write(b"\x87R(")  # dtype('u1', 0, 1), MARK (dtype state)
    integer(3)
    string(b"|")
    out.write(b"NNN")
    integer(-1)
    integer(-1)
    integer(0)
    out.write(b"tb")  # TUPLE, BUILD (dtype)
    out.write(b"\x89")  # NEWFALSE: not Fortran order
    string(raw)
    out.write(b"tb")  # TUPLE, BUILD (array)
    string(b"filenames")
    out.write(b"](")
    for i in range(len(labels)):
        string(f"image_{i}.png".encode())
    out.write(b"eu.")  # APPENDS, SETITEMS, STOP
    Path(path).write_bytes(out.getvalue())


def load_cifar10(root: str | os.PathLike[str]) -> tuple[InMemoryImages, InMemoryImages]:
    """Read ``root`` (or ``root/cifar-10-batches-py``) into train and test sets."""
    base = Path(root)
    if (base / CIFAR10_FOLDER).is_dir():
        base = base / CIFAR10_FOLDER
    missing = [name for name in CIFAR10_TRAIN_FILES + CIFAR10_TEST_FILES if not (base / name).is_file()]
    if missing:
        raise DataError(
            f"{base}: CIFAR-10 python batches missing ({', '.join(missing)}); expected the "
            f"'{CIFAR10_FOLDER}' layout (data_batch_1..5, test_batch), or use --data synthetic"
        )

    def read(names: Sequence[str]) -> InMemoryImages:
        parts = [read_cifar_batch(base / name) for name in names]
        return InMemoryImages(torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]), 10)

    return read(CIFAR10_TRAIN_FILES), read(CIFAR10_TEST_FILES)


def download_cifar10(root: str | os.PathLike[str]) -> None:
    """Fetch CIFAR-10 with torchvision when available (rank 0 only; the caller arranges that)."""
    base = Path(root)
    if (base / CIFAR10_FOLDER / "test_batch").is_file() or (base / "test_batch").is_file():
        return
    try:
        from torchvision.datasets import CIFAR10
    except ImportError:
        raise DataError(
            f"{base}: no CIFAR-10 batches there and torchvision (used to download them) is not "
            f"installed; put cifar-10-batches-py under {base} or use --data synthetic"
        ) from None
    try:
        CIFAR10(root=str(base), train=True, download=True)
    except Exception as error:  # network errors come in many types
        raise DataError(f"downloading CIFAR-10 into {base} failed: {error}; "
                        f"copy the files there or use --data synthetic") from error


# ---------------------------------------------------------------------------------------
# ImageFolder (torchvision)


def require_torchvision(what: str) -> Any:
    try:
        import torchvision
    except ImportError:
        raise DataError(
            f"{what} needs torchvision, which is not installed; `pip install torchvision` "
            f"(or paijob[vision]) matching your torch, or use --arch convnet/tinynet with --data synthetic"
        ) from None
    return torchvision


def imagefolder_datasets(root: str | os.PathLike[str], image_size: int) -> tuple[Any, Any]:
    """``root/train/<class>/*.jpg`` and ``root/val/<class>/*.jpg`` → uint8-tensor datasets."""
    torchvision = require_torchvision("--data PATH for imagenet (ImageFolder)")
    from torchvision import transforms

    base = Path(root)
    for split in ("train", "val"):
        if not (base / split).is_dir():
            raise DataError(f"{base}: expected ImageFolder layout {base}/{split}/<class>/<image>")
    train = torchvision.datasets.ImageFolder(
        str(base / "train"),
        transforms.Compose([
            transforms.RandomResizedCrop(image_size),
            transforms.RandomHorizontalFlip(),
            transforms.PILToTensor(),
        ]),
    )
    val = torchvision.datasets.ImageFolder(
        str(base / "val"),
        transforms.Compose([
            transforms.Resize(int(image_size * 256 / 224)),
            transforms.CenterCrop(image_size),
            transforms.PILToTensor(),
        ]),
    )
    return train, val


def read_bytes(path: str) -> torch.Tensor:
    """An image file as a 1-D uint8 tensor (undecoded): what nvJPEG decodes on the GPU."""
    return torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.uint8)


def gpu_decode_unavailable(device: torch.device) -> str | None:
    """Why ``--decode gpu`` cannot run here, or None when torchvision decodes JPEG batches on CUDA."""
    if device.type != "cuda":
        return "--decode gpu needs a CUDA GPU (none is visible)"
    try:
        from torchvision.io import decode_jpeg
    except ImportError:
        return "--decode gpu needs torchvision (not installed)"
    import inspect

    if "device" not in inspect.signature(decode_jpeg).parameters:
        return "--decode gpu needs torchvision >= 0.19 (decode_jpeg on a CUDA device, in batches)"
    return None


def imagefolder_bytes_datasets(root: str | os.PathLike[str]) -> tuple[Any, Any]:
    """``root/{train,val}/<class>/*.jpg`` as (undecoded bytes, label): decoding happens on the GPU."""
    torchvision = require_torchvision("--decode gpu")
    base = Path(root)
    for split in ("train", "val"):
        if not (base / split).is_dir():
            raise DataError(f"{base}: expected ImageFolder layout {base}/{split}/<class>/<image>")
    return tuple(torchvision.datasets.ImageFolder(str(base / split), loader=read_bytes)
                 for split in ("train", "val"))


def keep_list_collate(batch: Sequence[tuple[torch.Tensor, int]]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Undecoded images differ in length: a list of byte tensors and one label tensor."""
    return [item[0] for item in batch], torch.tensor([item[1] for item in batch], dtype=torch.int64)


class GpuJpegDecoder:
    """Decode a batch of JPEGs on the GPU (nvJPEG) and crop/resize/flip it there.

    Training: RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3, as torchvision's) + random
    horizontal flip, parameters from a generator seeded per batch (the caller passes the seed);
    evaluation: resize the short side to size*256/224 and centre-crop. Output: uint8 (B, 3, S, S).
    """

    def __init__(self, size: int, train: bool) -> None:
        self.size = size
        self.train = train

    def _box(self, height: int, width: int, rng: Any) -> tuple[int, int, int, int]:
        import math

        area = height * width
        for _ in range(10):
            target = area * rng.uniform(0.08, 1.0)
            ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
            w = int(round(math.sqrt(target * ratio)))
            h = int(round(math.sqrt(target / ratio)))
            if 0 < w <= width and 0 < h <= height:
                return rng.randint(0, height - h), rng.randint(0, width - w), h, w
        side = min(height, width)
        return (height - side) // 2, (width - side) // 2, side, side

    def __call__(self, encoded: list[torch.Tensor], device: torch.device, seed: int) -> torch.Tensor:
        import random

        from torchvision.io import ImageReadMode, decode_jpeg

        decoded = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
        rng = random.Random(seed)
        out = []
        for image in decoded:
            _, height, width = image.shape
            if self.train:
                top, left, h, w = self._box(height, width, rng)
                crop = image[:, top:top + h, left:left + w]
                resized = F.interpolate(crop[None].float(), size=(self.size, self.size), mode="bilinear",
                                        align_corners=False)[0]
                if rng.random() < 0.5:
                    resized = resized.flip(2)
            else:
                short = int(self.size * 256 / 224)
                scale = short / min(height, width)
                full = F.interpolate(image[None].float(), size=(max(short, round(height * scale)),
                                                                max(short, round(width * scale))),
                                     mode="bilinear", align_corners=False)[0]
                top = (full.shape[1] - self.size) // 2
                left = (full.shape[2] - self.size) // 2
                resized = full[:, top:top + self.size, left:left + self.size]
            out.append(resized)
        return torch.stack(out).round_().clamp_(0, 255).to(torch.uint8)


# ---------------------------------------------------------------------------------------
# Batching


def train_batches(sampler: Any, batch_size: int, cap: int | None) -> list[torch.Tensor]:
    """Full batches from the sampler's order for this epoch (drop the ragged last one)."""
    order = torch.tensor(list(iter(sampler)), dtype=torch.int64)
    count = len(order) // batch_size
    if count == 0 and len(order) > 0:
        count = 1  # tiny datasets: one short batch rather than nothing
    if cap is not None:
        count = min(count, cap)
    return [order[i * batch_size:(i + 1) * batch_size] for i in range(count)]


@dataclass
class EvalPlan:
    """Evaluation batches of one fixed shape: ``indices`` (S, B) and ``valid`` (S, B) weights.

    The ragged tail is padded with index 0 and weight 0, and every rank gets the same number
    of batches, so a compiled model sees one input shape in training and evaluation alike
    (no recompile) and collectives inside the forward cannot hang on an uneven count.
    """

    indices: torch.Tensor
    valid: torch.Tensor

    def __len__(self) -> int:
        return int(self.indices.shape[0])


def padded_eval_plan(size: int, rank: int, world_size: int, batch_size: int,
                     cap: int | None = None) -> EvalPlan:
    per_rank_max = -(-size // world_size)
    steps = -(-per_rank_max // batch_size) if size > 0 else 0
    if cap is not None:
        steps = min(steps, cap)
    order = torch.arange(rank, size, world_size, dtype=torch.int64)
    total = steps * batch_size
    indices = torch.zeros(total, dtype=torch.int64)
    valid = torch.zeros(total, dtype=torch.float32)
    take = min(total, len(order))
    indices[:take] = order[:take]
    valid[:take] = 1.0
    return EvalPlan(indices.view(steps, batch_size), valid.view(steps, batch_size))


@dataclass
class TrainPlan:
    """One epoch of training for one rank, decided up front on the CPU.

    ``indices`` (S, B) are the samples; ``crop_y``/``crop_x`` (S, B) the random-crop offsets
    and ``flip`` (S, B) the horizontal flips, drawn from a generator seeded per (epoch, step),
    so the batches are a pure function of the seed (exact resume) and the training step itself
    needs no random numbers from the host (no host-to-device copy, no sync).
    """

    indices: torch.Tensor
    crop_y: torch.Tensor
    crop_x: torch.Tensor
    flip: torch.Tensor

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def rows(self, start: int) -> TrainPlan:
        return TrainPlan(self.indices[start:], self.crop_y[start:], self.crop_x[start:], self.flip[start:])


def train_plan(batches: Sequence[torch.Tensor], pad: int, seed_of_step: Any) -> TrainPlan:
    """Stack ``batches`` and draw each step's crop/flip from ``torch.Generator(seed_of_step(i))``."""
    if not batches:
        empty = torch.zeros(0, 0, dtype=torch.int64)
        return TrainPlan(empty, empty, empty, empty.bool())
    indices = torch.stack(list(batches))
    ys, xs, flips = [], [], []
    for step in range(indices.shape[0]):
        params = draw_crop_flip(indices.shape[1], torch.Generator().manual_seed(seed_of_step(step)), pad)
        ys.append(params[0])
        xs.append(params[1])
        flips.append(params[2])
    return TrainPlan(indices, torch.stack(ys), torch.stack(xs), torch.stack(flips))


def dataset_tensors(source: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The (images, labels) tensors an in-memory source holds whole, or None (made on the fly)."""
    whole = getattr(source, "tensors", None)
    return whole() if callable(whole) else None


class _IndexBatchSampler:
    """Index batches a DataLoader walks; replaced per epoch so persistent workers survive."""

    def __init__(self, batches: Sequence[torch.Tensor] = ()) -> None:
        self.batches = batches

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batches:
            yield batch.tolist()

    def __len__(self) -> int:
        return len(self.batches)


class FolderLoader:
    """One DataLoader for the whole run over index batches set per epoch.

    Worker processes start once (``persistent_workers``) instead of once per epoch and
    evaluation; batches come back pinned when the model trains on a GPU.
    """

    def __init__(self, dataset: Any, workers: int, pin: bool, prefetch_factor: int = 4,
                 collate_fn: Any = None) -> None:
        from torch.utils.data import DataLoader

        self.sampler = _IndexBatchSampler()
        self.loader = DataLoader(
            dataset,
            batch_sampler=self.sampler,
            num_workers=workers,
            pin_memory=pin,
            persistent_workers=workers > 0,
            prefetch_factor=prefetch_factor if workers > 0 else None,
            collate_fn=collate_fn,
        )

    def batches(self, batches: Sequence[torch.Tensor]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        self.sampler.batches = batches
        return iter(self.loader)


# ---------------------------------------------------------------------------------------
# On-device preprocessing


def draw_crop_flip(batch: int, generator: torch.Generator, pad: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample crop offsets in ``[0, 2*pad]`` and flip flags, from ``generator`` (CPU)."""
    if pad > 0:
        oy = torch.randint(0, 2 * pad + 1, (batch,), generator=generator)
        ox = torch.randint(0, 2 * pad + 1, (batch,), generator=generator)
    else:
        oy = ox = torch.zeros(batch, dtype=torch.int64)
    flip = torch.rand(batch, generator=generator) < 0.5
    return oy, ox, flip


def apply_crop_flip(images: torch.Tensor, oy: torch.Tensor, ox: torch.Tensor, flip: torch.Tensor | None,
                    pad: int) -> torch.Tensor:
    """Random crop (zero padding ``pad``) and horizontal flip, batched, without a host sync.

    Both are one ``gather``: each output pixel's source position in the padded image is
    ``(oy + row) * padded_width + (ox + col)``, with ``col`` mirrored for flipped samples.
    Integer arithmetic on small index tensors, no boolean-mask index (whose output size the
    host would have to learn) and no value read back to the host. (A gather from an
    ``unfold`` view of all windows, the previous way, is 2-3x slower on a CPU.)
    """
    batch, channels, height, width = images.shape
    if pad == 0 and flip is None:
        return images
    device = images.device
    padded = F.pad(images, (pad, pad, pad, pad)) if pad > 0 else images
    padded_width = width + 2 * pad
    rows = torch.arange(height, device=device)
    cols = torch.arange(width, device=device).expand(batch, width)
    if flip is not None:
        cols = torch.where(flip.view(batch, 1), (width - 1) - cols, cols)
    row_index = (oy.view(batch, 1) + rows) * padded_width  # (B, H)
    col_index = ox.view(batch, 1) + cols  # (B, W)
    index = (row_index.view(batch, height, 1) + col_index.view(batch, 1, width)).view(batch, 1, height * width)
    gathered = padded.reshape(batch, channels, -1).gather(2, index.expand(batch, channels, height * width))
    return gathered.view(batch, channels, height, width)


def augment_crop_flip(images: torch.Tensor, generator: torch.Generator, pad: int, flip: bool
                      ) -> torch.Tensor:
    """Per-sample random crop and flip drawn from ``generator``: a pure function of its seed."""
    oy, ox, flips = draw_crop_flip(images.shape[0], generator, pad)
    device = images.device
    return apply_crop_flip(images, oy.to(device), ox.to(device), flips.to(device) if flip else None, pad)


class Normalizer:
    """uint8 → float, ``(x/255 - mean)/std`` as one fused multiply-add, on the device."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], device: torch.device) -> None:
        std_t = torch.tensor(std, dtype=torch.float32)
        self.scale = (1.0 / (255.0 * std_t)).view(1, -1, 1, 1).to(device)
        self.shift = (-torch.tensor(mean) / std_t).view(1, -1, 1, 1).to(device)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.shift, images.float(), self.scale)
