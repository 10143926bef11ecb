"""Batches prepared ahead of the training step and overlapped with it.

Two ways to feed the step without the host waiting on the device:

* **resident**: the whole (uint8) data set and the epoch's plan live on the GPU; a batch
  is one ``index_select`` on the compute stream. Chosen when the data fits comfortably in
  free GPU memory (synthetic data, CIFAR-10).
* **prefetched**: a background thread gathers each batch into one of a ring of pinned host
  buffers and copies it to the device on a side CUDA stream, ``depth`` batches ahead; the
  compute stream waits on the copy's event (a device-side wait, not a host sync) and the
  tensors are ``record_stream``-ed so the allocator does not reuse them early. A ring slot
  is refilled only after its copy's event has completed (waited for in the thread).

On the CPU there is nothing to overlap with: the "device" is the host, and torch's
intra-op threads already use every core, so a producer thread only competes with them
(measured: the ConvNet recipe ~20 % slower on a 2-core VM). ``auto`` placement therefore
keeps CPU runs resident (a gather on the calling thread, as before), and the prefetcher
runs its producer inline unless asked for a thread (``threaded=True``, used by tests).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def choose_placement(option: str, nbytes: int, device: torch.device, kept: bool = True,
                     fraction: float = 0.25) -> str:
    """'device' (resident) or 'host' (prefetched) for in-memory data of ``nbytes``.

    An explicit option is kept (the caller checks it fits). ``auto`` keeps data on a GPU if it
    takes at most ``fraction`` of the free memory; on a CPU the data already is in the device's
    memory when the source keeps it whole (``kept``), and one generated per batch stays so.
    """
    if option in ("device", "host"):
        return option
    if device.type != "cuda":
        return "device" if kept else "host"
    free, _total = torch.cuda.mem_get_info(device)
    return "device" if nbytes <= free * fraction else "host"


def free_memory(device: torch.device) -> int:
    """Bytes the device can still take: free GPU memory, or the host's available memory."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    import os

    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 2**62  # unknown: let the allocation say


def resident(tensors: Sequence[torch.Tensor], index_rows: torch.Tensor,
             per_step: Sequence[torch.Tensor]) -> Iterator[tuple[torch.Tensor, ...]]:
    """Batches gathered on the device from device-resident ``tensors`` (one row of indices a step)."""
    for step in range(index_rows.shape[0]):
        index = index_rows[step]
        yield (*(t.index_select(0, index) for t in tensors), *(extra[step] for extra in per_step))


Slot = list[torch.Tensor]
Producer = Callable[[int, "Slot | None"], Sequence[torch.Tensor]]


class Prefetcher:
    """Iterate ``produce(step, slot)`` for ``steps`` steps in a thread, ``depth`` batches ahead.

    ``slot_specs`` (shape, dtype per tensor) asks for a ring of pinned buffers that ``produce``
    fills in place; without it ``produce`` returns its own tensors (a DataLoader's, already
    pinned). Closing the iterator early stops the thread.
    """

    def __init__(self, produce: Producer, steps: int, device: torch.device, depth: int = 2,
                 slot_specs: Sequence[tuple[Sequence[int], torch.dtype]] | None = None,
                 on_device: Callable[[int, tuple[Any, ...]], tuple[torch.Tensor, ...]] | None = None,
                 threaded: bool | None = None) -> None:
        self.produce = produce
        self.on_device = on_device  # e.g. GPU JPEG decoding, run in this thread on the side stream
        self.steps = steps
        self.device = device
        self.depth = max(1, depth)
        self.cuda = device.type == "cuda"
        self.threaded = self.cuda if threaded is None else threaded
        self.stream: Any = torch.cuda.Stream(device) if self.cuda else None
        self.slots: list[Slot] | None = None
        if slot_specs is not None:
            count = self.depth + 2  # queued + being consumed + being filled
            self.slots = [[torch.empty(tuple(shape), dtype=dtype, pin_memory=self.cuda)
                           for shape, dtype in slot_specs] for _ in range(count)]
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=self.depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="paijob-prefetch", daemon=True)

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        copied: list[Any] = [None] * (len(self.slots) if self.slots else 0)
        try:
            if self.cuda:
                torch.cuda.set_device(self.device)
            for step in range(self.steps):
                if self.stop.is_set():
                    return
                slot = None
                if self.slots is not None:
                    k = step % len(self.slots)
                    if copied[k] is not None:
                        copied[k].synchronize()  # this thread waits, never the training step
                    slot = self.slots[k]
                host = self.produce(step, slot)
                if self.cuda:
                    item: Any = self._to_device(step, host)
                    if self.slots is not None:
                        copied[step % len(self.slots)] = item[1]
                else:
                    moved = tuple(t.clone() if slot is not None else t for t in host)
                    item = (self.on_device(step, moved) if self.on_device is not None else moved, None)
                if not self._put(item):
                    return
        except BaseException as error:  # handed to the consumer, which raises it
            self._put(_Failure(error))
            return
        self._put(_END)

    def _to_device(self, step: int, host: Any) -> tuple[tuple[Any, ...], Any]:
        """One step's tensors copied on the side stream, with the event that marks the copy done."""
        with torch.cuda.stream(self.stream):
            moved = tuple(t.to(self.device, non_blocking=True) if isinstance(t, torch.Tensor) else t for t in host)
            if self.on_device is not None:
                moved = self.on_device(step, moved)
            event = torch.cuda.Event()
            event.record(self.stream)
        return moved, event

    def _inline(self) -> Iterator[tuple[torch.Tensor, ...]]:
        for step in range(self.steps):
            host = tuple(self.produce(step, None))
            yield self.on_device(step, host) if self.on_device is not None else host

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        if not self.threaded:
            if self.cuda:
                raise ValueError("Prefetcher: a CUDA device needs threaded=True (copies on the side stream)")
            yield from self._inline()
            return
        self.thread.start()
        try:
            while True:
                item = self.queue.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                tensors, event = item
                if event is not None:
                    compute = torch.cuda.current_stream(self.device)
                    compute.wait_event(event)
                    for tensor in tensors:
                        tensor.record_stream(compute)
                yield tensors
        finally:
            self.stop.set()
            self.thread.join(timeout=30)
