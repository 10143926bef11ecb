"""The slow-rank doctor's evidence (paijob.runtime.watch.evidence): what a worker's sampler counts
and keeps, the file it writes, and what its node believes of that file."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from runtime_helpers import free_port, skip_without_gloo_flight_recorder

from paijob.common import contract
from paijob.runtime.watch import evidence
from paijob.runtime.watch.evidence import Evidence, checked, read_evidence
from paijob.runtime.watch.folder import read_file, write_new
from paijob.runtime.watch.frames import is_library

TRAIN = "/job/train.py"
C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOADER = "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py"


def entry(seq, created_ns, pg=0, p2p=False, name="gloo:all_reduce"):
    return {"pg_id": pg, "collective_seq_id": seq, "profiling_name": name, "time_created_ns": created_ns,
            "is_p2p": p2p}


def made(tmp_path, rank=1):
    return Evidence(str(tmp_path), rank, is_library=is_library, write=write_new)


def test_a_sample_is_counted_with_the_place_most_seen_for_its_activity(tmp_path):
    found = made(tmp_path)
    for line in (72, 72, 73):
        found.count([[TRAIN, line, "<module>"], [LOADER, 700, "__next__"]], busy=True)
    found.count([[TRAIN, 88, "<module>"], [C10D, 3245, "all_reduce"]], busy=False)
    for line in (20, 21, 22, 21):  # a busy loop's lines are one place: the function
        found.count([[TRAIN, 30, "<module>"], [TRAIN, line, "heavy"]], busy=True)
    for _ in range(3):
        found.count([[TRAIN, 31, "<module>"]], busy=True)
    assert found.activity == {"data": 3, "collective": 1, "compute": 7}
    found.write(1000.0, {"pid": 4711, "start_time": 99, "first_progress": True})
    written = json.loads((tmp_path / "rank1.slow.json").read_text())
    assert written["lines"] == {"data": ["next", "train.py:72", 3], "collective": ["all_reduce", "train.py:88", 1],
                                "compute": ["heavy", "train.py:21", 4]}
    assert (written["rank"], written["pid"], written["start_time"], written["first_progress"]) == (1, 4711, 99, True)


def test_the_collectives_of_the_last_seconds_are_kept_without_sends_and_receives(tmp_path):
    """Kept by time (issue 53: at hundreds of collectives a second, 256 of them span 2 s, and the nodes'
    windows, read a look apart, no longer overlapped): every read's burst adds to the earlier ones."""
    found = made(tmp_path)
    found.note_calls([entry(s, 10**8 * s) for s in range(1, 300)] + [entry(0, 5, p2p=True)])  # 10 a second
    assert len(found.calls) == 299 and ("0", 0) not in found.calls
    found.note_calls([entry(299, 10**8 * 299), entry(1, 10**9 * 40, pg=1, name="gloo:broadcast")])
    kept = sorted(seq for group, seq in found.calls if group == "0")
    # the newest 256 (MIN_KEPT_CALLS), 10 s older than KEEP_SECONDS allows, and the one before the oldest of them
    assert kept[0] == 44 and kept[-1] == 299
    found.note_calls([entry(s, 10**8 * s) for s in range(300, 700)])  # 40 more seconds, 10 a second
    kept = sorted(seq for group, seq in found.calls if group == "0")
    # within KEEP_SECONDS (30 s) of the newest, more than 256 (from 400), the one that ended then (399) and the one
    # before it (398)
    assert kept[0] == 398 and len(kept) == 302
    assert found.calls[("1", 1)] == ["1", 1, "broadcast", 40.0]
    found.note_calls([entry(s, 10**9 * 71 + s) for s in range(1000, 1000 + evidence.MAX_KEPT_CALLS)])
    assert len(found.calls) == evidence.MAX_KEPT_CALLS and ("0", 699) not in found.calls  # the cap: the newest


def test_a_long_pause_s_collective_stays_among_the_waiting_ranks_calls(tmp_path):
    """The others enqueued the collective rank 0's 45 s evaluation held 45 s before their next ones: kept by
    time alone, their file lost it within a second of the pause's end, and the doctor never saw the pause."""
    found = made(tmp_path)
    found.note_calls([entry(s, 40 * 10**6 * s) for s in range(1, 51)])  # 25 a second, then the pause
    found.note_calls([entry(s, 45 * 10**9 + 40 * 10**6 * s) for s in range(51, 151)])  # 4 s after it
    assert ("0", 50) in found.calls and ("0", 1) in found.calls
    # 20 s after it (500 more calls): the pause's call, which ended then, and the one before it are still kept
    found.note_calls([entry(s, 45 * 10**9 + 40 * 10**6 * s) for s in range(151, 651)])
    assert {("0", 49), ("0", 50)} <= set(found.calls) and ("0", 48) not in found.calls
    assert len(found.calls) == 2 + 600  # and the 24 s since
    # more than KEEP_SECONDS after its end (47.04 s on this clock, call 51): dropped
    found.note_calls([entry(s, 45 * 10**9 + 40 * 10**6 * s) for s in range(651, 851)])
    assert ("0", 50) not in found.calls and ("0", 49) not in found.calls


