"""Recovery latency: a worker of a 2-node x 2-worker gloo job crashes once; how long until the job trains again?

Seconds from the crashing rank's raise to rank 0's first completed all_reduce of the start after it
(``restart_ddp.py`` writes both times), the same script every time, four ways of starting it again, taken in
turn in the same minutes (one sample of each, then the next round):

* ``paijob``: two ``paijob-runtime train --max-restarts 1`` (the nodes on loopback, OpenPAI's variables
  simulated): every node's workers stop and start again together inside the attempt;
* ``torchrun``: two ``torchrun --max-restarts 1 --rdzv-backend c10d``, with
  ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (rank 0's workers host a fresh store for each round);
* ``torchrun-shared-store``: the same with torch's default, the agents' shared store: counted, not timed
  when it does not restart (torch 2.13: the second round's gloo mesh reads the first round's addresses);
* ``job-retry``: the local cluster's whole-job retry (``jobRetryCount: 1``, no ``--max-restarts``): the failed
  attempt ends, every task is started again, as OpenPAI retries a job (without its queue and image pull).

    python benchmarks/bench_restart.py [--samples 5] [--out FILE]

Writes every sample, the medians, the machine and its load (``os.getloadavg`` before and after each sample) as
JSON (default ``benchmarks/results/restart-DATE-cpuN.json``) and prints a table. Not a test: the figures go
to docs/runtime/faults.md ("Recovery").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness import (
    BIN,
    ROOT,
    base_env,
    free_port,
    machine_info,
    progress,
    simulated_pai_env,
    write_json,
)

SCRIPT = Path(__file__).with_name("restart_ddp.py")
TIMEOUT = 240.0

JOB = """\
protocolVersion: 2
name: bench-restart-{stamp}
type: job
jobRetryCount: 1
prerequisites:
  - {{name: image, type: dockerimage, uri: "python:3.11"}}
taskRoles:
  worker:
    instances: 2
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 2048, gpu: 0, ports: {{SynPort: 1}}}}
    commands:
      - CUDA_VISIBLE_DEVICES= paijob-runtime train --nproc-per-node 2 --backend gloo --grace-period 5 -- {script} {folder}
"""


def _wait(procs: list[subprocess.Popen[bytes]], timeout: float) -> list[int | None]:
    """Each process's exit code; past ``timeout`` (or, once one ended, 30 s more) each is killed with its whole
    process group (torchrun's workers, which outlive a killed torchrun), and its code is None."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if any(p.poll() is not None for p in procs):
            deadline = min(deadline, time.monotonic() + 30.0)
        time.sleep(0.1)
    codes = [p.poll() for p in procs]
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # started in a session of its own
        proc.wait()
    return codes


def _two(argv: Callable[[int], list[str]], env: Callable[[int], dict[str, str]], folder: Path) -> list[int | None]:
    logs = [open(folder / f"node{i}.log", "wb") for i in (0, 1)]  # noqa: SIM115 - closed below
    try:
        procs = [subprocess.Popen(argv(i), env=env(i), cwd=folder, stdout=logs[i], stderr=subprocess.STDOUT,
                                  start_new_session=True) for i in (0, 1)]
        return _wait(procs, TIMEOUT)
    finally:
        for log in logs:
            log.close()


def paijob(folder: Path) -> list[int | None]:
    port = free_port()
    argv = [str(BIN / "paijob-runtime"), "train", "--nproc-per-node", "2", "--backend", "gloo", "--grace-period", "5",
            "--master-timeout", "60", "--max-restarts", "1", "--", str(SCRIPT), str(folder)]
    return _two(lambda i: argv, lambda i: base_env({**simulated_pai_env(2, i, port), "CUDA_VISIBLE_DEVICES": "",
                                                    "OMP_NUM_THREADS": "1"}), folder)


def torchrun(folder: Path, shared: bool = False) -> list[int | None]:
    port = free_port()
    argv = [str(BIN / "torchrun"), "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", folder.name, "--max-restarts", "1", str(SCRIPT),
            str(folder)]
    extra = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    if not shared:
        extra["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return _two(lambda i: argv, lambda i: base_env(extra), folder)


def job_retry(folder: Path, state: Path) -> list[int | None]:
    job = folder / "job.yaml"
    job.write_text(JOB.format(stamp=f"{int(time.time() * 1000)}", script=SCRIPT, folder=folder))
    env = base_env({"PAIJOB_LOCAL_STATE_DIR": str(state)})
    with open(folder / "run.log", "wb") as log:
        proc = subprocess.Popen([str(BIN / "paijob"), "run", str(job), "--local"], env=env, cwd=folder,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return _wait([proc], TIMEOUT)


def seconds(folder: Path) -> float | None:
    """Crash to the first step after it; None: the job never trained again."""
    crashed, first = folder / "crashed", folder / "first-step"
    if not crashed.exists() or not first.exists():
        return None
    return round(float(first.read_text()) - float(crashed.read_text()), 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    top = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    state = top / "state"
    ways: dict[str, Callable[[Path], list[int | None]]] = {
        "paijob": paijob, "torchrun": torchrun, "torchrun-shared-store": lambda f: torchrun(f, shared=True),
        "job-retry": lambda f: job_retry(f, state)}
    samples: dict[str, list[dict[str, object]]] = {name: [] for name in ways}
    # the local cluster up before the first sample: its start is not the retry's
    subprocess.run([str(BIN / "paijob"), "local", "up"], env=base_env({"PAIJOB_LOCAL_STATE_DIR": str(state)}),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    try:
        for round_number in range(args.samples):
            for name, way in ways.items():
                folder = top / f"{name}-{round_number}"
                folder.mkdir()
                before = os.getloadavg()
                progress(f"round {round_number + 1}/{args.samples}: {name}")
                codes = way(folder)
                samples[name].append({"seconds": seconds(folder), "exit_codes": codes,
                                      "load_before": [round(x, 2) for x in before],
                                      "load_after": [round(x, 2) for x in os.getloadavg()]})
    finally:
        subprocess.run([str(BIN / "paijob"), "local", "down"], env=base_env({"PAIJOB_LOCAL_STATE_DIR": str(state)}),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(top, ignore_errors=True)
    summary = {}
    for name, found in samples.items():
        timed = [s["seconds"] for s in found if isinstance(s["seconds"], float)]
        summary[name] = {"median": statistics.median(timed) if timed else None, "min": min(timed, default=None),
                         "max": max(timed, default=None), "restarted": len(timed), "samples": len(found)}
    ours, theirs = summary["paijob"]["median"], summary["torchrun"]["median"]
    ratios = {"paijob_over_torchrun": round(ours / theirs, 3) if ours and theirs else None,
              "paijob_over_job_retry": (round(ours / summary["job-retry"]["median"], 3)
                                        if ours and summary["job-retry"]["median"] else None)}
    result = {"benchmark": "restart", "machine": machine_info(), "cpus": len(os.sched_getaffinity(0)),
              "what": "seconds from a worker's crash to rank 0's first completed step after it, 2 nodes x 2 gloo "
                      "workers on loopback", "summary": summary, "ratios": ratios, "samples": samples,
              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    out = args.out or ROOT / "benchmarks" / "results" / (
        f"restart-{time.strftime('%Y-%m-%d')}-cpu{len(os.sched_getaffinity(0))}.json")
    write_json(out, result)
    for name, found in summary.items():
        print(f"{name:24} median {found['median']}  min {found['min']}  max {found['max']}  "
              f"restarted {found['restarted']}/{found['samples']}")
    print(f"ratios: {ratios}; written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
