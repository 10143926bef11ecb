"""A sampler report counts only when the rank's own process wrote it (issue 46 row 8).

Before, a report was believed when it named the pid and start time of the process launched for its
rank; any process of the job (same user, same folder) could copy those into a file of its own. A
rank 0 that kept rewriting ``rank1.json`` as "busy, active now" hid a hung rank 1: no verdict in
180 s. Now each sampler sends the watch a key of its own over a socket whose sender the kernel names,
and signs its reports with it (:mod:`paijob.runtime.watch.seal`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from runtime_helpers import base_env, root_cause

from paijob.common import exitcodes
from paijob.runtime.watch import folder, seal
from paijob.runtime.watch.node import recorder
from paijob.runtime.watch.node.believed import Launched, read_reports
from paijob.runtime.watch.worker.process import own_start_time

pytestmark = pytest.mark.skipif(not seal.supported(), reason="needs SO_PASSCRED (Linux)")


def wait_for(path: Path, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)


@pytest.fixture
def sampled(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A process running rank 1's sampler, reporting into ``tmp_path`` to a watch that holds the keys."""
    keys = seal.KeyBox.open(str(tmp_path))
    assert keys is not None
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from paijob.runtime.watch.worker.sampler import Sampler
        Sampler({str(tmp_path)!r}, 1, local_rank=1, interval=0.2).start()
        time.sleep(60)
        """)], env=base_env())
    wait_for(tmp_path / "rank1.json")
    yield proc, keys
    proc.kill()
    proc.wait()
    keys.close()


def test_a_report_with_the_ranks_own_pid_and_start_time_but_not_its_seal_is_not_believed(
        tmp_path: Path, sampled) -> None:  # type: ignore[no-untyped-def]
    proc, keys = sampled
    launched = Launched(ranks=lambda: {1: proc.pid}, keys=keys)
    path = tmp_path / "rank1.json"
    own = read_reports(str(tmp_path), launched)[1]
    assert own["pid"] == proc.pid and path.read_text().startswith('{"mac":"')
    # another process copies rank 1's real numbers, and its MAC, into a report of its own
    real = json.loads(path.read_text())
    forged = {**real, "seq": 10**6, "time": time.time() + 60, "active_at": time.time() + 60, "busy": True}
    for text in (json.dumps(forged), json.dumps({k: v for k, v in forged.items() if k != "mac"}),
                 seal.sign(b"\0" * 32, json.dumps(forged))):  # copied MAC, none, another key's
        path.write_text(text)
        believed = read_reports(str(tmp_path), launched)[1]
        assert believed["seq"] < 10**6 and believed["pid"] == proc.pid  # its own last report stands
    assert launched.take_forged() == [1] and launched.take_forged() == []  # told once
    # rank 1 is still read while its file is overwritten or removed: what its sampler sent the watch
    seq = believed["seq"]
    path.unlink()
    deadline = time.monotonic() + 10
    while read_reports(str(tmp_path), launched)[1]["seq"] <= seq:
        path.write_text(json.dumps(forged))
        assert time.monotonic() < deadline, "rank 1's own reports were no longer read"
        time.sleep(0.05)


def test_a_genuine_report_put_back_later_does_not_replace_a_newer_one(tmp_path: Path, sampled) -> None:  # type: ignore[no-untyped-def]
    proc, keys = sampled
    launched = Launched(ranks=lambda: {1: proc.pid}, keys=keys)
    path = tmp_path / "rank1.json"
    old = path.read_bytes()
    first = read_reports(str(tmp_path), launched)[1]
    deadline = time.monotonic() + 10
    while read_reports(str(tmp_path), launched)[1]["seq"] == first["seq"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.kill()  # so its own next report does not overwrite the replay
    proc.wait()
    newer = read_reports(str(tmp_path), launched)[1]
    path.write_bytes(old)  # correctly sealed, but older
    assert read_reports(str(tmp_path), launched)[1] == newer and newer["seq"] > json.loads(old)["seq"]


def test_a_key_is_filed_under_the_process_the_kernel_names_not_the_rank_it_claims(tmp_path: Path) -> None:
    keys = seal.KeyBox.open(str(tmp_path))
    assert keys is not None
    try:
        mine = seal.Seal.open(str(tmp_path), 1)  # this process says it is rank 1
        assert mine is not None
        keys.look()
        text = mine.sign(json.dumps({"rank": 1, "pid": 1, "start_time": 0})).encode()
        assert keys.verify(1, os.getpid(), own_start_time(), text)
        assert not keys.verify(1, 1, 0, text)  # filed under us, not under the pid it wrote
        assert not keys.verify(0, os.getpid(), own_start_time(), text)  # nor for another rank
        assert seal.KeyBox.open(str(tmp_path)) is None  # the name is held: nobody binds it in our place
    finally:
        keys.close()


def test_an_answer_written_in_a_ranks_place_after_the_request_is_not_believed(tmp_path: Path, sampled) -> None:  # type: ignore[no-untyped-def]
    proc, keys = sampled
    launched = Launched(ranks=lambda: {1: proc.pid}, keys=keys)
    def sealed_by(rank: int, data: bytes) -> bool:
        return launched.sealed_by(rank, proc.pid, data)

    folder.write_request(str(tmp_path))
    answer = tmp_path / "rank1.calls.json"
    wait_for(answer)
    assert recorder.read_answers(str(tmp_path), [1], sealed_by) == {1: None}  # its own: no recorder here
    nonce = folder.request_nonce(str(tmp_path))
    forged = {"nonce": nonce, "calls": [{"group": "0", "seq": 7, "op": "all_reduce", "sizes": [[9]],
                                         "dtypes": ["float"], "line": "train.py:1"}]}
    answer.write_text(json.dumps(forged))  # after the request, with its nonce, by another process
    assert recorder.read_answers(str(tmp_path), [1], sealed_by) == {}
    assert recorder.read_answers(str(tmp_path), [1]) != {}  # what the nonce alone let through


FORGES_RANK_1 = textwrap.dedent(
    """
    import json, os, sys, threading, time
    import torch
    import torch.distributed as dist

    def forge(folder):
        # rank 0 keeps rewriting rank 1's report with rank 1's real pid and start time: active now
        path = os.path.join(folder, "rank1.json")
        while True:
            try:
                real = json.loads(open(path).read())
                now = time.time()
                real.update(seq=real.get("seq", 0) + 1000, time=now, active_at=now, moved_at=now,
                            data_moved_at=now, busy=False, cpu_share=0.0, wait=None, collective=False,
                            first_progress=True)
                with open(path + ".forged", "w") as handle:
                    handle.write(json.dumps(real))
                os.replace(path + ".forged", path)
            except (OSError, ValueError):
                pass
            time.sleep(0.05)

    if os.environ.get("NPROC_PER_NODE") and "RANK" not in os.environ:  # per-node: the mp.spawn parent
        import torch.multiprocessing as mp

        def child(index):
            os.environ["RANK"] = str(index)
            main()
    else:
        child = None

    def main():
        dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=2)
        if os.environ["RANK"] == "0":
            threading.Thread(target=forge, args=(os.environ["PAIJOB_HANG_DIR"],), daemon=True).start()
        else:
            time.sleep(600)  # the culprit
        dist.all_reduce(torch.ones(1))

    if __name__ == "__main__":
        if child is not None:
            mp.spawn(child, nprocs=2)
        else:
            main()
    """
)


@pytest.mark.parametrize("mode", ["per-gpu", pytest.param("per-node", marks=pytest.mark.slow)])
def test_a_rank_that_rewrites_another_ranks_report_cannot_hide_it_from_the_watch(
        mode: str, tmp_path: Path, start_task) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "forges.py"
    script.write_text(FORGES_RANK_1)
    timeout = 6
    task = start_task(["train", "--mode", mode, "--nproc-per-node", "2", "--grace-period", "3",
                       "--hang-timeout", str(timeout), "--hang-first-timeout", str(timeout), str(script)],
                      base_env())
    code = task.wait(timeout=120)  # before: no verdict at all, the task ran until killed here
    out = task.output
    assert code == exitcodes.HANG, out
    cause = root_cause(out)
    assert cause is not None and cause.startswith("hang: no rank made progress for"), out
    assert "rank 1 (node rank 0, host " in cause and "is stuck at forges.py" in cause, out
    assert out.count("rank1.json named rank 1's process but was not written by it") == 1, out


def test_a_ranks_evidence_swapped_by_another_process_is_not_believed(tmp_path: Path, sampled) -> None:  # type: ignore[no-untyped-def]
    """Issue 55: rank 0 swapping two ranks' slow-evidence files (their pids kept) made the doctor name the
    wrong rank: an evidence file counts only signed by its rank's own process, as a report does."""
    from paijob.runtime.watch.evidence import read_evidence

    proc, keys = sampled
    wait_for(tmp_path / "rank1.slow.json")
    launched = Launched(ranks=lambda: {1: proc.pid}, keys=keys)
    reports = read_reports(str(tmp_path), launched)
    assert list(read_evidence(str(tmp_path), reports, folder.read_file, launched.sealed_by)) == [1]
    genuine = json.loads((tmp_path / "rank1.slow.json").read_text())
    forged = {k: v for k, v in genuine.items() if k != "mac"}  # rank 1's own numbers, without its seal
    (tmp_path / "rank1.slow.json.new").write_text(json.dumps(forged))
    os.replace(tmp_path / "rank1.slow.json.new", tmp_path / "rank1.slow.json")
    assert read_evidence(str(tmp_path), reports, folder.read_file, launched.sealed_by) == {}
    assert list(read_evidence(str(tmp_path), reports, folder.read_file)) == [1]  # no keys held: as before


