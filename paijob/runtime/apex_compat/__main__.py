"""``python -m paijob.runtime.apex_compat SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``).

Installs the apex shim (only when NVIDIA apex's ``apex.amp`` does not
import), then runs the script as ``__main__`` exactly like ``python SCRIPT``
would: ``sys.argv`` is ``[SCRIPT, *ARGS]`` and the script's folder is first on
``sys.path``. This is what ``paijob-runtime train --apex-compat -- script.py``
runs in each worker.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys

from paijob.runtime import apex_compat

USAGE = "usage: python -m paijob.runtime.apex_compat [--force-shim] SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    force = False
    while args and args[0] in ("--force-shim", "--"):
        force = force or args[0] == "--force-shim"
        args.pop(0)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not args else sys.stdout)
        return 0 if args else 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    as_module = args[0] == "-m"
    if as_module:
        if len(args) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        target, rest = args[1], args[2:]
    else:
        target, rest = args[0], args[1:]
        if not os.path.isfile(target):
            print(f"paijob apex compat: error: script {target!r} not found", file=sys.stderr)
            return 2
    if apex_compat.install(force=force):
        logging.getLogger("paijob").info(
            "paijob: NVIDIA apex.amp not importable; apex.amp/apex.parallel run on native torch.amp/DDP"
        )
    if as_module:
        sys.argv = [target, *rest]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *rest]
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
