"""Property tests (issue 11): whatever `paijob render` is given through --set,
--set-string or -f, it exits 0 or 2, says what was wrong in an error on stderr,
never shows a traceback, and stays within time and memory bounds.

In-process (paijob.cli.main) so that hundreds of examples stay fast; one
subprocess smoke checks the real exit code. Deterministic (derandomize) so CI
never flakes; PAIJOB_FUZZ_EXAMPLES raises the example count for a longer run.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fuzz_inputs import JUNK_KEYS, VALUES, value_names, yaml_values_files
from render_helpers import ROOT

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from paijob.cli import main  # noqa: E402

EXAMPLES = int(os.environ.get("PAIJOB_FUZZ_EXAMPLES", "200"))
SECONDS_PER_CALL = 5.0
PEAK_BYTES = 300 * 1024 * 1024  # growth of peak RSS over the whole run
MARKER = Path("/tmp/paijob-fuzz-pwned")

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # time is asserted per call below, with a clear message
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

TEMPLATES = st.sampled_from(["ddp", "apex", "horovod", "dataparallel", "spawn"])
KEYS = st.one_of(st.sampled_from(value_names()), st.sampled_from(JUNK_KEYS), st.text(min_size=1, max_size=12))
TEXT = st.one_of(
    st.sampled_from(VALUES),
    st.text(max_size=40),
    st.text(alphabet="[]{}:,&*!|>-'\"#%@` \n\t$;()<>\\~.0123456789abcnulltrue", max_size=40),
)
SET_FLAGS = st.sampled_from(["--set", "--set", "--set-string"])


def _max_rss() -> int:
    """Peak resident memory of this process so far, bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


RSS_AT_START = _max_rss()


def run(argv: list[str]) -> tuple[int, str, str, float, int]:
    """(exit code, stdout, stderr, seconds, peak memory growth) of `paijob ARGV` in-process.

    Memory is the process's peak RSS over its value before any example ran:
    monotonic, so a single blow-up fails the example that caused it (and
    cheap, unlike tracemalloc, which would triple the run time)."""
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()  # this process's CPU time: a render that blows up burns it, a busy machine does not
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse
            code = int(exit_.code or 0)
    elapsed = time.process_time() - start
    return code, out.getvalue(), err.getvalue(), elapsed, _max_rss() - RSS_AT_START


def assert_clean_outcome(argv: list[str], code: int, out: str, err: str, seconds: float, peak: int) -> None:
    shown = repr(argv)[:300]
    assert code in (0, 2), f"exit {code} for {shown}: {err[-500:]}"
    assert "Traceback" not in err, f"traceback for {shown}: {err[-2000:]}"
    assert seconds < SECONDS_PER_CALL, f"{seconds:.1f} s for {shown}"
    assert peak < PEAK_BYTES, f"{peak / 2**20:.0f} MiB for {shown}"
    assert not MARKER.exists(), f"{shown} ran a command"
    if code == 2:
        assert out == "", shown
        lines = err.rstrip("\n").split("\n")
        if lines[0].startswith("paijob render: error: "):  # argparse's own (e.g. --set -x=1): one line
            assert len(lines) == 1 and "paijob render --help" in lines[0], f"{shown}: {err[-500:]}"
            return
        errors = [line for line in lines if line.startswith("paijob: error: ")]
        assert len(errors) == 1, f"not one error for {shown}: {err[-500:]}"
        # the only multi-line error lists a rendered job's problems, one indented line each
        after = lines[lines.index(errors[0]) + 1 :]
        assert all(line.startswith("  ") for line in after), f"{shown}: {err[-500:]}"
    else:
        assert out.startswith("# Rendered by paijob") or "-o" in argv and out.startswith("{"), shown


@FUZZ
@given(
    template=TEMPLATES,
    sets=st.lists(st.tuples(SET_FLAGS, KEYS, TEXT), min_size=1, max_size=4),
    output=st.sampled_from([[], [], ["-o", "json"]]),
)
def test_render_set_never_crashes(template: str, sets: list[tuple[str, str, str]], output: list[str]) -> None:
    argv = ["render", template, *output]
    for flag, key, value in sets:
        argv += [flag, f"{key}={value}"]
    assert_clean_outcome(argv, *run(argv))


VALUE_TREES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.one_of(KEYS, st.text(max_size=5)), children, max_size=4)
    ),
    max_leaves=20,
)


@FUZZ
@given(
    template=TEMPLATES,
    document=st.one_of(
        st.dictionaries(KEYS, VALUE_TREES, max_size=6).map(lambda d: ("tree", d)),
        st.sampled_from(yaml_values_files()).map(lambda t: ("text", t)),
        st.lists(st.tuples(KEYS, TEXT), max_size=5).map(
            lambda pairs: ("text", "".join(f"{k}: {v}\n" for k, v in pairs))
        ),
        st.binary(max_size=60).map(lambda b: ("bytes", b)),
    ),
)
def test_render_values_file_never_crashes(template: str, document: tuple[str, object], tmp_path_factory: pytest.TempPathFactory) -> None:
    import yaml

    kind, content = document
    path = tmp_path_factory.mktemp("values") / "v.yaml"
    if kind == "tree":
        path.write_text(yaml.safe_dump(content, allow_unicode=True), encoding="utf-8", errors="surrogatepass")
    elif kind == "bytes":
        assert isinstance(content, bytes)
        path.write_bytes(content)
    else:
        path.write_text(str(content), encoding="utf-8", errors="surrogatepass")
    argv = ["render", template, "-f", str(path)]
    assert_clean_outcome(argv, *run(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["render", "ddp", "--set", "processesPerNode=abc"],
        ["render", "ddp", "--set", "a=&a [*a]"],
        ["render", "ddp", "--set-string", "jobRetryCount=0\ndefaults: {virtualCluster: evil}"],
    ],
)
def test_the_real_exit_code_is_2_with_one_line(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "paijob.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.startswith("paijob: error: ")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.text(alphabet="a1 :#-.?'\"~y!%[,\t_bcdnulltrue0123456789()$/=<>&*|@`{}]\\", max_size=30))
def test_the_yaml_filter_writes_what_pyyaml_writes(text: str) -> None:
    # yaml_scalar skips PyYAML's emitter for the strings it can write plain (test_render_hostile)
    from paijob.render.filters import _dumped, yaml_scalar

    assert yaml_scalar(text) == _dumped(text)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.text(alphabet="ab -=$;|&()\t\n\r\x0b\xa0'\"\\#", max_size=40))
def test_commands_split_as_shlex_splits_them(text: str) -> None:
    import shlex

    from paijob.validate.runtime_plan import split_command

    try:
        expected = shlex.split(text, comments=True, posix=True)
    except ValueError:  # unbalanced quotes: split_command falls back to str.split
        return
    assert split_command(text) == expected
