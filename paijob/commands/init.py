"""``paijob init DIR``: a new project folder that ``paijob run --local`` runs right away.

Writes a starter ``train.py`` (env:// DDP through paijob-runtime, rank-0
logging, checkpoints in ``PAIJOB_OUTPUT_DIR`` and resume from the newest), a
``values.yaml`` for the ddp template sized for a laptop, ``paijob.yaml``
(template, values, cluster ``local``, workdir ``.``) and a ``.paijobignore``.
Existing files are never overwritten.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from paijob.errors import PaijobError

# scaffold file -> name in the project
FILES = {"train.py": "train.py", "values.yaml": "values.yaml", "paijob.yaml": "paijob.yaml",
         "paijobignore": ".paijobignore"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "init",
        help="start a project: train.py, values.yaml, paijob.yaml (then `paijob run --local`)",
        description="Create DIR (or fill it) with a starter DDP train.py, a values file for the ddp template, "
                    "a paijob.yaml naming the default template, cluster (local) and workdir, and a "
                    ".paijobignore. Existing files are kept. Then: cd DIR && paijob run --local",
    )
    parser.add_argument("directory", metavar="DIR", nargs="?", default=".", help="project folder (default: .)")
    parser.add_argument("--name", metavar="N", help="job name in values.yaml (default: the folder's name)")
    parser.set_defaults(func=run)


def job_name(folder: Path, name: str | None) -> str:
    if name:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise PaijobError(f"--name {name!r}: job names use letters, digits, _ and - only")
        return name
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "-", folder.resolve().name).strip("-")
    return cleaned or "train"


def init_project(folder: Path, name: str | None = None) -> list[Path]:
    """Write the starter files into ``folder``; returns those written (existing ones are kept)."""
    if folder.exists() and not folder.is_dir():
        raise PaijobError(f"{folder} exists and is not a folder")
    scaffold = resources.files("paijob.scaffold")
    written = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for source, target_name in FILES.items():
            target = folder / target_name
            if target.exists():
                continue
            text = scaffold.joinpath(source).read_text(encoding="utf-8")
            if source == "values.yaml":
                text = text.replace("name: NAME", f"name: {job_name(folder, name)}")
            target.write_text(text, encoding="utf-8")
            written.append(target)
    except OSError as error:
        done = f" (already wrote {', '.join(str(path) for path in written)})" if written else ""
        raise PaijobError(
            f"cannot write the project into {folder}: {error.strerror or error}{done}; "
            f"give a folder you can write to"
        ) from None
    return written


def run(args: argparse.Namespace) -> int:
    folder = Path(args.directory)
    written = init_project(folder, args.name)
    for path in written:
        print(f"wrote {path}")
    kept = [name for name in FILES.values() if folder / name not in written]
    if kept:
        print(f"kept {len(kept)} existing file(s): {', '.join(kept)}", file=sys.stderr)
    where = "" if folder.resolve() == Path.cwd().resolve() else f"cd {args.directory} && "
    print(f"next: {where}paijob run --local    (2 CPU tasks; results: paijob cp JOB:result.json .)",
          file=sys.stderr)
    return 0
