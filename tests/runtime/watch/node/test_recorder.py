"""torch's flight recorder as a mismatch's evidence: what a worker answers when its node's agent asks
(paijob.runtime.watch.worker.sampler, the sampler's side), and how the agent asks, waits and reads
(paijob.runtime.watch.node.recorder).

The account made from the answers: test_mismatch.py; the two-node jobs: hang/test_hang_doctor.py (slow)."""

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
from typing import Any

import pytest
from runtime_helpers import skip_without_gloo_flight_recorder

from paijob.common import contract
from paijob.runtime.agent import PaijobAgent
from paijob.runtime.failure import Failure
from paijob.runtime.watch import folder
from paijob.runtime.watch.node import recorder
from paijob.runtime.watch.node.accounting import Accounting
from paijob.runtime.watch.worker import calls

SITE = "/venv/lib/python3.11/site-packages/torch/distributed/"


def entry(seq: int, size: int, pg: int = 0, line: int = 12, p2p: bool = False) -> dict[str, Any]:
    """One entry as torch 2.13's ``_dump_fr_trace`` pickles it (the fields read, and some not)."""
    return {"record_id": seq, "pg_id": pg, "process_group": (str(pg), "default_pg"),
            "collective_seq_id": seq, "p2p_seq_id": 0, "profiling_name": "gloo:all_reduce",
            "input_sizes": [[size]], "input_dtypes": ["Float"], "output_sizes": [[size]],
            "state": "scheduled", "is_p2p": p2p,
            "frames": [{"name": "all_reduce", "filename": SITE + "distributed_c10d.py", "line": 3245},
                       {"name": "wrapper", "filename": SITE + "c10d_logger.py", "line": 83},
                       {"name": "<module>", "filename": "/job/train.py", "line": line}]}


