"""The mutation tool of .ci/mutation (docs/contributing.md, "Mutation testing") does what its report claims.

Its ids must survive unrelated edits (the equivalence list is keyed by them), a mutant must reach the
modules the tests import, subprocesses included, and the verdict must fail on an unlisted survivor.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("paijob_mutate", ROOT / ".ci" / "mutation" / "mutate.py")
assert _spec is not None and _spec.loader is not None
mutate = importlib.util.module_from_spec(_spec)
sys.modules["paijob_mutate"] = mutate  # dataclasses look their module up
_spec.loader.exec_module(mutate)

SOURCE = '''"""A module."""
import os

LIMIT = 3


def check(port: int, names: list[str]) -> str | None:
    """Docstrings stay."""
    if not 0 < port < 65536 and names:
        raise ValueError(f"port {port} outside 1..65535")
    name = os.environ.get("PAI_JOB_NAME")
    return name or None
'''


def _kinds(source: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for mutant in mutate.mutants("m.py", source):
        found.setdefault(mutant.operator, []).append(mutant.after)
    return found


def test_every_operator_and_nothing_in_docstrings_imports_or_messages():
    kinds = _kinds(SOURCE)
    assert set(kinds) == {"negate", "drop-not", "and-or", "boundary", "negate-cmp", "int+1", "int-1", "misspell",
                          "delete", "return-none"}
    assert "'PAI_JOB_NAMEX'" in kinds["misspell"] and "4" in kinds["int+1"] and "65535" in kinds["int-1"]
    every = " ".join(m.after for m in mutate.mutants("m.py", SOURCE))
    assert "Docstrings" not in every and "outside" not in every and "import" not in every
    for mutant in mutate.mutants("m.py", SOURCE):
        assert mutant.source != SOURCE
        compile(mutant.source, "m.py", "exec")


def test_ids_stay_when_other_code_moves_and_change_with_the_mutated_code():
    before = {m.id for m in mutate.mutants("m.py", SOURCE)}
    moved = SOURCE.replace("LIMIT = 3\n", "LIMIT = 3\n\n\ndef other() -> int:\n    return 1\n")
    after = {m.id for m in mutate.mutants("m.py", moved)}
    assert before < after  # the new function's mutants are new; the old ids are all still there
    edited = {m.id for m in mutate.mutants("m.py", SOURCE.replace("65536", "65535"))}
    untouched = {m.id for m in mutate.mutants("m.py", SOURCE) if "65536" not in m.before}
    assert untouched < edited  # a mutant of code the edit left alone keeps its id...
    assert before - edited == before - untouched  # ...and each one that mutates the edited code gets a new one


def test_a_mutant_replaces_the_module_in_subprocesses_too(tmp_path):
    mutant = tmp_path / "names.py"
    mutant.write_text("MUTANT = True\n")
    env = {**os.environ, "PAIJOB_MUTANT_MODULE": "paijob.openpai.names", "PAIJOB_MUTANT_FILE": str(mutant),
           "PYTHONPATH": str(mutate.OVERLAY)}
    done = subprocess.run([sys.executable, "-c", "import paijob.openpai.names as n; print(n.MUTANT, n.__file__)"],
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["True", str(mutant)]


def _outcomes(killed: int, survivors: list[str]) -> list:
    def mutant(ident: str):
        return mutate.Mutant(ident, "m.py", 1, "delete", "x", "pass", "")
    return ([mutate.Outcome(mutant(f"m.py:f:delete:{i}"), True, "failed", 0.1) for i in range(killed)]
            + [mutate.Outcome(mutant(ident), False, "survived", 0.1) for ident in survivors])


def test_the_verdict_fails_on_an_unlisted_survivor_or_a_low_score(capsys):
    module = mutate.Module("m.py", ("tests/x.py",), 95.0)
    assert not mutate.report(module, _outcomes(19, ["m.py:f:delete:a"]), {"m.py:f:delete:a": "why"}, 1.0)
    assert mutate.report(module, _outcomes(99, ["m.py:f:delete:b"]), {}, 1.0)  # 99 %, but unlisted
    assert mutate.report(module, _outcomes(18, ["m.py:f:delete:a", "m.py:f:delete:b"]), {"m.py:f:delete:a": "why",
                                                                                       "m.py:f:delete:b": "why"}, 1.0) \
        is False
    out = capsys.readouterr().out
    assert "m.py: 19/19 killed (100.0 %, target 95 %), 1 equivalent, 0 new survivor(s), 20 mutants" in out
    assert "SURVIVED m.py:f:delete:b" in out


@pytest.mark.slow  # runs every listed mutant against its tests (about 40 s): the slow stage, beside mutate.py
def test_the_equivalence_list_names_live_mutants_with_a_reason():
    listed = mutate.load_equivalent()
    assert listed and all(reason for reason in listed.values())
    modules = {m.path for m in mutate.load_modules()}
    assert {ident.split(":")[0] for ident in listed} <= modules
    ids = {m.id for path in modules for m in mutate.mutants(path)}
    assert set(listed) <= ids, "stale lines in .ci/mutation/equivalent.txt"