def test_the_recorder_is_read_without_stack_traces(tmp_path, monkeypatch):
    asked = []

    def dump(**kwargs):
        asked.append(kwargs)
        return pickle.dumps({"entries": [entry(7, 2 * 10**9)]})

    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", SimpleNamespace(_dump_fr_trace=dump))
    found = made(tmp_path)
    found.write(5.0, {})
    assert asked == [{"includeStackTraces": False}]
    assert json.loads((tmp_path / "rank1.slow.json").read_text())["calls"] == [["0", 7, "all_reduce", 2.0]]
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", SimpleNamespace())  # torch 2.4
    assert evidence.recorded_entries() is None


def test_every_rank_writes_in_the_same_slot_of_the_wall_clock(tmp_path):
    found = made(tmp_path)
    assert found.due(1000.0)
    found.written_at = 1000.0
    assert not found.due(1004.9) and found.due(1005.0)
    found.written_at = 1003.0
    assert found.due(1005.1)  # the next slot, not 5 s after this rank's own write


def test_a_node_believes_a_ranks_evidence_only_from_the_process_it_vouched_for(tmp_path):
    found = made(tmp_path, rank=2)
    found.count([[TRAIN, 1, "<module>"]], busy=True)
    found.write(1.0, {"pid": 10, "start_time": 5})
    folder = str(tmp_path)
    assert read_evidence(folder, {2: {"pid": 10, "start_time": 5}}, read_file)[2]["activity"] == {"compute": 1}
    assert read_evidence(folder, {2: {"pid": 11, "start_time": 5}}, read_file) == {}  # another process
    assert read_evidence(folder, {2: {"pid": 10, "start_time": 6}}, read_file) == {}  # a pid reused
    assert read_evidence(folder, {3: {"pid": 10, "start_time": 5}}, read_file) == {}  # no file


def test_only_well_formed_parts_of_a_file_are_kept(tmp_path):
    hostile = {"rank": 0, "pid": 1, "start_time": 2, "first_progress": "yes",
               "activity": {"data": 3, "rm -rf": 9, "compute": -1, "host": "x"},
               "lines": {"data": ["next\x1b[2J", "train.py:72", 3], "nonsense": ["a", "b"], "host": "x"},
               "calls": [["0", 1, "all_reduce", 1.5], ["0", "2", "x", 1.0], "junk", ["0", 3, "x"]],
               "cpu": [100.0, 0.0, 5.0]}  # a rank saying it never waits for a CPU: not believed
    (tmp_path / "rank0.slow.json").write_text(json.dumps(hostile))
    found = read_evidence(str(tmp_path), {0: {"pid": 1, "start_time": 2}}, read_file, cpu_of=lambda pid: None)[0]
    assert found == {"first_progress": False, "activity": {"data": 3},
                     "lines": {"data": ["next[2J", "train.py:72"]}, "calls": [["0", 1, "all_reduce", 1.5]],
                     "cpu": None}  # the agent could not read the process: unknown, whatever the file says
    (tmp_path / "rank0.slow.json").write_text("{not json")
    assert read_evidence(str(tmp_path), {0: {"pid": 1, "start_time": 2}}, read_file) == {}


@pytest.mark.parametrize(("cpu", "kept"), [
    ([1, 2.5, 300], [1.0, 2.5, 300.0]),
    ([0, 0, 0], [0.0, 0.0, 0.0]),
    ([1.0, 2.0], None),
    ([1.0, 2.0, 3.0, 4.0], None),
    ([1.0, -0.5, 3.0], None),
    ([1.0, True, 3.0], None),
    ([1.0, "2", 3.0], None),
    ([1.0, 1e400, 3.0], None),  # json's Infinity
    ({"run": 1.0}, None),
    ("1 2 3", None),
])
def test_a_cpu_reading_another_node_published_is_kept_only_in_its_form(cpu, kept):
    assert checked({"rank": 0, "cpu": cpu})["cpu"] == kept


def test_the_cpu_readings_are_the_agents_own_of_the_believed_process(tmp_path):
    """Read by the node's agent from the rank's process (its pid as believed), at the look: a rank under a
    CPU quota writes its file late, and a rank's file could say anything."""
    (tmp_path / "rank0.slow.json").write_text(json.dumps({"rank": 0, "pid": 41, "start_time": 2, "cpu": [1, 2, 3]}))
    asked: list[int] = []
    found = read_evidence(str(tmp_path), {0: {"pid": 41, "start_time": 2}}, read_file,
                          cpu_of=lambda pid: asked.append(pid) or [7.0, 8.0, 9.0])
    assert found[0]["cpu"] == [7.0, 8.0, 9.0] and asked == [41]
    assert read_evidence(str(tmp_path), {0: {"pid": 41, "start_time": 2}}, read_file)[0]["cpu"] is None  # not read
    if Path(f"/proc/{os.getpid()}/task").is_dir():
        reading = evidence.process_cpu(os.getpid())
        assert reading is not None and reading[0] > 0
    assert evidence.process_cpu(2**22 + 1) is None  # above the kernel's largest pid: no such process


