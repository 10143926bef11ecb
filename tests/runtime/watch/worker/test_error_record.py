"""A worker's failure leaves it as one record (paijob.runtime.watch.folder.WorkerError), as torch's @record
error file does: Python's last line, the script's line, and whether it is a peer's knock-on, signed with the
worker's own key. The launcher's account reads that record, never the traceback's text."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from paijob.common import contract
from paijob.runtime.watch.folder import WorkerError, error_path
from paijob.runtime.watch.node.accounting import Accounting
from paijob.runtime.watch.node.believed import Launched
from paijob.runtime.watch.seal import KeyBox

RAISES = textwrap.dedent(
    """
    def step(batch):
        raise {error}

    step(1)
    """
)


class Workers:
    node_rank = 0

    def __init__(self, pids: dict[int, int]) -> None:
        self.rank_pids = pids
        self.assigned_ranks = list(pids)

    def log_tail(self, local_rank: int) -> str:
        return "the traceback's text: never parsed"


def account_of(folder: Path, keys: KeyBox, pid: int) -> WorkerError | None:
    launched = Launched(ranks=lambda: {1: pid}, keys=keys)
    accounting = Accounting(Workers({1: pid}), records=None, nnodes=1, world_size=2,  # type: ignore[arg-type]
                            folder=str(folder), sealed_by=launched.sealed_by)
    return accounting.error_record(1)


def test_a_failing_script_leaves_its_error_as_a_signed_record_the_account_reads(tmp_path: Path):
    folder = tmp_path / "watch"
    folder.mkdir()
    keys = KeyBox.open(str(folder))
    if keys is None:
        pytest.skip("this system does not tell a datagram's sender")
    try:
        script = tmp_path / "train.py"
        script.write_text(RAISES.format(error='ValueError("bad batch")'))
        env = {**os.environ, contract.HANG_DIR: str(folder), "RANK": "1", "LOCAL_RANK": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "paijob.runtime.worker", str(script)], env=env,
                                stderr=subprocess.PIPE, text=True)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1 and "ValueError: bad batch" in err  # the user still reads the traceback
        keys.look()
        record = account_of(folder, keys, proc.pid)
        assert record is not None, Path(error_path(str(folder), 1)).read_text()
        assert (record.error, record.where, record.consequence) == ("ValueError: bad batch", "train.py:3 in step",
                                                                    False)
        assert account_of(folder, keys, proc.pid + 1) is None  # another process's: not believed
        forged = Path(error_path(str(folder), 1))
        forged.write_text(WorkerError(1, proc.pid, 0, "MemoryError: FORGED", "x.py:1 in f", False, 1.0).to_json())
        assert account_of(folder, keys, proc.pid) is None  # unsigned (written by the job): not believed
    finally:
        keys.close()


def test_a_peers_knock_on_is_said_by_the_worker_itself(tmp_path: Path):
    folder = tmp_path / "watch"
    folder.mkdir()
    keys = KeyBox.open(str(folder))
    if keys is None:
        pytest.skip("this system does not tell a datagram's sender")
    try:
        script = tmp_path / "train.py"
        script.write_text(RAISES.format(error='RuntimeError("[pair.cc:534] Connection closed by peer [1.2.3.4]:5")'))
        env = {**os.environ, contract.HANG_DIR: str(folder), "RANK": "1", "LOCAL_RANK": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "paijob.runtime.worker", str(script)], env=env,
                                stderr=subprocess.DEVNULL)
        assert proc.wait(timeout=60) == 1
        keys.look()
        record = account_of(folder, keys, proc.pid)
        assert record is not None and record.consequence and record.error.startswith("RuntimeError: [pair.cc")
    finally:
        keys.close()
