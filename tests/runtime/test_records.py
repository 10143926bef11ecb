"""What paijob-runtime tells the cluster, as records (paijob/common/records.py): written by the runtime's
report, read back strictly, bounded, and only when the runtime wrote it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from paijob.common import records
from paijob.common.records import (
    FailureRecord,
    RecordError,
    StallRecord,
    failure_line,
    last_failure,
)
from paijob.runtime import held
from paijob.runtime.failure import Failure, report_root_cause

KEY = "the task's key"
TAIL = ("[rank1]: Traceback (most recent call last):\n[rank1]:   File \"train.py\", line 9, in <module>\n"
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory\n[rank1]: \n")


def worker_failure(node_rank: int = 1, tail: str = TAIL) -> Failure:
    """Rank 3's failure as the launcher knows it: the stderr tail for people, the error from its record."""
    return Failure(node_rank=node_rank, rank=3, local_rank=1, returncode=1, secondary=False, time=0.0, tail=tail,
                   error="torch.OutOfMemoryError: CUDA out of memory", where="train.py:9 in <module>")


def test_a_workers_failure_is_recorded_with_its_rank_node_and_exception_line() -> None:
    record = worker_failure().record(node_rank=1)
    assert record == FailureRecord(node_rank=1, exit_code=1, summary="worker rank 3 (node rank 1, local rank 1) "
                                   "failed with exit code 1", rank=3, worker_node=1, local_rank=1, how="exit code 1",
                                   error="torch.OutOfMemoryError: CUDA out of memory", where="train.py:9 in <module>")
    assert not record.elsewhere
    elsewhere = worker_failure().record(node_rank=0)
    assert elsewhere.elsewhere and elsewhere.describe() == (
        "worker rank 3 (node rank 1, local rank 1) failed with exit code 1 (on another node): "
        "torch.OutOfMemoryError: CUDA out of memory (train.py:9 in <module>)")
    no_record = Failure(node_rank=1, rank=3, local_rank=1, returncode=-11, secondary=False, time=0.0, tail=TAIL)
    assert no_record.record(node_rank=1).error is None  # no record of its own (a signal): the tail is never parsed


def test_the_hang_watchs_account_is_the_same_on_every_node() -> None:
    hang = Failure(node_rank=0, rank=None, local_rank=None, returncode=None, secondary=False, time=0.0,
                   reason="hang: no rank made progress for 6s", exit_status=124)
    record = hang.record(node_rank=1, job_wide=True)
    assert (record.rank, record.worker_node, record.exit_code, record.elsewhere) == (None, None, 124, False)
    assert record.describe() == "hang: no rank made progress for 6s"


