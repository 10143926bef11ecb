"""The job output folder: ``PAIJOB_OUTPUT_DIR``, and copying files out of it (``paijob cp``).

Every task of a job sees the same folder in ``PAIJOB_OUTPUT_DIR``, kept across
the job's attempts and task retries, so a retried attempt finds the
checkpoints of the one before. On the local cluster it is
``<state dir>/outputs/<user~name>``, made by the task runner. On a real
OpenPAI cluster it is the template value ``outputDir``: a path on a storage
the job mounts (OpenPAI's storage plugin); paijob cannot reach that storage
from the laptop, so ``paijob cp`` serves the local cluster only and says so.

Pure apart from ``copy_out``; nothing here imports the client.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from paijob.errors import PaijobError

OUTPUT_ENV = "PAIJOB_OUTPUT_DIR"


class OutputError(PaijobError):
    """A ``paijob cp`` source that does not exist or cannot be reached."""


def local_output_dir(state_dir: Path, job_id: str) -> Path:
    """The output folder of job ``user~name`` on the local cluster whose state is in ``state_dir``."""
    return state_dir / "outputs" / job_id


def split_source(source: str) -> tuple[str, str]:
    """``JOB:PATH`` -> (JOB, PATH); PATH may be empty (the whole folder)."""
    job, sep, path = source.partition(":")
    if not sep or not job:
        raise OutputError(f"{source!r}: give JOB:PATH, e.g. demo1:checkpoints/last.pt (JOB as in "
                          "`paijob status`; PATH inside the job's output folder, '.' for all of it)")
    return job, path


def resolve_inside(root: Path, path: str) -> Path:
    """``root/path``, refusing a path that leaves ``root`` (``..``, absolute paths, links out)."""
    target = (root / path.lstrip("/")).resolve() if path else root.resolve()
    if target != root.resolve() and root.resolve() not in target.parents:
        raise OutputError(f"{path!r} is outside the job's output folder")
    return target


def copy_out(root: Path, path: str, dest: Path, job: str) -> Path:
    """Copy ``root/path`` (a file or a folder) to ``dest`` like ``cp -r``; returns what was written."""
    if not root.is_dir():
        raise OutputError(f"job {job} has no output folder ({root}): it never started on this cluster, "
                          "or the id is wrong (see `paijob list`)")
    source = resolve_inside(root, path)
    if not source.exists():
        present = sorted(p.name + ("/" if p.is_dir() else "") for p in source.parent.iterdir()) \
            if source.parent.is_dir() else []
        listing = ", ".join(present[:10]) or "nothing"
        raise OutputError(f"{job}:{path}: no such file in the job's output folder {root} "
                          f"(there: {listing})")
    target = dest / source.name if dest.is_dir() else dest
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        shutil.copy2(source, target)
    return target
