"""Fuzzing ``paijob validate`` input (issue 11): whatever bytes arrive on stdin, validate
answers 0 or 2 with one line per problem, never a traceback, and quickly."""

from __future__ import annotations

import contextlib
import io
import sys
import time
from collections.abc import Iterator

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from paijob.cli import main  # noqa: E402

BASE = b"""\
protocolVersion: 2
name: fuzz
type: job
prerequisites:
  - {type: dockerimage, name: image, uri: repo/image:tag}
taskRoles:
  worker:
    instances: 2
    dockerImage: image
    resourcePerInstance: {cpu: 4, memoryMB: 8192, gpu: 1, ports: {SynPort: 1}}
    commands:
      - paijob-runtime -v train --nproc-per-node 2 train.py
"""

YAMLISH = st.text(alphabet=st.sampled_from(list("ab01 :-[]{},&*!|>'\"#%<>$.\n\t\\~?@`") + ["\xff", "é"]), max_size=200)
FRAGMENTS = st.one_of(
    YAMLISH,
    st.tuples(st.sampled_from(["", "-", "0x", "0b"]), st.integers(1, 6000)).map(lambda t: t[0] + "1" * t[1]),
    st.integers(min_value=1, max_value=3000).map(lambda n: "[" * n),
    st.integers(min_value=1, max_value=400).map(lambda n: "".join("  " * i + f"k{i}:\n" for i in range(n))),
    st.sampled_from(["&a [*a]", "*nope", "!!python/object:os.system x", "<<: 5", "--- \n---", "1e3", "no", ".inf"]),
)


@st.composite
def job_bytes(draw: st.DrawFn) -> bytes:
    """The base job with a random fragment spliced in, or random bytes."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=300))
    at = draw(st.integers(min_value=0, max_value=len(BASE)))
    fragment = draw(FRAGMENTS).encode("utf-8", "surrogatepass")
    return BASE[:at] + fragment + BASE[at:]


@contextlib.contextmanager
def stdin_bytes(data: bytes) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    try:
        yield
    finally:
        sys.stdin = saved


# no wall-clock deadline: a busy machine's wait is not validate's; its own CPU time is bounded instead
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job_bytes())
def test_validate_answers_0_or_2_in_one_line_per_problem(data: bytes) -> None:
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()
    with stdin_bytes(data), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["validate", "-"])
    assert time.process_time() - start < 3.0
    assert code in (0, 2)
    text = out.getvalue() + err.getvalue()
    assert "Traceback" not in text
    for line in out.getvalue().splitlines():
        assert line.startswith(("<stdin>", "ok: <stdin>", "invalid: <stdin>", "  paijob-runtime: ")), line
