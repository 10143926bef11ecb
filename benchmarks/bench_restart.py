"""Recovery latency: a worker of a 2-node x 2-worker gloo job crashes once; how long until the job trains again?

Seconds from the crashing rank's raise to rank 0's first completed all_reduce of the start after it
(``restart_ddp.py`` writes both times), the same script every time, several ways of starting it again, taken
in turn in the same minutes (one sample of each, then the next round). On loopback (``--hosts loopback``, the
default):

* ``paijob``: two ``paijob-runtime train --max-restarts 1`` (the nodes on loopback, OpenPAI's variables
  simulated): every node's workers stop and start again together inside the attempt;
* ``torchrun``: two ``torchrun --max-restarts 1 --rdzv-backend c10d``, with
  ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` (rank 0's workers host a fresh store for each round);
* ``torchrun-shared-store``: the same with torch's default, the agents' shared store: counted, not timed
  when it does not restart (torch 2.13: the second round's gloo mesh reads the first round's addresses);
* ``job-retry``: the local cluster's whole-job retry (``jobRetryCount: 1``, no ``--max-restarts``): the failed
  attempt ends, every task is started again, as OpenPAI retries a job (without its queue and image pull).

On two network-namespace hosts (``--hosts netns``; ``tests/runtime/netns.py``: each node in a namespace of its
own, cabled to a bridge, its host name resolving to 127.0.1.1; root only), where the restart's store, barrier and
gloo mesh cross a real interface, fresh hosts for every sample:

* ``paijob-netns``: ``paijob-runtime train --max-restarts 1`` on each host, with the ``PAI_*`` variables OpenPAI
  would give it (``netns.openpai_env``, the master port 29517 on host0);
* ``torchrun-netns``: ``torchrun --max-restarts 1`` c10d, ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` as above,
  its endpoint host0's address, with what torchrun needs there and paijob-runtime sets itself:
  ``--rdzv-conf is_host=1`` on host0 (else no agent hosts the store: torch takes the endpoint for another
  machine's, host0's name resolving to 127.0.1.1), ``--local-addr`` the host's address (else the workers'
  MASTER_ADDR is that name) and ``GLOO_SOCKET_IFNAME=eth0`` (else gloo binds to that loopback address).

A lost node (``--lost-node``, on network-namespace hosts, paijob only):

* ``paijob-lost-node-netns``: ``paijob-runtime train --max-restarts 1 --min-nodes 1 --heartbeat-timeout H``
  (``--heartbeat-timeout``, default 10), nobody raises (``CRASH_RANK=-1``, 100 steps); once rank 0 reached its
  10th step, every process of host1 is killed at once (SIGKILL: the host died); the figure is the seconds from
  just before that kill to rank 0's first completed step at the smaller world size (2 workers on host0).

    python benchmarks/bench_restart.py [--samples 5] [--hosts loopback|netns|both] [--lost-node]
                                       [--heartbeat-timeout 10] [--out FILE]

Writes every sample, the medians, the machine and its load (``os.getloadavg`` before and after each sample) as
JSON (default ``benchmarks/results/restart-DATE-cpuN.json``, ``restart-netns-...`` or ``restart-both-...`` with
``--hosts``) and prints a table. Not a test: the figures go to docs/runtime/faults.md ("Recovery").
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

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
PAIJOB = [str(BIN / "paijob-runtime"), "train", "--nproc-per-node", "2", "--backend", "gloo", "--grace-period", "5",
          "--master-timeout", "60", "--max-restarts", "1"]
LOOPBACK = ("paijob", "torchrun", "torchrun-shared-store", "job-retry")
NETNS = ("paijob-netns", "torchrun-netns")
LOST_NODE = "paijob-lost-node-netns"

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

Start = Callable[[int, IO[bytes]], "subprocess.Popen[bytes]"]


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


def _two(start: Start, folder: Path, until: Callable[[list[subprocess.Popen[bytes]]], list[int | None]] | None = None
         ) -> list[int | None]:
    """Node 0 and node 1 started by ``start``, their output in nodeN.log; ``until`` waits for them (default:
    both end, or :data:`TIMEOUT`)."""
    logs = [open(folder / f"node{i}.log", "wb") for i in (0, 1)]  # noqa: SIM115 - closed below
    try:
        procs = [start(i, logs[i]) for i in (0, 1)]
        return until(procs) if until else _wait(procs, TIMEOUT)
    finally:
        for log in logs:
            log.close()


def _here(argv: list[str], env: Callable[[int], dict[str, str]], folder: Path) -> Start:
    return lambda i, log: subprocess.Popen(argv, env=env(i), cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)


@contextlib.contextmanager
def _hosts() -> Iterator[Any]:
    """Two fresh network-namespace hosts (tests/runtime/netns.py); afterwards every process in them is killed and
    the namespaces removed, whatever happened."""
    from netns import Network  # tests/runtime, on sys.path (main)

    net = Network(2)
    try:
        yield net
    finally:
        net.close()


def _there(net: Any, argv: Callable[[int], list[str]], env: Callable[[int], dict[str, str]], folder: Path) -> Start:
    return lambda i, log: net.hosts[i].popen(argv(i), env=env(i), stdout=log, cwd=folder)


def _task_env(net: Any, index: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """What OpenPAI gives task ``index`` of a 2-task job on ``net``'s hosts, this venv's scripts first on PATH."""
    from netns import openpai_env

    env = openpai_env([("worker", 2)], "worker", index,
                      {("worker", n): host.address for n, host in enumerate(net.hosts)})
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "PYTHONUNBUFFERED": "1", **(extra or {})})
    return env


def paijob(folder: Path) -> list[int | None]:
    port = free_port()
    argv = [*PAIJOB, "--", str(SCRIPT), str(folder)]
    return _two(_here(argv, lambda i: base_env({**simulated_pai_env(2, i, port), "CUDA_VISIBLE_DEVICES": "",
                                                "OMP_NUM_THREADS": "1"}), folder), folder)


def paijob_netns(folder: Path) -> list[int | None]:
    argv = [*PAIJOB, "--", str(SCRIPT), str(folder)]
    with _hosts() as net:
        return _two(_there(net, lambda i: argv, lambda i: _task_env(net, i), folder), folder)


def _torchrun_argv(endpoint: str, folder: Path) -> list[str]:
    return [str(BIN / "torchrun"), "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", endpoint, "--rdzv-id", folder.name, "--max-restarts", "1"]


def torchrun(folder: Path, shared: bool = False) -> list[int | None]:
    argv = [*_torchrun_argv(f"127.0.0.1:{free_port()}", folder), str(SCRIPT), str(folder)]
    extra = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    if not shared:
        extra["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    return _two(_here(argv, lambda i: base_env(extra), folder), folder)


def torchrun_netns(folder: Path) -> list[int | None]:
    from netns import PORT

    env = base_env({"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
                    "GLOO_SOCKET_IFNAME": "eth0"})
    with _hosts() as net:
        base = _torchrun_argv(f"{net.hosts[0].address}:{PORT}", folder)
        return _two(_there(net, lambda i: [*base, "--local-addr", net.hosts[i].address, "--rdzv-conf",
                                           f"is_host={int(i == 0)}", str(SCRIPT), str(folder)],
                           lambda i: env, folder), folder)


def lost_node(folder: Path, heartbeat: float) -> list[int | None]:
    """Host1 killed whole once rank 0 reached step 10; ``crashed`` is the time just before the kill."""
    argv = [*PAIJOB, "--min-nodes", "1", "--heartbeat-timeout", str(heartbeat), "--", str(SCRIPT), str(folder)]
    extra = {"CRASH_RANK": "-1", "STEPS": "100"}

    def until(procs: list[subprocess.Popen[bytes]]) -> list[int | None]:
        deadline = time.monotonic() + TIMEOUT
        while not (folder / "reached").exists():
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                return _wait(procs, 0)  # never trained: no kill, no figure
            time.sleep(0.02)
        killed_at = time.time()
        net.hosts[1].kill_all()
        (folder / "crashed.tmp").write_text(repr(killed_at))
        (folder / "crashed.tmp").replace(folder / "crashed")
        return [*_wait(procs[:1], TIMEOUT), procs[1].wait()]

    with _hosts() as net:
        return _two(_there(net, lambda i: argv, lambda i: _task_env(net, i, extra), folder), folder, until)


def job_retry(folder: Path, state: Path) -> list[int | None]:
    job = folder / "job.yaml"
    job.write_text(JOB.format(stamp=f"{int(time.time() * 1000)}", script=SCRIPT, folder=folder))
    env = base_env({"PAIJOB_LOCAL_STATE_DIR": str(state)})
    with open(folder / "run.log", "wb") as log:
        proc = subprocess.Popen([str(BIN / "paijob"), "run", str(job), "--local"], env=env, cwd=folder,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return _wait([proc], TIMEOUT)


def seconds(folder: Path) -> float | None:
    """Crash (or kill) to the first step after it; None: the job never trained again."""
    crashed, first = folder / "crashed", folder / "first-step"
    if not crashed.exists() or not first.exists():
        return None
    return round(float(first.read_text()) - float(crashed.read_text()), 3)


def _ways(args: argparse.Namespace, state: Path) -> dict[str, Callable[[Path], list[int | None]]]:
    every: dict[str, Callable[[Path], list[int | None]]] = {
        "paijob": paijob, "torchrun": torchrun, "torchrun-shared-store": lambda f: torchrun(f, shared=True),
        "job-retry": lambda f: job_retry(f, state), "paijob-netns": paijob_netns, "torchrun-netns": torchrun_netns,
        LOST_NODE: lambda f: lost_node(f, args.heartbeat_timeout)}
    names = {"loopback": LOOPBACK, "netns": NETNS, "both": LOOPBACK + NETNS}[args.hosts]
    return {name: every[name] for name in (*names, *([LOST_NODE] if args.lost_node else []))}


def _sample(ways: dict[str, Callable[[Path], list[int | None]]], top: Path, rounds: int
            ) -> dict[str, list[dict[str, object]]]:
    samples: dict[str, list[dict[str, object]]] = {name: [] for name in ways}
    for round_number in range(rounds):
        for name, way in ways.items():
            folder = top / f"{name}-{round_number}"
            folder.mkdir()
            before = os.getloadavg()
            progress(f"round {round_number + 1}/{rounds}: {name}")
            codes = way(folder)
            samples[name].append({"seconds": seconds(folder), "exit_codes": codes,
                                  "load_before": [round(x, 2) for x in before],
                                  "load_after": [round(x, 2) for x in os.getloadavg()]})
    return samples


def _ratio(summary: dict[str, dict[str, Any]], ours: str, theirs: str) -> float | None:
    if ours not in summary or theirs not in summary:
        return None
    a, b = summary[ours]["median"], summary[theirs]["median"]
    return round(a / b, 3) if a and b else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--hosts", choices=("loopback", "netns", "both"), default="loopback",
                        help="the nodes on loopback, on two network-namespace hosts, or both (default: loopback)")
    parser.add_argument("--lost-node", action="store_true",
                        help="add the lost node: host1 killed whole, --min-nodes 1 (network-namespace hosts)")
    parser.add_argument("--heartbeat-timeout", type=float, default=10.0,
                        help="paijob-runtime's --heartbeat-timeout for the lost node (default: 10)")
    args = parser.parse_args()
    top = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    # every process started here (a host killed whole included, which cannot clean up) keeps its temporary
    # folders under ``top``, removed at the end: nothing is left in the machine's /tmp
    (top / "tmp").mkdir()
    os.environ["TMPDIR"] = str(top / "tmp")
    state = top / "state"
    ways = _ways(args, state)
    if any("netns" in name for name in ways):
        sys.path.insert(0, str(ROOT / "tests" / "runtime"))  # netns.py: the test hosts
        from netns import netns_unavailable

        if (why := netns_unavailable()) is not None:
            parser.error(f"network-namespace hosts: {why}")
    local = {"PAIJOB_LOCAL_STATE_DIR": str(state)}
    if "job-retry" in ways:  # the local cluster up before the first sample: its start is not the retry's
        subprocess.run([str(BIN / "paijob"), "local", "up"], env=base_env(local),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    try:
        samples = _sample(ways, top, args.samples)
    finally:
        if "job-retry" in ways:
            subprocess.run([str(BIN / "paijob"), "local", "down"], env=base_env(local),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        shutil.rmtree(top, ignore_errors=True)
    summary: dict[str, dict[str, Any]] = {}
    for name, found in samples.items():
        timed = [s["seconds"] for s in found if isinstance(s["seconds"], float)]
        summary[name] = {"median": statistics.median(timed) if timed else None, "min": min(timed, default=None),
                         "max": max(timed, default=None), "restarted": len(timed), "samples": len(found)}
    ratios = {key: value for key, value in {
        "paijob_over_torchrun": _ratio(summary, "paijob", "torchrun"),
        "paijob_over_job_retry": _ratio(summary, "paijob", "job-retry"),
        "paijob_netns_over_torchrun_netns": _ratio(summary, "paijob-netns", "torchrun-netns")}.items()
        if value is not None}
    result = {"benchmark": "restart", "machine": machine_info(), "cpus": len(os.sched_getaffinity(0)),
              "what": "seconds from a worker's crash (the lost node: from the kill of host1's every process) to "
                      "rank 0's first completed step after it, 2 nodes x 2 gloo workers, on "
                      + {"loopback": "loopback", "netns": "two network-namespace hosts",
                         "both": "loopback and on two network-namespace hosts"}[args.hosts],
              "hosts": args.hosts, "summary": summary, "ratios": ratios, "samples": samples,
              "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    if args.lost_node:
        result["lost_node"] = {"heartbeat_timeout_s": args.heartbeat_timeout, "min_nodes": 1, "max_restarts": 1,
                               "world_after": "1 node x 2 workers"}
    kind = "" if args.hosts == "loopback" else f"-{args.hosts}"
    out = args.out or ROOT / "benchmarks" / "results" / (
        f"restart{kind}-{time.strftime('%Y-%m-%d')}-cpu{len(os.sched_getaffinity(0))}.json")
    write_json(out, result)
    for name, line in summary.items():
        print(f"{name:24} median {line['median']}  min {line['min']}  max {line['max']}  "
              f"restarted {line['restarted']}/{line['samples']}")
    print(f"ratios: {ratios}; written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
