"""The local cluster's job models: each stored job's text parsed once, not once per request.

A job is parsed at submit (the model that validation built is remembered here
and handed to the job's runner); a job stored by an earlier server is parsed
the first time a view needs it. The REST views (``GET /jobs/<id>``,
``/virtual-clusters``, task routes) ask here instead of reading job text.

Keyed by job id and checked against the stored text, so a name reused after
``paijob local prune`` removed the old job never gets the old model. Bounded:
the models of the most recently used jobs are kept, the rest parsed again
when asked for.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from paijob.openpai.jsyaml import load_job
from paijob.openpai.model import Job, parse_job

KEPT = 512  # models held at most (a job's is about the size of its text, at most the 100 kB body limit)


class JobModels:
    """Job id -> the model of its stored text (thread-safe)."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._models: OrderedDict[str, tuple[str, Job]] = OrderedDict()
        self._lock = threading.Lock()

    def remember(self, job_id: str, text: str, model: Job) -> None:
        """The model of ``text`` that the caller built already (at submit)."""
        with self._lock:
            self._models[job_id] = (text, model)
            self._models.move_to_end(job_id)
            while len(self._models) > self._kept:
                self._models.popitem(last=False)

    def of(self, row: Mapping[str, Any]) -> Job:
        """The model of a stored job (a store row: ``username``, ``name``, ``config``)."""
        job_id = f"{row['username']}~{row['name']}"
        text = row["config"]
        with self._lock:
            found = self._models.get(job_id)
            if found is not None and found[0] == text:
                self._models.move_to_end(job_id)
                return found[1]
        model = parse_job(load_job(text, "job").value)
        self.remember(job_id, text, model)
        return model