def test_every_threads_cpu_time_and_run_delay_are_summed_from_schedstat(tmp_path, monkeypatch):
    own = Path("/proc/self/schedstat")
    if not own.exists():
        pytest.skip("this kernel has no /proc/<pid>/schedstat: the CPU readings are unknown there")
    before = time.monotonic()
    run, delay, at = evidence.cpu_times()
    assert run > 0 and delay >= 0 and before <= at <= time.monotonic()
    main_thread = [int(field) / 1e9 for field in Path(f"/proc/self/task/{os.getpid()}/schedstat").read_text().split()[:2]]
    assert run >= main_thread[0] * 0.99  # the main thread's time is part of the sum
    again = evidence.cpu_times()
    assert again is not None and again[0] >= run and again[1] >= delay
    tasks = tmp_path / "task"
    for tid, text in (("11", "2500000000 750000000 1234\n"), ("12", "500000000 250000000 9\n"),
                      ("13", "x y z"), ("14", "")):  # the last two: not schedstat's form, left out
        (tasks / tid).mkdir(parents=True)
        (tasks / tid / "schedstat").write_text(text)
    (tasks / "15").mkdir()  # a thread that ended between the listing and the read
    assert evidence.cpu_times(str(tasks))[:2] == [3.0, 1.0]
    monkeypatch.setattr(evidence, "MAX_TASKS_READ", 4)
    assert evidence.cpu_times(str(tasks)) is None  # 5 threads listed: a job's thread count never sets a look's cost
    monkeypatch.setattr(evidence, "MAX_TASKS_READ", 5)
    assert evidence.cpu_times(str(tasks))[:2] == [3.0, 1.0]
    for tid in ("11", "12"):
        (tasks / tid / "schedstat").write_text("12")
    assert evidence.cpu_times(str(tasks)) is None  # no thread read
    assert evidence.cpu_times(str(tmp_path / "none")) is None


def test_a_throttled_helper_thread_counts_for_its_rank(tmp_path):
    """Under a CPU quota the thread that waits most for a CPU is often not the main one (gloo's I/O
    thread, while the main thread sleeps in the collective): a busy second thread's time is in the sum."""
    if not Path("/proc/self/schedstat").exists():
        pytest.skip("this kernel has no /proc/<pid>/schedstat: the CPU readings are unknown there")
    before = evidence.cpu_times()
    seen: list[list[float] | None] = []

    def spin() -> None:
        deadline = time.monotonic() + 10  # bounded on a busy machine
        while time.thread_time() < 0.3 and time.monotonic() < deadline:
            pass
        seen.append(evidence.cpu_times())  # read while this thread still lives (an ended one leaves the sum)

    helper = threading.Thread(target=spin)
    helper.start()
    helper.join()  # the main thread sleeps meanwhile: reading it alone would find no more CPU time
    assert before is not None and seen and seen[0] is not None
    assert seen[0][0] - before[0] >= 0.25, (before, seen)


TRAINS_UNTIL_ITS_COLLECTIVES_ARE_WRITTEN = textwrap.dedent(
    """
    import json, os, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(8)
    path = os.path.join(os.environ["PAIJOB_HANG_DIR"], "rank0.slow.json")
    end = time.time() + 90  # bounded: the evidence is written once per 5 s slot of the wall clock
    while time.time() < end:
        dist.all_reduce(t)
        time.sleep(0.02)
        try:
            with open(path) as handle:
                if json.load(handle)["calls"]:
                    break
        except (OSError, ValueError, KeyError):
            pass
    """
)


def test_a_real_worker_writes_when_it_enqueued_its_collectives(tmp_path: Path):
    """A gloo worker under the wrapper: its sampler writes rank0.slow.json with the recorder's
    creation times of its all_reduces (the wall clock) and its samples counted."""
    pytest.importorskip("torch")
    skip_without_gloo_flight_recorder("the doctor then judges from the samples alone")
    script = tmp_path / "train.py"
    script.write_text(TRAINS_UNTIL_ITS_COLLECTIVES_ARE_WRITTEN)
    folder = tmp_path / "hang"
    folder.mkdir()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "RANK": "0",
           "WORLD_SIZE": "1", "LOCAL_RANK": "0", contract.HANG_DIR: str(folder),
           contract.FLIGHT_RECORDER: str(contract.FLIGHT_RECORDER_ENTRIES)}
    began = time.time()
    done = subprocess.run([sys.executable, "-m", "paijob.runtime.worker", str(script)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    written = json.loads((folder / "rank0.slow.json").read_text())
    calls = written["calls"]
    assert calls and {call[2] for call in calls} == {"all_reduce"}
    assert all(began <= call[3] <= time.time() for call in calls)
    assert [call[1] for call in calls] == sorted(call[1] for call in calls)
    assert sum(written["activity"].values()) >= 1
    assert "cpu" not in written  # the node's agent reads the process's CPU time itself