@pytest.mark.skipif(os.geteuid() != 0, reason="sending as another user needs root here")
def test_another_users_flood_of_the_watchs_socket_is_dropped_and_said(tmp_path: Path) -> None:
    """Issue 55: abstract Unix sockets have no permissions, so another user can send to the watch's: each
    datagram is dropped at the cost of a read, counted, and the flood is said (it went unnoticed)."""
    from paijob.runtime.watch.node.eyes import Eyes

    keys = seal.KeyBox.open(str(tmp_path))
    assert keys is not None
    try:
        flood = textwrap.dedent(f"""
            import os, socket
            os.setgid(65534); os.setuid(65534)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            for _ in range(300):
                try:
                    sock.sendto(b"PJK1" + bytes(36), {seal.address(str(tmp_path))!r})
                except OSError:
                    pass
            """)
        subprocess.run([sys.executable, "-c", flood], check=True, timeout=60)
        said: list[str] = []
        eyes = Eyes(str(tmp_path), node_rank=0, host="h", interval=1.0, launched=Launched(keys=keys), say=said.append)
        deadline = time.monotonic() + 10
        while keys.dropped == 0 and time.monotonic() < deadline:
            keys.look()
            time.sleep(0.05)
        eyes.look()
        assert keys.dropped > 0 and keys.dropped_from == {65534} and not keys.reports()
        assert len(said) == 1 and "(from uid 65534: another user); dropped" in said[0], said
        eyes.look()
        assert len(said) == 1  # said again only once the flood is tenfold
    finally:
        keys.close()
