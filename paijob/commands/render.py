"""``paijob render``: a job template plus values → a checked OpenPAI job YAML.

Also the render API that ``paijob submit`` / ``paijob run`` reuse:
``add_render_options(parser)``, ``render_from_args(args)`` and
``render_template(template, ...)`` (implemented in ``paijob.templating``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from paijob.errors import PaijobError
from paijob.templating import (
    RenderResult,
    add_render_options,
    render_from_args,
    render_template,
)

__all__ = [
    "RenderResult",
    "add_render_options",
    "register",
    "render_from_args",
    "render_template",
    "write_atomic",
]

DESCRIPTION = """\
Render a job template with values into an OpenPAI protocol-v2 job YAML and
check it with the same rules as 'paijob validate' before printing it.

Values layer like Helm: template defaults < each -f file in order < each
--set / --set-string in order. Examples:

  paijob render ddp --set instances=4 --set gpu=8 -o job.yaml
  paijob render apex -f my.values.yaml --set apexOptLevel=O1
  paijob render ./mytemplate.yaml.j2 -f values.yaml
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "render",
        help="render a job template into an OpenPAI job YAML",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "template",
        metavar="TEMPLATE",
        help="built-in template name (see 'paijob templates') or a path to a .yaml.j2 file",
    )
    add_render_options(parser)
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write the job YAML to FILE (atomically) instead of stdout"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = render_from_args(args)
    report = result.report
    for problem in report.warnings:
        print(f"paijob: {problem.format(report.source)}", file=sys.stderr)
    if args.output:
        write_atomic(args.output, result.text)
        print(f"wrote {args.output} — {report.summary()}", file=sys.stderr)
    else:
        sys.stdout.write(result.text)
    return 0


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename,
    so a reader never sees half a file and a failed write leaves the old file alone."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise PaijobError(f"cannot write {path}: folder {folder} does not exist")
    if target.is_dir():
        raise PaijobError(f"cannot write {path}: it is a folder; give a file name")
    try:
        fd, temp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as error:
        raise PaijobError(
            f"cannot write {path}: {error.strerror or error} (is {folder} writable?)"
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, target)
    except OSError as error:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise PaijobError(f"cannot write {path}: {error.strerror or error}") from None
