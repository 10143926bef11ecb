"""Every worker runs through ``paijob.runtime.worker``: python's semantics, its own exit code
every time, live output, and no worker outliving its launcher."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from runtime_helpers import RUNTIME, base_env, free_port

WORKER = [sys.executable, "-m", "paijob.runtime.worker"]

DDP = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
    print(f"rank {dist.get_rank()} done", flush=True)
    dist.destroy_process_group()
    """
)


def _start_pair(script: Path, tmp_path: Path, run: int) -> list[subprocess.Popen[bytes]]:
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = base_env()
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE="2", LOCAL_RANK=str(rank))
        log = open(tmp_path / f"run{run}-rank{rank}.log", "wb")  # noqa: SIM115 - closed by the child's exit
        procs.append(subprocess.Popen([*WORKER, str(script)], env=env, cwd=tmp_path,
                                      stdout=log, stderr=subprocess.STDOUT))
        log.close()
    return procs


@pytest.mark.slow  # 40 torch processes, about a minute: run by .ci/run's slow stage (`pytest -m slow`)
@pytest.mark.timeout(900)  # about 2 minutes on 2 busy cores
def test_a_finished_ddp_script_exits_0_every_time(tmp_path: Path):
    """torch's finalisation race made 1 in 10 such runs exit 134 here (plain ``python``)."""
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    runs, codes = 20, {}
    pending = list(range(runs))
    while pending:  # two runs at a time: the waits of one overlap the other's imports
        batch, pending = pending[:2], pending[2:]
        started = {run: _start_pair(script, tmp_path, run) for run in batch}
        for run, procs in started.items():
            codes[run] = [proc.wait(timeout=300) for proc in procs]
    failed = {run: c for run, c in codes.items() if c != [0, 0]}
    assert not failed, {
        run: (tmp_path / f"run{run}-rank0.log").read_text(errors="replace") for run in failed
    }
    assert "rank 1 done" in (tmp_path / "run19-rank1.log").read_text()


def _run(code: str, tmp_path: Path, *args: str, module: bool = False) -> subprocess.CompletedProcess:
    if module:
        (tmp_path / "userpkg").mkdir(exist_ok=True)
        (tmp_path / "userpkg" / "__init__.py").write_text("")
        (tmp_path / "userpkg" / "job.py").write_text(textwrap.dedent(code))
        target = ["-m", "userpkg.job"]
    else:
        (tmp_path / "sub").mkdir(exist_ok=True)
        (tmp_path / "sub" / "job.py").write_text(textwrap.dedent(code))
        target = ["sub/job.py"]
    return subprocess.run([*WORKER, *target, *args], env=base_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("body", "code", "stderr"),
    [
        ("print('ok')", 0, ""),
        ("import sys; sys.exit(0)", 0, ""),
        ("import sys; sys.exit(3)", 3, ""),
        ("import sys; sys.exit('bad input')", 1, "bad input"),
        ("def main():\n    raise ValueError('boom')\nmain()", 1,
         'job.py", line 2, in main\n    raise ValueError(\'boom\')\nValueError: boom'),
    ],
)
def test_the_script_keeps_its_own_exit_code_and_traceback(tmp_path: Path, body, code, stderr):
    proc = _run(body, tmp_path)
    assert proc.returncode == code, proc.stderr
    assert stderr in proc.stderr
    assert "runpy" not in proc.stderr and "paijob/runtime/worker.py" not in proc.stderr


DEAD_PROXY = """
import sys
import weakref

class Model:
    pass

model = Model()
# torch.compile's internals keep such dead proxies alive past the script's own namespace
sys.paijob_test_kept_proxy = weakref.proxy(model)
del model
print("trained")
"""


