"""The hang watch trusts nothing a job writes (issue 35): which sampler files it believes, what it
writes and where, which limits it refuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from watch_helpers import watched_node

from paijob.runtime.config import HangSettings, LaunchError
from paijob.runtime.watch.hang.stacks import write_stacks_file
from paijob.runtime.watch.node.believed import Launched, read_reports
from paijob.runtime.watch.ranks import parse_dump, summarise
from paijob.runtime.watch.worker.process import own_start_time


def report(rank: int, pid: int, start: int) -> dict[str, object]:
    return {"rank": rank, "pid": pid, "start_time": start, "time": time.time(),
            "active_at": time.time(), "frames": [["/job/train.py", 3, "<module>"]]}


@pytest.fixture
def child():  # type: ignore[no-untyped-def]
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def start_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        return int(handle.read().rpartition(b")")[2].split()[19])


def test_only_the_file_of_a_launched_process_for_its_own_rank_is_believed(tmp_path: Path, child):
    launched = Launched(ranks=lambda: {1: child.pid})
    mine = report(1, child.pid, start_of(child.pid))
    (tmp_path / "rank1.json").write_text(json.dumps(mine))
    (tmp_path / "rank0.json").write_text(json.dumps(report(0, os.getpid(), own_start_time())))
    assert list(read_reports(str(tmp_path), launched)) == [1]  # rank 0's pid was not launched for it
    # another rank's numbers under rank 1's name, a pid reused (another start time): refused
    forged = Launched(ranks=lambda: {1: child.pid})
    (tmp_path / "rank1.json").write_text(json.dumps(report(1, child.pid, start_of(child.pid) + 1)))
    assert read_reports(str(tmp_path), forged) == {}
    (tmp_path / "rank1.json").write_text(json.dumps({**mine, "rank": 0}))
    assert read_reports(str(tmp_path), Launched(ranks=lambda: {1: child.pid})) == {}
    # a forged file after a believed one: the believed one stands (and ages), the forgery is ignored
    launched = Launched(ranks=lambda: {1: child.pid})
    (tmp_path / "rank1.json").write_text(json.dumps(mine))
    assert read_reports(str(tmp_path), launched)[1] == mine
    (tmp_path / "rank1.json").write_text(json.dumps({**report(1, os.getpid(), own_start_time()),
                                                     "busy": True}))
    assert read_reports(str(tmp_path), launched)[1] == mine


def test_a_child_of_a_launched_process_is_believed_and_a_stranger_is_not(tmp_path: Path, child):
    (tmp_path / "rank3.json").write_text(json.dumps(report(3, child.pid, start_of(child.pid))))
    assert list(read_reports(str(tmp_path), Launched(roots=lambda: [os.getpid()]))) == [3]
    assert read_reports(str(tmp_path), Launched(roots=lambda: [1 << 22])) == {}


def test_a_link_or_an_oversized_file_is_not_read(tmp_path: Path, child):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(report(2, child.pid, start_of(child.pid))))
    folder = tmp_path / "hang"
    folder.mkdir()
    (folder / "rank2.json").symlink_to(outside)
    assert read_reports(str(folder), None) == {}
    (folder / "rank2.json").unlink()
    (folder / "rank2.json").write_text(json.dumps({**report(2, 1, 1), "pad": "x" * (2 << 20)}))
    assert read_reports(str(folder), None) == {}


def test_the_stacks_file_is_never_written_through_a_planted_link(tmp_path: Path):
    target = tmp_path / "precious"
    target.write_text("keep me")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "paijob-stacks.txt").symlink_to(target)
    path = write_stacks_file(str(folder), "paijob-stacks.txt", "stacks\n")
    assert target.read_text() == "keep me"
    assert path == str(folder / "paijob-stacks-1.txt") and Path(path).read_text() == "stacks\n"


def test_the_stacks_file_goes_to_a_folder_of_its_own_never_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    path = write_stacks_file(None, "paijob-stacks.txt", "stacks\n")
    assert path is not None and Path(path).parent != tmp_path and Path(path).read_text() == "stacks\n"
    Path(path).unlink()
    Path(path).parent.rmdir()


@pytest.mark.parametrize("timeout", [0.0001, 1, 2.9])
def test_a_hang_timeout_below_a_few_samples_is_refused(timeout: float):
    with pytest.raises(LaunchError, match="at least 3 seconds"):
        HangSettings(timeout=timeout).check()
    HangSettings(timeout=0).check()  # off
    HangSettings(timeout=3).check()


def test_a_silent_rank_is_placed_where_faulthandlers_dump_has_its_main_thread():
    dump = ('Timeout (0:00:03)!\nThread 0x00007f0000000002 (most recent call first):\n'
            '  File "/job/train.py", line 30 in holder\n\n'
            'Thread 0x00007f0000000001 (most recent call first):\n'
            '  File "/job/train.py", line 77 in step\n  File "/job/train.py", line 90 in <module>\n')
    assert parse_dump(dump)[0x7F0000000001] == [["/job/train.py", 90, "<module>"],
                                                 ["/job/train.py", 77, "step"]]
    now = time.time()
    last = {**report(1, 1, 1), "time": now - 5, "main_thread": 0x7F0000000001,
            "frames": [["/job/train.py", 90, "<module>"], ["/job/train.py", 70, "step"]]}
    state = summarise(last, node_rank=0, host="h", now=now, interval=1.0, dump=dump)
    assert state.silent and state.location == "train.py:77"  # not line 70, the one it left
    assert state.threads == [["thread 0x7f0000000002", [["/job/train.py", 30, "holder"]]]]
    named = {**last, "threads": [{"name": "holder", "ident": 0x7F0000000002, "frames": []}]}
    state = summarise(named, node_rank=0, host="h", now=now, interval=1.0, dump=dump)
    assert state.threads[0][0] == "holder"  # the name the sampler saw it under


def test_a_silent_sampler_file_naming_another_process_gets_it_no_signal(tmp_path: Path, child):
    stale = {**report(0, child.pid, start_of(child.pid)), "time": time.time() - 60}
    (tmp_path / "rank0.json").write_text(json.dumps(stale))
    said: list[str] = []
    for launched in (Launched(ranks=lambda: {0: child.pid}), Launched(ranks=lambda: {0: 1 << 22})):
        node = watched_node(tmp_path, settings=HangSettings(timeout=5), launched=launched)
        node.tick()
        assert node.hang is not None
        node.hang.request_stacks()
        node.tick()
        said.extend(node.said)
    time.sleep(0.5)
    assert child.poll() is None  # SIGUSR2's default action would have ended it


FORKS_A_DATA_WORKER = """
import os, sys, time
from paijob.runtime.watch.folder import read_forked
from paijob.runtime.watch.worker.sampler import Sampler

folder = sys.argv[1]
Sampler(folder, 0).start()

def stuck_in_get_item():
    time.sleep(3)

child = os.fork()
if child == 0:
    stuck_in_get_item()
    os._exit(0)
deadline = time.time() + 10
found = None
while found is None and time.time() < deadline:
    time.sleep(0.2)
    found = read_forked(folder, child, os.getpid())
print("frames", found and found["frames"])
print("stranger", read_forked(folder, child, 1))
os.waitpid(child, 0)
"""


def test_a_forked_data_worker_shows_where_it_is_without_a_signal(tmp_path: Path):
    """The DataLoader worker a rank waits for used to get SIGUSR2; its own thread now reports."""
    script = tmp_path / "forks.py"
    script.write_text(FORKS_A_DATA_WORKER)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "stuck_in_get_item" in done.stdout, done.stdout  # believed from the rank's own child
    assert "stranger None" in done.stdout  # not a child of the process named