@pytest.fixture
def torch_recorder(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A stand-in for torch's C module, holding ``entries``: the reader only looks it up in
    sys.modules (it never imports torch). torch itself is imported with the agent, at the top:
    an import after this would put the real module back."""
    entries: list[dict[str, Any]] = []
    module = SimpleNamespace(_dump_fr_trace=lambda: pickle.dumps({"version": "2.10", "entries": entries}))
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", module)
    return entries


def test_recent_calls_keeps_the_last_of_each_group_with_the_users_line(torch_recorder):
    torch_recorder.extend([entry(s, 1000) for s in range(1, 8)])
    torch_recorder.append(entry(1, 8, pg=1, line=30))
    torch_recorder.append(entry(0, 5, p2p=True))  # a send/recv: no collective sequence number
    found = calls.recent_calls(limit=3)
    assert found == [
        {"group": "0", "seq": s, "op": "all_reduce", "sizes": [[1000]], "dtypes": ["Float"],
         "line": "train.py:12"} for s in (5, 6, 7)
    ] + [{"group": "1", "seq": 1, "op": "all_reduce", "sizes": [[8]], "dtypes": ["Float"],
          "line": "train.py:30"}]


def test_recent_calls_says_nothing_without_torch_or_its_recorder(monkeypatch, torch_recorder):
    assert calls.recent_calls() is None  # on, but nothing recorded (TORCH_FR_BUFFER_SIZE=0)
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", SimpleNamespace())  # torch 2.4
    assert calls.recent_calls() is None
    monkeypatch.delitem(sys.modules, "torch._C._distributed_c10d")  # the script never loaded torch
    assert calls.recent_calls() is None
    broken = SimpleNamespace(_dump_fr_trace=lambda: b"not a pickle")
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", broken)
    assert calls.recent_calls() is None


def test_a_worker_answers_once_and_only_when_asked(tmp_path, torch_recorder):
    torch_recorder.append(entry(3, 1000))
    assert not calls.answer_calls_request(str(tmp_path), 2)  # nobody asked: a stat, nothing written
    assert list(tmp_path.iterdir()) == []
    folder.write_request(str(tmp_path))
    folder.write_request(str(tmp_path))  # twice is once
    assert calls.answer_calls_request(str(tmp_path), 2)
    assert not calls.answer_calls_request(str(tmp_path), 2)
    assert recorder.read_answers(str(tmp_path), [1, 2]) == {2: calls.recent_calls()}
    torch_recorder.clear()
    assert calls.answer_calls_request(str(tmp_path), 3)  # nothing recorded: null, so nobody waits for it
    assert json.loads((tmp_path / "rank3.calls.json").read_text())["calls"] is None
    assert recorder.read_answers(str(tmp_path), [3]) == {3: None}


def asking_agent(folder: Path, pids: dict[int, int]) -> Any:
    """The watch's accounting of a node running ranks ``pids``, its samplers' folder ``folder``,
    the hang watch on; and its way of asking them for their calls."""
    launcher = SimpleNamespace(node_rank=0, assigned_ranks=list(pids), rank_pids=pids,
                               log_tail=lambda local_rank: "")
    agent = Accounting(launcher, SimpleNamespace(), nnodes=1, world_size=len(pids),  # type: ignore[arg-type]
                       folder=str(folder))  # type: ignore[arg-type]
    return agent, Accounting.ask_calls_after_size_abort


ABORT = Failure(node_rank=0, rank=0, local_rank=0, returncode=-6, secondary=False, time=1.0,
                tail="op.preamble.length <= op.nbytes. 1000 vs 500. Received data size")


def test_the_agent_waits_for_its_live_workers_answers_after_a_size_abort(tmp_path, torch_recorder):
    torch_recorder.append(entry(6, 2000))
    agent, ask = asking_agent(tmp_path, {1: os.getpid(), 5: 2 ** 22 + 7})  # rank 5's process is gone

    def sampler() -> None:  # what rank 1's sampler does at its next sample
        while not calls.answer_calls_request(str(tmp_path), 1):
            time.sleep(0.2)

    threading.Thread(target=sampler, daemon=True).start()
    started = time.monotonic()
    ask(agent, [ABORT])
    assert agent.recorded_calls == {"1": calls.recent_calls()}
    assert time.monotonic() - started < recorder.ANSWER_WAIT  # did not wait for the gone rank


def test_the_agent_asks_nothing_without_a_size_abort_and_waits_bounded_for_a_silent_worker(
        tmp_path, monkeypatch):
    agent, ask = asking_agent(tmp_path, {1: os.getpid()})
    ask(agent, [Failure(node_rank=0, rank=0, local_rank=0, returncode=1, secondary=False,
                        time=1.0, tail="ValueError: bad label")])
    assert list(tmp_path.iterdir()) == []  # an ordinary failure: nobody asked, nobody waits
    monkeypatch.setattr("paijob.runtime.watch.node.accounting.ANSWER_WAIT", 0.5)
    started = time.monotonic()
    assert not agent._asked
    ask(agent, [ABORT])  # rank 1 runs but never answers (its sampler cannot run)
    assert 0.5 <= time.monotonic() - started < 3 and agent.recorded_calls == {}


REAL = textwrap.dedent(
    """
    import json, os, torch, torch.distributed as dist
    from paijob.runtime.watch.worker.calls import recent_calls
    dist.init_process_group("gloo", init_method="file://" + os.environ["STORE"], rank=0, world_size=1)
    dist.all_reduce(torch.ones(3, 2, dtype=torch.float16))
    dist.broadcast(torch.ones(7), 0)
    print(json.dumps(recent_calls()))
    os._exit(0)
    """
)


def test_recent_calls_reads_this_torchs_own_recorder(tmp_path: Path):
    """The format is torch's, not ours: read from a real gloo group with the recorder on, as
    the launcher starts a gloo job's workers."""
    pytest.importorskip("torch")
    skip_without_gloo_flight_recorder("the account then names the receiver and how to name the cause")
    script = tmp_path / "real.py"
    script.write_text(REAL)
    env = {**os.environ, contract.FLIGHT_RECORDER: "8", "STORE": str(tmp_path / "store")}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout.strip().splitlines()[-1])
    assert [(c["op"], c["sizes"], c["dtypes"], c["line"]) for c in calls] == [
        ("all_reduce", [[3, 2]], ["Half"], "real.py:5"), ("broadcast", [[7]], ["Float"], "real.py:6")]
    assert calls[1]["seq"] == calls[0]["seq"] + 1