def test_a_script_leaving_dead_weak_proxies_still_exits_0(tmp_path: Path):
    proc = _run(DEAD_PROXY, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "trained" and proc.stderr == ""


SHOW = """
import json, os, sys
print(json.dumps({"argv": sys.argv, "file": __file__, "name": __name__, "path0": sys.path[0]}))
"""


def test_a_script_runs_as_python_would_run_it(tmp_path: Path):
    import json

    proc = _run(SHOW, tmp_path, "--lr", "1")
    seen = json.loads(proc.stdout)
    assert seen["argv"] == ["sub/job.py", "--lr", "1"]
    assert seen["file"] == "sub/job.py" and seen["name"] == "__main__"
    assert seen["path0"] == str(tmp_path / "sub")

    proc = _run(SHOW, tmp_path, "x", module=True)
    seen = json.loads(proc.stdout)
    assert seen["argv"] == [str(tmp_path / "userpkg" / "job.py"), "x"]
    assert seen["name"] == "__main__" and seen["path0"] == str(tmp_path)


def test_what_a_normal_exit_would_write_is_written(tmp_path: Path):
    proc = _run(
        """
        import atexit, threading, time
        out = open("unclosed.txt", "w")           # never closed: finalisation flushed it
        out.write("kept")
        atexit.register(lambda: open("atexit.txt", "w").write("ran"))
        def late():
            time.sleep(0.5)
            open("thread.txt", "w").write("joined")
        threading.Thread(target=late).start()     # non-daemon: python waits for it
        import sys
        from concurrent.futures import ThreadPoolExecutor
        sys.pool = ThreadPoolExecutor(1)          # never shut down: python's exit stops it
        sys.pool.submit(lambda: open("pool.txt", "w").write("done")).result()
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "unclosed.txt").read_text() == "kept"
    assert (tmp_path / "atexit.txt").read_text() == "ran"
    assert (tmp_path / "thread.txt").read_text() == "joined"
    assert (tmp_path / "pool.txt").read_text() == "done"


LIVE = textwrap.dedent(
    """
    import os, sys, time
    print("early line", flush=False)
    deadline = time.time() + 300
    while not os.path.exists(sys.argv[1]) and time.time() < deadline:
        time.sleep(0.1)
    print("late line")
    """
)


def _read_until(fd: int, wanted: bytes, seconds: float) -> bytes:
    data = b""
    deadline = time.time() + seconds
    while wanted not in data and time.time() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.time()))
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data


@pytest.mark.parametrize("mode", ["per-gpu", "per-node"])
def test_worker_output_arrives_through_a_pipe_while_the_worker_runs(tmp_path: Path, mode):
    script = tmp_path / "live.py"
    script.write_text(LIVE)
    flag = tmp_path / "seen"
    env = base_env()
    env.pop("PYTHONUNBUFFERED", None)
    proc = subprocess.Popen(
        [*RUNTIME, "train", "--mode", mode, "--nproc-per-node", "1", str(script), str(flag)],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        seen = _read_until(proc.stdout.fileno(), b"early line\n", seconds=60)
        assert b"early line\n" in seen, f"no line within 60 s while the worker waits: {seen!r}"
        flag.write_text("")  # only now may the worker go on and exit
        rest = proc.stdout.read().decode()
        assert proc.wait(timeout=60) == 0
        assert "late line" in rest
    finally:
        proc.kill()
        proc.wait()


SLEEPER = textwrap.dedent(
    """
    import os, sys, time
    with open(os.path.join(sys.argv[1], f"pid{os.environ.get('LOCAL_RANK', 'n')}"), "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][0] != "Z"  # zombies are gone


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
@pytest.mark.parametrize(("mode", "workers"), [("per-gpu", 2), ("per-node", 1)])
def test_workers_die_when_the_launcher_is_killed(tmp_path: Path, mode, workers):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    launcher = subprocess.Popen(
        [*RUNTIME, "train", "--mode", mode, "--nproc-per-node", str(workers), str(script),
         str(tmp_path)],
        env=base_env(), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        while len(list(tmp_path.glob("pid*"))) < workers and time.time() < deadline:
            time.sleep(0.1)
        pids = [int(p.read_text()) for p in tmp_path.glob("pid*")]
        assert len(pids) == workers and all(_alive(pid) for pid in pids)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        deadline = time.time() + 5
        while any(_alive(pid) for pid in pids) and time.time() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in pids if _alive(pid)], "workers outlived their launcher"
    finally:
        launcher.kill()
        for pid_file in tmp_path.glob("pid*"):
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass


def _held_knock_on(tmp_path: Path) -> subprocess.Popen[str]:
    """``peer_gone.py`` (written by the test) as a worker whose knock-on error is held (60 s): started, and
    sleeping in the hold (the script itself has nothing to sleep on)."""
    env = base_env()
    env["PAIJOB_KNOCK_ON_HOLD"] = "60"
    proc = subprocess.Popen([*WORKER, "peer_gone.py"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    deadline = time.monotonic() + 30
    while proc.poll() is None and not _sleeping(proc.pid):
        assert time.monotonic() < deadline
    return proc


def test_a_knock_on_error_is_held_back_until_the_launcher_stops_the_worker(tmp_path: Path):
    (tmp_path / "peer_gone.py").write_text(
        "import sys\nprint('started', flush=True)\n"
        "raise RuntimeError('Connection closed by peer [10.0.0.2]:5000')\n"
    )
    proc = _held_knock_on(tmp_path)
    assert proc.poll() is None, proc.communicate()  # held back, not printed and exited
    proc.send_signal(signal.SIGTERM)  # the launcher, which knows the root cause, stops it
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM  # a worker stopped by us: not a cause
    assert "Traceback" not in err and "Connection closed by peer" not in err


def test_a_held_knock_on_stops_at_once_while_its_calls_are_still_being_read(tmp_path: Path):
    """Reading the recorder's calls ahead (torch's first dump takes seconds under load, in C++) runs beside the
    hold: a SIGTERM (a stop, a restart) ends the worker at once, not once the read is done."""
    (tmp_path / "peer_gone.py").write_text(
        "import time\nimport paijob.runtime.watch.worker as watched\n"
        "watched.prepare_answer = lambda: time.sleep(60)  # a read that takes its time\n"
        "print('started', flush=True)\n"
        "raise RuntimeError('Connection closed by peer [10.0.0.2]:5000')\n"
    )
    proc = _held_knock_on(tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)  # the read alone would take 60 s
    assert proc.returncode == -signal.SIGTERM and "Traceback" not in err


def test_a_primary_error_is_printed_at_once_even_with_a_hold(tmp_path: Path):
    env = base_env()
    env["PAIJOB_KNOCK_ON_HOLD"] = "60"
    (tmp_path / "bad.py").write_text("raise ValueError('bad batch on purpose')\n")
    done = subprocess.run([*WORKER, "bad.py"], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 1
    assert done.stderr.rstrip().endswith("ValueError: bad batch on purpose")


def _sleeping(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/wchan") as fh:
            return "sleep" in fh.read()
    except OSError:
        return False
