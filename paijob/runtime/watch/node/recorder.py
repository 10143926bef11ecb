"""Each rank's last collectives, as torch's flight recorder kept them (a mismatch's evidence).

Why: gloo aborts the rank that receives more bytes than its own call expects
within milliseconds, and its message names neither the sender nor the sender's
call. Which rank's call differs is known only inside the ranks. torch keeps it
there: its flight recorder (``TORCH_FR_BUFFER_SIZE``; gloo joined it in 2025,
pytorch#152614: torch 2.13 has it, torch 2.4 does not) records every collective
as it is issued, with its process group, sequence number, sizes, dtypes and the
Python stack that issued it, in a ring buffer in memory. It changes nothing the
program sees and costs about 1-2 us a collective on gloo
(``benchmarks/bench_hangwatch.py``). The launcher turns it on for gloo jobs
(:func:`paijob.common.contract.worker_env`).

While the job is healthy only its times are read (the slow-rank doctor,
:mod:`paijob.runtime.watch.evidence`). When a node's agent sees gloo's size
abort, it asks its live workers (:func:`~paijob.runtime.watch.folder.write_request`: a file in the watch's
folder); each worker's sampler thread, at its next sample, writes this rank's last
entries to ``rank<N>.calls.json``
(:func:`paijob.runtime.watch.worker.sampler.answer_calls_request`: the worker's side,
with the sampler, no torch import). The agent stops the workers only after they
answered or :data:`ANSWER_WAIT` passed, and reads the answers
(:func:`read_answers`). No signal.

The account itself is pure (:mod:`paijob.runtime.watch.node.mismatch`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from paijob.common import untrusted
from paijob.runtime.failure import checked_call
from paijob.runtime.watch.folder import MAX_ANSWER, answer_path, request_nonce

# seconds an agent waits for its workers' answers: a sample comes once a second, and a rank's first read
# of the recorder with stacks takes about a second (more on a busy machine)
ANSWER_WAIT = 6.0


def read_answers(folder: str, ranks: list[int], sealed_by: Callable[[int, bytes], bool] | None = None
                 ) -> dict[int, list[dict[str, Any]] | None]:
    """What the ranks among ``ranks`` that answered said (``None``: no recorder). An answer is
    a job's own file: read without following a link, at most :data:`MAX_ANSWER` bytes, and only
    well-formed entries are kept, their text printable and short (it is printed in the account).
    ``sealed_by(rank, data)``: whether rank's own process signed it (:mod:`paijob.runtime.watch.seal`);
    an answer it did not is not believed."""
    found: dict[int, list[dict[str, Any]] | None] = {}
    nonce = request_nonce(folder)
    if nonce is None:
        return found  # nobody asked: whatever is there was not an answer
    for rank in ranks:
        data = untrusted.read_regular(answer_path(folder, rank), MAX_ANSWER)
        try:
            value = untrusted.loads(data) if data is not None else None
        except ValueError:
            continue
        if not isinstance(value, dict) or value.get("nonce") != nonce:
            continue  # not an answer to this request
        if sealed_by is not None and not sealed_by(rank, data or b""):
            continue  # written in the rank's place by another process
        listed = value.get("calls")
        calls = [c for c in map(checked_call, listed if isinstance(listed, list) else []) if c is not None]
        found[rank] = calls or None
    return found
