"""What a job writes into the watch's folder cannot kill, block or blind the watch (issue 46 rows 5, 6).

The job's code runs as the same user as paijob-runtime and can write anything where the watch reads:
a 900 kB ``[[[[...`` as a sampler report (``json.loads`` raised ``RecursionError``, which killed the
watch thread), a FIFO as a flight-recorder answer (``open`` blocked the agent forever).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from paijob.common import untrusted
from paijob.runtime.watch import folder
from paijob.runtime.watch.node import recorder
from paijob.runtime.watch.node.believed import read_reports


def in_thread(function, *args):  # type: ignore[no-untyped-def]
    """``function(*args)`` with a deadline: a read that blocks fails the test instead of hanging it."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(function(*args)), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), f"{function.__name__} blocked"
    return result[0]


def test_deep_json_is_a_value_error_never_a_recursion_error() -> None:
    with pytest.raises(ValueError, match="nested deeper"):
        untrusted.loads("[" * 900_000 + "]" * 900_000)
    with pytest.raises(ValueError, match="nested deeper"):
        untrusted.loads("[" * (untrusted.MAX_DEPTH + 1) + "]" * (untrusted.MAX_DEPTH + 1))
    assert untrusted.loads("[" * untrusted.MAX_DEPTH + "]" * untrusted.MAX_DEPTH) is not None
    assert untrusted.loads('{"a": [1, {"b": 2}]}') == {"a": [1, {"b": 2}]}
    with pytest.raises(ValueError):
        untrusted.loads(b"\xff\xfe")


@pytest.mark.parametrize(("value", "levels"), [(1, 0), ([], 1), ({"a": [1]}, 2), ([[[{}]]], 4), ([1, [2, [3]]], 3)])
def test_depth_counts_levels(value: object, levels: int) -> None:
    assert untrusted.depth(value) == levels


def test_read_regular_refuses_what_is_not_a_small_regular_file(tmp_path: Path) -> None:
    regular = tmp_path / "file"
    regular.write_bytes(b"12345")
    assert untrusted.read_regular(str(regular), 5) == b"12345"
    assert untrusted.read_regular(str(regular), 4) is None  # longer than the limit
    link = tmp_path / "link"
    link.symlink_to(regular)
    assert untrusted.read_regular(str(link), 100) is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert in_thread(untrusted.read_regular, str(fifo), 100) is None
    assert untrusted.read_regular(str(tmp_path), 100) is None  # a folder
    assert untrusted.read_regular(str(tmp_path / "missing"), 100) is None


def test_a_deeply_nested_report_is_ignored_and_the_others_still_read(tmp_path: Path) -> None:
    (tmp_path / "rank9.json").write_text("[" * 300_000)
    (tmp_path / "rank8.json").write_text("[" * 5000 + "]" * 5000)
    (tmp_path / "rank1.json").write_text('{"rank": 1, "pid": 7}')
    assert read_reports(str(tmp_path), None) == {1: {"rank": 1, "pid": 7}}


def test_a_fifo_planted_as_an_answer_does_not_block_the_agent(tmp_path: Path) -> None:
    folder.write_request(str(tmp_path))  # planted after the request (one planted before it is removed by it)
    os.mkfifo(folder.answer_path(str(tmp_path), 1))
    Path(folder.answer_path(str(tmp_path), 2)).write_text("[" * 100_000)
    assert in_thread(recorder.read_answers, str(tmp_path), [1, 2]) == {}


def test_json_of_more_values_than_the_bound_is_refused_before_it_is_parsed() -> None:
    at_bound = b"[" + b"0," * (untrusted.MAX_ITEMS - 1) + b"0]"  # MAX_ITEMS - 1 commas and one opening
    assert len(untrusted.loads(at_bound)) == untrusted.MAX_ITEMS
    with pytest.raises(ValueError, match="more than 2,000,000 values"):
        untrusted.loads(b"[" + b"0," * untrusted.MAX_ITEMS + b"0]")
    with pytest.raises(ValueError, match="values"):
        untrusted.loads("[" + "{}," * untrusted.MAX_ITEMS + "{}]")  # text too, objects too