def test_the_report_ends_with_the_record_signed_with_the_key_the_runtime_took(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(held, "_held", {})
    environ = {"PAIJOB_RECORD_KEY": KEY, "HOME": "/root"}
    held.take(environ)
    assert environ == {"HOME": "/root"}
    report_root_cause(worker_failure(), 1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == ""  # a line of its own, whatever a worker left unfinished
    assert lines[1].startswith("paijob-runtime: error: worker rank 3") and lines[-1].startswith(records.MARKER)
    assert last_failure("\n".join(lines), KEY) == worker_failure().record(node_rank=1)
    assert last_failure("\n".join(lines), "another key") is None
    # a record only at a line's start (a worker's prefix or text before it makes it a worker's line)
    glued = "epoch 3:  41%|####1     | 410/1000" + lines[-1]
    assert last_failure("\n".join([*lines[:-1], glued]), KEY) is None


def test_what_the_runtime_writes_the_reader_takes_however_long_its_texts() -> None:
    record = FailureRecord(node_rank=0, exit_code=1, summary="s" * 10_000, rank=0, worker_node=0, local_rank=0,
                           how="exit code 1", error="ValueError: " + "e\n" * 10_000)
    line = failure_line(record, KEY)
    assert len(line) <= records.MAX_LINE and "\n" not in line
    read = records.read_failure_line(line, KEY)
    assert read == record and len(read.summary) == records.MAX_TEXT and read.error and read.error.endswith("...")


def test_a_record_without_a_key_is_read_where_the_cluster_gave_none() -> None:
    """A real OpenPAI cluster gives no key: the record is unsigned, and any record is read there."""
    record = worker_failure().record(node_rank=1)
    assert last_failure(failure_line(record)) == record
    assert last_failure(failure_line(record, KEY)) == record


@pytest.mark.parametrize("change", [
    lambda fields: {**fields, "v": 2},
    lambda fields: {**fields, "kind": "stall"},
    lambda fields: {**fields, "rank": True},
    lambda fields: {**fields, "rank": "3"},
    lambda fields: {**fields, "closing": 1},
    lambda fields: {**fields, "extra": "from the job"},
    lambda fields: {key: value for key, value in fields.items() if key != "how"},
    lambda fields: {**fields, "error": "x" * (records.MAX_TEXT + 1)},
    lambda fields: {**fields, "summary": "two\nlines"},
    lambda fields: [fields],
])
def test_a_record_not_in_the_exact_form_is_none(change) -> None:  # type: ignore[no-untyped-def]
    fields = worker_failure().record(node_rank=1).as_json()
    line = records.MARKER + json.dumps(change(fields))
    with pytest.raises(RecordError):
        records.read_failure_line(line)
    assert last_failure(line + "\n") is None


def test_a_line_longer_than_a_record_is_not_read() -> None:
    fields = worker_failure().record(node_rank=1).as_json()
    line = records.MARKER + json.dumps(fields) + " " * records.MAX_LINE  # valid JSON, but not what we write
    assert last_failure(line) is None


def test_a_stall_record_round_trips_and_words_itself() -> None:
    stall = StallRecord((0, 2, 3, 4, 5, 6, 7), 95, time.time())
    assert StallRecord.from_json(stall.to_json()) == stall
    assert stall.describe() == "no progress for 1 min 35 s on ranks 0, 2-7"
    assert StallRecord((1,), 12).describe() == "no progress for 12 s on rank 1"
    assert StallRecord((0, 1), 12).describe() == "no progress for 12 s on ranks 0-1"


def test_a_stall_file_is_read_while_fresh_and_not_once_the_stall_ended(tmp_path: Path) -> None:
    path = tmp_path / "stall.json"
    path.write_text(StallRecord((1,), 40, 1000.0).to_json())
    assert records.read_stall(path, now=1000.0 + records.STALL_FRESH - 1) == StallRecord((1,), 40, 1000.0)
    assert records.read_stall(path, now=1000.0 + records.STALL_FRESH + 1) is None
    path.write_text(StallRecord((), 0, 1000.0).to_json())  # the hang watch's "no stall now"
    assert records.read_stall(path, now=1000.0) is None
    assert records.read_stall(tmp_path / "missing.json") is None


def test_the_wire_form_is_version_1_with_these_fields() -> None:
    """Another paijob reads these lines (a client newer or older than the task's runtime): the form is fixed."""
    line = failure_line(FailureRecord(node_rank=0, exit_code=2, summary="bad input"))
    assert line.startswith("paijob-runtime: record {")
    assert json.loads(line[len(records.MARKER):]) == {
        "v": 1, "kind": "failure", "node_rank": 0, "exit_code": 2, "summary": "bad input", "rank": None,
        "worker_node": None, "local_rank": None, "how": None, "error": None, "closing": False, "where": None}
    older = {k: v for k, v in json.loads(line[len(records.MARKER):]).items() if k != "where"}
    assert FailureRecord.from_json(older) == FailureRecord(node_rank=0, exit_code=2, summary="bad input")
    assert json.loads(StallRecord((1,), 5, 7.0).to_json()) == {"v": 1, "kind": "stall", "ranks": [1], "seconds": 5,
                                                              "time": 7.0}


def test_texts_are_one_line_and_cut_at_400_characters() -> None:
    whole = FailureRecord(node_rank=0, exit_code=1, summary="s" * 400, how="exit\ncode  1", error="e" * 401)
    assert whole.summary == "s" * 400 and whole.how == "exit code 1"
    assert whole.error == "e" * 397 + "..."


def test_a_terminals_control_characters_are_written_escaped_and_never_read() -> None:
    """An exception message in colour (or one that would move the cursor of whoever prints the cause)."""
    coloured = FailureRecord(node_rank=0, exit_code=1, summary="s", error="\x1b[31mValueError\x1b[0m: b\x9bad")
    assert coloured.error == "\\x1b[31mValueError\\x1b[0m: b\\x9bad"
    assert records.read_failure_line(failure_line(coloured)) == coloured
    raw = json.dumps({**coloured.as_json(), "error": "\x1b]0;owned\x07"})
    with pytest.raises(RecordError):
        records.read_failure_line(records.MARKER + raw)


def test_a_record_line_of_4096_characters_is_read_and_a_longer_one_is_not() -> None:
    fields = FailureRecord(node_rank=0, exit_code=1, summary="x").as_json()
    line = records.MARKER + json.dumps(fields)
    padded = line[:-1] + " " * (4096 - len(line)) + "}"
    assert len(padded) == 4096 and records.read_failure_line(padded).summary == "x"
    with pytest.raises(RecordError):
        records.read_failure_line(padded[:-1] + " }")


def test_a_line_behind_the_marker_that_is_not_json_is_skipped() -> None:
    good = failure_line(FailureRecord(node_rank=0, exit_code=1, summary="the real one"))
    with pytest.raises(RecordError):
        records.read_failure_line(records.MARKER + "{not json")
    assert last_failure(good + "\n" + records.MARKER + "{not json\n") == records.read_failure_line(good)


def test_a_closing_record_gives_way_only_to_an_account_before_it() -> None:
    account = FailureRecord(node_rank=0, exit_code=1, summary="worker rank 1 failed", rank=1, worker_node=0)
    closing = FailureRecord(node_rank=0, exit_code=1, summary="node rank 0 failed with exit code 1", closing=True)
    later = FailureRecord(node_rank=0, exit_code=1, summary="node rank 0 failed again", closing=True)

    def log(*found: FailureRecord) -> str:
        return "".join(failure_line(record) + "\n" for record in found)

    assert last_failure(log(account, closing)) == account
    assert last_failure(log(closing)) == closing
    assert last_failure(log(account, closing, later)) == later  # a closing record sums up no closing record
    assert last_failure(log(closing, account)) == account


@pytest.mark.parametrize(("ranks", "seconds", "written", "taken"), [
    ([0, 10**9 - 1], 0, 1.0, True),
    (list(range(1024)), 95, 1.0, True),
    (list(range(1025)), 95, 1.0, False),
    ([-1], 95, 1.0, False),
    ([10**9], 95, 1.0, False),
    ("1", 95, 1.0, False),
    ([1], -1, 1.0, False),
    ([1], 10**9, 1.0, False),
    ([1], "95", 1.0, False),
    ([1], 95, "1.0", False),
    ([1], 95, True, False),
])
def test_a_stall_record_takes_only_counts(ranks: object, seconds: object, written: object, taken: bool) -> None:
    text = json.dumps({"v": 1, "kind": "stall", "ranks": ranks, "seconds": seconds, "time": written})
    if taken:
        assert StallRecord.from_json(text).ranks == tuple(ranks)  # type: ignore[arg-type]
    else:
        with pytest.raises(RecordError):
            StallRecord.from_json(text)


def test_a_stall_file_of_4096_bytes_is_read_and_a_longer_one_is_not(tmp_path: Path) -> None:
    path = tmp_path / "stall.json"
    text = StallRecord((1,), 40, 1000.0).to_json()
    path.write_text(text + " " * (4096 - len(text)))  # whitespace after the JSON: still the record
    assert records.read_stall(path, now=1000.0) == StallRecord((1,), 40, 1000.0)
    path.write_text(text + " " * (4097 - len(text)))
    assert records.read_stall(path, now=1000.0) is None


def test_a_stall_is_fresh_for_less_than_15_seconds_and_reading_leaves_no_descriptor_open(tmp_path: Path) -> None:
    path = tmp_path / "stall.json"
    path.write_text(StallRecord((1,), 40, 1000.0).to_json())
    before = len(list(Path("/proc/self/fd").iterdir()))
    assert records.read_stall(path, now=1000.0 + 15.0) is None
    assert records.read_stall(path, now=1014.9) is not None
    path.write_text("not a record")
    assert records.read_stall(path, now=1000.0) is None
    assert len(list(Path("/proc/self/fd").iterdir())) == before


def test_a_slow_rank_record_is_read_in_its_exact_form_only(tmp_path: Path):
    from paijob.common.records import SLOW_FRESH, SlowRecord, read_slow

    figure = {"rank": 3, "node_rank": 1, "host": "10.0.0.6", "local_rank": 1, "wait_share": 0.02, "last": 40,
              "activity": {"compute": 0.63, "data": 0.09}}
    record = SlowRecord(kind="rank", line="slow rank: rank 3 holds the job back", ranks=(3,), figures=(figure,),
                        time=1000.0)
    path = tmp_path / "slow.json"
    path.write_text(record.to_json())
    assert read_slow(path, running=True, now=1001.0) == record
    assert read_slow(path, running=True, now=1000.0 + SLOW_FRESH) is None  # said long ago: it went away
    assert read_slow(path, running=False, now=1e9) == record  # the job ended: its last word stays
    hostile = [
        {"line": "slow rank\x1b[2J: cleared"},  # a terminal's control characters
        {"line": "x" * 5000},
        {"verdict": "other"},
        {"figures": [dict(figure, wait_share=7)]},
        {"figures": [dict(figure, cpu_wait=7)]},
        {"figures": [dict(figure, cpu_wait="78%")]},
        {"figures": [dict(figure, activity={"mining": 0.5})]},
        {"figures": [dict(figure, host="h" * 100)]},
        {"ranks": [-1]},
        {"extra": 1},
    ]
    for change in hostile:
        fields = {**json.loads(record.to_json()), **change}
        path.write_text(json.dumps(fields))
        assert read_slow(path, running=False) is None, change
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    assert read_slow(path, running=False) is None


def test_a_slow_rank_records_limits_are_exact(tmp_path: Path):
    from paijob.common.records import MAX_RANKS, SlowRecord, read_slow

    def figure(rank: int, **change: object) -> dict:  # type: ignore[type-arg]
        return {"rank": rank, "node_rank": 0, "host": "h", "local_rank": None, "wait_share": 0.0, "last": 0,
                "activity": {name: 1.0 for name in ("collective", "data", "host", "compute", "other")}, **change}

    path = tmp_path / "slow.json"

    def read(**change: object) -> SlowRecord | None:
        record = SlowRecord("node", "slow node", (0,), (figure(0),), time=1000.0)
        path.write_text(json.dumps({**json.loads(record.to_json()), **change}))
        return read_slow(path, running=True, now=1399.0)

    assert read() is not None  # 399 s old, every activity, shares of 0 and 1, no local rank: shown
    assert read_slow(path, running=True, now=1400.0) is None  # 400 s old: the straggler went away
    assert read(line="x" * 1000) is not None and read(line="x" * 1001) is None
    assert read(ranks=list(range(MAX_RANKS))) is not None and read(ranks=list(range(MAX_RANKS + 1))) is None
    assert read(figures=[figure(r) for r in range(MAX_RANKS)]) is not None
    assert read(figures=[figure(r) for r in range(MAX_RANKS + 1)]) is None
    assert read(figures=[figure(0, host="h" * 64)]) is not None and read(figures=[figure(0, host="h" * 65)]) is None
    assert read(figures=[figure(0, local_rank=3)]) is not None
    assert read(figures=[figure(0, cpu_wait=0), figure(1, cpu_wait=1.0), figure(2)]) is not None  # where known
    for bad in ({"wait_share": -0.01}, {"wait_share": 1.01}, {"local_rank": "0"}, {"host": 5},
                {"cpu_wait": -0.01}, {"cpu_wait": 1.01}, {"cpu_wait": None}, {"cpu_wait": True}):
        assert read(figures=[figure(0, **bad)]) is None, bad
    assert read(figures=["rank 0"]) is None and read(figures=[{"rank": 0}]) is None
    assert read(time="soon") is None and read(time=True) is None
    assert read(time=float("nan")) is None and read(time=1e300) is None  # forever fresh: refused
    padded = SlowRecord("rank", "slow rank", (1,), time=1e9).to_json()
    path.write_text(padded + " " * (256 * 1024 - len(padded)))
    assert read_slow(path, running=False) is not None  # 256 KiB: read
    path.write_text(padded + " " * (256 * 1024 + 1 - len(padded)))
    assert read_slow(path, running=False) is None  # one byte more: refused unread
    path.write_text("not json")
    assert read_slow(path, running=False) is None


def _restart(number: int = 1, **fields: object) -> records.RestartRecord:
    values: dict[str, object] = {"number": number, "limit": 2, "cause": "worker rank 1 failed", "exit_code": 1,
                                 "nodes": 2, "world_size": 4, "lost_s": 3.5, "time": 1000.0,
                                 "signature": "ValueError: x at t.py:3", **fields}
    return records.RestartRecord(**values)  # type: ignore[arg-type]


def test_a_restart_record_is_a_log_line_of_its_own_kind_read_only_in_its_exact_form(tmp_path: Path):
    told = _restart(cause="worker rank 1 failed\x1b[2J with exit code 1", signature="x\x1b[2J")
    assert told.cause == "worker rank 1 failed\\x1b[2J with exit code 1" and told.signature == "x\\x1b[2J"
    line, other = records.restart_line(told, key="k"), records.restart_line(_restart(7))
    noise = [records.MARKER + "{not json", records.MARKER + "[1, 2]", failure_line(FailureRecord(0, 1, "x")),
             "#" * len(records.MARKER) + line[len(records.MARKER):], f"[rank0]: {line}"]
    log = "\n".join([*noise, line, other]) + "\n"
    assert records.restarts_in(log, key="k") == [told]  # unsigned (7): not the runtime's where a key is held
    assert records.restarts_in(log) == [told, _restart(7)]
    assert records.last_failure(line) is None  # a restart is not why a task failed


@pytest.mark.parametrize(("change", "taken"), [
    ({}, True), ({"signature": None}, True), ({"lost_s": 0}, True), ({"lost_s": -0.1}, False),
    ({"lost_s": float("nan")}, False), ({"number": -1}, False), ({"nodes": True}, False),
    ({"cause": "x" * 400}, True), ({"cause": "x" * 401}, False), ({"cause": "a\tb"}, False),
    ({"exit_code": 65535}, True), ({"exit_code": 65536}, False), ({"exit_code": -65535}, True),
    ({"exit_code": -65536}, False), ({"exit_code": True}, False), ({"exit_code": 1.0}, False),
    ({"extra": 1}, False), ({"v": 2}, False), ({"kind": "failure"}, False),
])
def test_a_restart_record_takes_exactly_its_fields(change: dict[str, object], taken: bool) -> None:
    data = {**_restart().as_json(), **change}
    if taken:
        assert records.RestartRecord.from_json(data).as_json() == {**data, "lost_s": float(data["lost_s"])}  # type: ignore[arg-type]
    else:
        with pytest.raises(RecordError):
            records.RestartRecord.from_json(data)
    with pytest.raises(RecordError, match="not a version-1 restart record"):
        records.RestartRecord.from_json([data])


def test_a_restart_line_of_4096_characters_is_read_and_a_longer_one_is_not() -> None:
    line = records.restart_line(_restart())
    fitting = line[:-1] + " " * (records.MAX_LINE - len(line)) + "}"
    assert len(fitting) == records.MAX_LINE and records.restarts_in(fitting) == [_restart()]
    assert records.restarts_in(fitting[:-1] + " }") == []


def test_the_restarts_file_keeps_the_last_128_and_is_read_in_its_exact_form_only(tmp_path: Path) -> None:
    path = tmp_path / "restarts.json"
    path.write_text(records.restarts_text([_restart(n) for n in range(1, 131)], key="k"))
    kept = records.read_restarts(path, key="k")
    assert [r.number for r in kept] == list(range(3, 131))
    assert records.read_restarts(path, key="other") == [] and records.read_restarts(tmp_path / "none") == []
    good = {"v": 1, "kind": "restarts", "restarts": [_restart().as_json()]}
    for wrong in ({"v": 2}, {"kind": "restart"}, {"extra": 1}, {"restarts": {}}, {"restarts": [{}]},
                  {"restarts": [_restart().as_json()] * 129}):
        path.write_text(json.dumps({**good, **wrong}))
        assert records.read_restarts(path) == [], wrong
    path.write_text(json.dumps({**good, "restarts": [_restart().as_json()] * 128}))
    assert len(records.read_restarts(path)) == 128
    text = json.dumps(good)
    path.write_text(text + " " * (256 * 1024 - len(text)))  # the file's limit: 256 KiB
    assert records.read_restarts(path) == [_restart()]
    path.write_text(text + " " * (256 * 1024 - len(text) + 1))
    assert records.read_restarts(path) == []


def test_a_failure_records_where_is_one_printable_line() -> None:
    assert FailureRecord(0, 1, "x", where="t.py:3\x1b[2J in f").where == "t.py:3\\x1b[2J in f"


def test_a_record_served_as_data_is_refused_past_its_depth_and_as_text_unless_json(tmp_path: Path) -> None:
    from paijob.common import untrusted

    deep: dict[str, object] = {}
    for _ in range(untrusted.MAX_DEPTH + 1):
        deep = {"x": deep}
    with pytest.raises(RecordError, match="nested too deep"):
        StallRecord.from_json(deep)
    shallow: dict[str, object] = {}
    for _ in range(untrusted.MAX_DEPTH - 1):
        shallow = {"x": shallow}
    with pytest.raises(RecordError, match="not a version-1 stall record"):
        StallRecord.from_json(shallow)
    with pytest.raises(RecordError, match="not JSON"):
        StallRecord.from_json("{not json")
    path = tmp_path / "stall.json"
    path.write_text("[1, 2]")
    assert records.read_stall(path) is None
    path.write_text(StallRecord((1,), 30, 1060.0).to_json())
    assert records.read_stall(path, now=1000.0) == StallRecord((1,), 30, 1060.0)  # a minute of clock skew
    path.write_text(StallRecord((1,), 30, 1060.5).to_json())
    assert records.read_stall(path, now=1000.0) is None