def test_torchs_close_asks_the_live_workers_first():
    """torch's poll stops every worker in the same call that finds one failed: the ask must come
    before that close (a check before the poll loses a worker that dies in between)."""
    order: list[Any] = []
    pcontext = SimpleNamespace(close=lambda *args, **kwargs: order.append(("close", args)))
    accounting = SimpleNamespace(folder="/a/watch/folder", exited_workers=lambda: [ABORT],
                                 ask_calls_after_size_abort=lambda failures: order.append(("ask", failures)))
    health = SimpleNamespace(before_workers_stop=lambda: Accounting.before_workers_stop(accounting))  # type: ignore[arg-type]
    agent = SimpleNamespace(_pcontext=pcontext, _health=lambda: health, _we_stop=lambda: None)
    PaijobAgent._ask_before_closing(agent)  # type: ignore[arg-type]
    pcontext.close(15)
    assert order == [("ask", [ABORT]), ("close", (15,))]


def test_an_answer_is_a_jobs_own_file_read_with_care(tmp_path):
    """The account prints what the answers say: no link followed, nothing malformed kept, text
    printable and short, a huge file read only so far."""
    good = {"group": "0", "seq": 6, "op": "all_reduce\x1b[2J", "sizes": [[2000]],
            "dtypes": ["Float"], "line": "train.py:12" + "x" * 500}
    folder.write_request(str(tmp_path))
    nonce = folder.request_nonce(str(tmp_path))

    def answer(calls: object) -> str:
        return json.dumps({"nonce": nonce, "calls": calls})

    (tmp_path / "rank1.calls.json").write_text(answer([good, {"seq": "6"}, {"seq": 7, "sizes": "x"}, 3]))
    (tmp_path / "elsewhere.json").write_text(answer([good]))
    (tmp_path / "rank2.calls.json").symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "rank3.calls.json").write_text(answer([]) + " " * (folder.MAX_ANSWER + 10))
    (tmp_path / "rank4.calls.json").write_text(answer({"not": "a list"}))
    answers = recorder.read_answers(str(tmp_path), [1, 2, 3, 4])
    assert set(answers) == {1, 4} and answers[4] is None
    (kept,) = answers[1] or []
    assert kept["op"] == "all_reduce[2J" and kept["sizes"] == [[2000]] and len(kept["line"]) == 120


def test_an_answer_written_before_the_agent_asked_is_never_believed(tmp_path):
    """Issue 46 row 7: answers planted before the request named a line that does not exist and the wrong
    sizes. The request removes them and holds a nonce an answer must repeat."""
    planted = [{"group": "0", "seq": 6, "op": "broadcast", "sizes": [[1]], "dtypes": ["Float"], "line": "x.py:1"}]
    (tmp_path / "rank1.calls.json").write_text(json.dumps(planted))
    (tmp_path / "rank2.calls.json").write_text(json.dumps({"nonce": "0" * 32, "calls": planted}))
    assert recorder.read_answers(str(tmp_path), [1, 2]) == {}  # nobody asked yet
    folder.write_request(str(tmp_path))
    assert not (tmp_path / "rank1.calls.json").exists() and not (tmp_path / "rank2.calls.json").exists()
    (tmp_path / "rank2.calls.json").write_text(json.dumps({"nonce": "0" * 32, "calls": planted}))  # a guess
    assert calls.answer_calls_request(str(tmp_path), 1)  # the real worker answers the request
    answers = recorder.read_answers(str(tmp_path), [1, 2])
    assert set(answers) == {1}
