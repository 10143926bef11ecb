"""Loads one module of paijob from a mutant's file instead of the checkout (``.ci/mutation/mutate.py``).

Why a sitecustomize: it runs in every Python process started with this folder on
PYTHONPATH, so the mutant reaches pytest and the ``paijob-runtime`` subprocesses
tests start alike. Without ``PAIJOB_MUTANT_MODULE`` it does nothing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys


class _MutantFinder(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, file: str) -> None:
        self.module = module
        self.file = file

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.module:
            return None
        return importlib.util.spec_from_file_location(fullname, self.file)


def install(module: str, file: str) -> None:
    """Load ``module`` from ``file`` here and in every Python process started from here on."""
    os.environ["PAIJOB_MUTANT_MODULE"] = module
    os.environ["PAIJOB_MUTANT_FILE"] = file
    sys.meta_path.insert(0, _MutantFinder(module, file))


if os.environ.get("PAIJOB_MUTANT_MODULE") and os.environ.get("PAIJOB_MUTANT_FILE"):
    sys.meta_path.insert(0, _MutantFinder(os.environ["PAIJOB_MUTANT_MODULE"], os.environ["PAIJOB_MUTANT_FILE"]))
