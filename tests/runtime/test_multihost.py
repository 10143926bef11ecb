"""paijob-runtime across real (namespaced) hosts: binding, partitions, lost peers, squatters.

Each node runs ``paijob-runtime train`` inside its own network namespace
(see :mod:`netns`) with the ``PAI_*`` variables OpenPAI would give it; every
host name resolves to ``127.0.1.1`` there, as on stock Ubuntu.
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hang_programs import HANGS
from netns import PORT, Host, Network, netns_unavailable, openpai_env
from restart_programs import RESTART_LINE, TRAINS, TRAINS_LONGER
from runtime_helpers import MASTER_TIMEOUT, RUNTIME, base_env, root_cause

from paijob.common import exitcodes

_UNAVAILABLE = netns_unavailable()
pytestmark = pytest.mark.skipif(_UNAVAILABLE is not None, reason=str(_UNAVAILABLE))

class Node:
    """``paijob-runtime train`` on one test host, output in a file."""

    def __init__(self, host: Host, args: list[str], env: dict[str, str], log: Path) -> None:
        self.host = host
        self.log = log
        with open(log, "wb") as fh:
            self.proc = host.popen([*RUNTIME, *args], env=env, stdout=fh, cwd=log.parent)
        self.ended_at: float | None = None

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and self.ended_at is None:
            self.ended_at = time.monotonic()
        return code

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")


def wait_nodes(nodes: list[Node], timeout: float) -> list[int | None]:
    """Exit codes once every node ended, or None for those still running after ``timeout``."""
    deadline = time.monotonic() + timeout
    while any(n.poll() is None for n in nodes) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [n.poll() for n in nodes]


def outputs(nodes: list[Node]) -> str:
    return "\n".join(f"----- node on {n.host.name}:\n{n.output}" for n in nodes)


def wait_for(predicate, nodes: list[Node], timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline or any(n.poll() is not None for n in nodes):
            raise AssertionError(f"never saw {what}:\n{outputs(nodes)}")
        time.sleep(0.05)


@pytest.fixture
def network() -> Iterator[Callable[[int], Network]]:
    made: list[Network] = []

    def make(hosts: int) -> Network:
        net = Network(hosts)
        made.append(net)
        return net

    try:
        yield make
    finally:
        for net in made:
            net.close()


def start_job(
    net: Network, tmp_path: Path, roles: list[tuple[str, int]], args: list[str],
    extra_env: dict[str, str] | None = None,
) -> list[Node]:
    """One node per task, task i of the job on host i (roles in PAI_TASK_ROLE_LIST order)."""
    tasks = [(name, i) for name, count in roles for i in range(count)]
    assert len(tasks) <= len(net.hosts)
    addresses = {task: net.hosts[n].address for n, task in enumerate(tasks)}
    nodes = []
    for n, (role, index) in enumerate(tasks):
        env = openpai_env(roles, role, index, addresses)
        env.update(extra_env or {})
        nodes.append(Node(net.hosts[n], ["train", *args], env, tmp_path / f"{role}{index}.log"))
    return nodes


DDP_SCRIPT = textwrap.dedent(
    """
    import os, socket, sys
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(rank)  # every rank sees different data
    for _ in range(5):
        x = torch.randn(16, 8, generator=data)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    hosts = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    with open(os.path.join(sys.argv[1], f"rank{rank}"), "w") as fh:
        fh.write(" ".join(f"{v:.6f}" for v in params.tolist()) + "\\n")
        fh.write(",".join(hosts) + "\\n" + os.environ.get("GLOO_SOCKET_IFNAME", "") + "\\n")
        fh.write(os.environ.get("NCCL_SOCKET_IFNAME", "") + "\\n")
    dist.destroy_process_group()
    """
)


def run_ddp_job(
    net: Network, tmp_path: Path, roles: list[tuple[str, int]], nproc: int
) -> tuple[list[Node], dict[int, list[str]]]:
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    results = tmp_path / "results"
    results.mkdir()
    nodes = start_job(
        net, tmp_path, roles,
        ["--nproc-per-node", str(nproc), "--master-timeout", str(MASTER_TIMEOUT), str(script), str(results)],
    )
    codes = wait_nodes(nodes, timeout=150)
    assert codes == [0] * len(nodes), outputs(nodes)
    return nodes, {
        int(f.name[4:]): f.read_text().splitlines() for f in results.iterdir()
    }


@pytest.mark.slow
def test_two_hosts_with_loopback_hostnames_train_ddp_together(network, tmp_path: Path):
    net = network(2)
    nodes, results = run_ddp_job(net, tmp_path, [("worker", 2)], nproc=2)
    assert sorted(results) == [0, 1, 2, 3], outputs(nodes)
    params = {tuple(lines[0].split()) for lines in results.values()}
    assert len(params) == 1, results  # DDP kept every replica identical
    assert results[0][1] == "host0,host0,host1,host1"  # really two hosts
    assert {lines[2] for lines in results.values()} == {"eth0"}  # GLOO_SOCKET_IFNAME
    assert {lines[3] for lines in results.values()} == {"=eth0"}  # NCCL_SOCKET_IFNAME, exact
    for node in nodes:
        assert f"collectives bind to interface eth0 ({node.host.address}" in node.output


@pytest.mark.slow
def test_two_roles_one_master_and_two_workers_train_together(network, tmp_path: Path):
    net = network(3)
    nodes, results = run_ddp_job(net, tmp_path, [("ps_master", 1), ("worker", 2)], nproc=1)
    assert sorted(results) == [0, 1, 2], outputs(nodes)
    assert len({tuple(lines[0].split()) for lines in results.values()}) == 1, results
    assert results[0][1] == "host0,host1,host2"


KEEPS_TRAINING = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    with open(os.path.join(sys.argv[1], os.environ["RANK"]), "w") as fh:
        fh.write(str(os.getpid()))
    while True:  # in a collective most of the time, as training is
        dist.all_reduce(t)
        time.sleep(0.02)
    """
)
HEARTBEAT_TIMEOUT = 10.0
BOUND = HEARTBEAT_TIMEOUT + 30  # the promise: every node exits within this after a loss


def start_training(
    net: Network, tmp_path: Path, roles: list[tuple[str, int]]
) -> tuple[list[Node], Path]:
    """A job whose workers all-reduce forever; returns once every worker is in the loop."""
    script = tmp_path / "trains.py"
    script.write_text(KEEPS_TRAINING)
    ready = tmp_path / "ready"
    ready.mkdir()
    nodes = start_job(
        net, tmp_path, roles,
        ["--nproc-per-node", "1", "--heartbeat-timeout", str(HEARTBEAT_TIMEOUT),
         "--grace-period", "3", "--master-timeout", str(MASTER_TIMEOUT), str(script), str(ready)],
    )
    world = sum(count for _, count in roles)
    wait_for(lambda: len(list(ready.iterdir())) == world, nodes, 120, "every worker training")
    return nodes, ready


def assert_nothing_left(net: Network) -> None:
    for host in net.hosts:
        assert host.pids() == [], f"processes left on {host.name}: {host.pids()}"


@pytest.mark.slow
def test_a_partition_ends_every_node_with_143_naming_the_lost_node(network, tmp_path: Path):
    net = network(2)
    nodes, _ = start_training(net, tmp_path, [("worker", 2)])
    net.hosts[1].cut()
    cut_at = time.monotonic()
    codes = wait_nodes(nodes, timeout=BOUND + 30)
    took = [round((n.ended_at or float("inf")) - cut_at, 1) for n in nodes]
    print(f"partition: node exits after {took} s (heartbeat timeout {HEARTBEAT_TIMEOUT:.0f}s)")
    assert codes == [exitcodes.INFRA_FAILURE] * 2, outputs(nodes)
    assert max(took) < BOUND, took
    assert "error: node rank 1 (worker:1 at 10.213.0.2) stopped sending heartbeats for 10s" in (
        nodes[0].output
    )
    assert (
        "error: node rank 0 (the master, rendezvous store at 10.213.0.1:29517) was lost: "
        "it did not answer for 10s" in nodes[1].output
    ), outputs(nodes)
    for node in nodes:
        assert "frame #" not in node.output  # one line, not pages of C++ stack
    assert_nothing_left(net)


@pytest.mark.slow
def test_a_killed_node_ends_the_survivors_with_143_naming_it(network, tmp_path: Path):
    net = network(3)
    nodes, _ = start_training(net, tmp_path, [("worker", 3)])
    net.hosts[1].kill_all()  # kill -9 of the node's whole process tree
    killed_at = time.monotonic()
    survivors = [nodes[0], nodes[2]]
    codes = wait_nodes(survivors, timeout=BOUND + 30)
    took = [round((n.ended_at or float("inf")) - killed_at, 1) for n in survivors]
    print(f"kill -9 of node rank 1: survivors (node ranks 0, 2) exit after {took} s")
    assert codes == [exitcodes.INFRA_FAILURE] * 2, outputs(nodes)
    assert max(took) < BOUND, took
    lost = "node rank 1 (worker:1 at 10.213.0.2) stopped sending heartbeats for 10s"
    for node in survivors:
        assert f"error: {lost}" in node.output, outputs(nodes)
        assert "Connection reset by peer" not in node.output.split("error:", 1)[1]
    assert_nothing_left(net)



def test_a_killed_master_ends_the_other_node_with_143_in_one_line(network, tmp_path: Path):
    net = network(2)
    nodes, _ = start_training(net, tmp_path, [("worker", 2)])
    net.hosts[0].kill_all()  # the store's host goes, with its whole process tree
    killed_at = time.monotonic()
    codes = wait_nodes([nodes[1]], timeout=BOUND + 30)
    took = round((nodes[1].ended_at or float("inf")) - killed_at, 1)
    print(f"kill -9 of node rank 0: node rank 1 exits after {took} s")
    assert codes == [exitcodes.INFRA_FAILURE], outputs(nodes)
    assert took < BOUND
    out = nodes[1].output
    assert "error: node rank 0 (the master, rendezvous store at 10.213.0.1:29517) was lost" in out
    assert "frame #" not in out and "Traceback" not in out.split("error:", 1)[1]
    assert_nothing_left(net)

def _restartable_job(net: Network, tmp_path: Path, script: str, extra: list[str], args: list[str]) -> list[Node]:
    path = tmp_path / "trains.py"
    path.write_text(script)
    return start_job(net, tmp_path, [("worker", 2)],
                     ["--nproc-per-node", "1", "--grace-period", "3", "--master-timeout", str(MASTER_TIMEOUT),
                      *extra, str(path), str(tmp_path), *args])


@pytest.mark.slow
def test_a_worker_crash_on_one_host_restarts_both_hosts_workers_and_the_job_ends_0(network, tmp_path: Path):
    """Issue 52 on two hosts: rank 1 (host1) raises once at step 7; both hosts' workers start again together
    from the checkpoint of step 5, inside the same task processes, and finish."""
    net = network(2)
    nodes = _restartable_job(net, tmp_path, TRAINS, ["--max-restarts", "2"], ["7", "once"])
    assert wait_nodes(nodes, timeout=180) == [0, 0], outputs(nodes)
    done = json.loads((tmp_path / "done.json").read_text())
    assert done == {"last": 22.0, "world": 2, "restart": 1, "start": 6}, done
    lines = RESTART_LINE.findall(nodes[0].output)
    assert len(lines) == 1 and lines[0][:2] == ("1", "2"), outputs(nodes)
    assert "worker rank 1 (node rank 1, local rank 0) failed with exit code 1" in lines[0][2]
    assert "ValueError: bad batch on purpose" in lines[0][2]
    assert_nothing_left(net)


@pytest.mark.slow
def test_with_min_nodes_a_lost_host_leaves_node_0_to_finish_alone(network, tmp_path: Path):
    """Issue 52 on two hosts: host1 dies whole (kill -9 of its process tree) mid-training; with --min-nodes 1
    node 0 restarts its worker at world size 1 from the last checkpoint and ends 0."""
    net = network(2)
    nodes = _restartable_job(net, tmp_path, TRAINS_LONGER,
                             ["--heartbeat-timeout", "5", "--max-restarts", "1", "--min-nodes", "1"], [])
    deadline = time.monotonic() + 120
    while not (tmp_path / "ckpt.json").exists():  # training, with a first checkpoint
        assert time.monotonic() < deadline and all(n.poll() is None for n in nodes), outputs(nodes)
        time.sleep(0.1)
    net.hosts[1].kill_all()
    killed_at = time.monotonic()
    assert wait_nodes([nodes[0]], timeout=180) == [0], outputs(nodes)
    print(f"host1 lost: node rank 0 finished alone {nodes[0].ended_at - killed_at:.1f} s later")
    done = json.loads((tmp_path / "done.json").read_text())
    assert (done["world"], done["restart"], done["last"]) == (1, 1, 59.0), done
    lines = RESTART_LINE.findall(nodes[0].output)
    assert len(lines) == 1 and "node rank 1 was lost; going on with 1 of 2 nodes (--min-nodes 1)" in lines[0][2]
    assert_nothing_left(net)


SQUATTER = textwrap.dedent(
    """
    import socket, sys, time
    server = socket.create_server(("", int(sys.argv[1])))
    print("listening", flush=True)
    held = []
    while True:  # accept, never answer
        held.append(server.accept()[0])
    """
)


@pytest.mark.slow
def test_a_squatter_on_the_master_port_is_reported_within_the_master_timeout(
    network, tmp_path: Path
):
    net = network(2)
    squatter_log = tmp_path / "squatter.log"
    with open(squatter_log, "wb") as fh:
        net.hosts[0].popen([sys.executable, "-c", SQUATTER, str(PORT)], env=base_env(),
                           stdout=fh, cwd=tmp_path)
    deadline = time.monotonic() + 30
    while "listening" not in squatter_log.read_text():
        assert time.monotonic() < deadline, squatter_log.read_text()
        time.sleep(0.05)
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('must not run')\n")
    master_timeout = 10.0
    started = time.monotonic()
    nodes = start_job(
        net, tmp_path, [("worker", 2)], ["--master-timeout", str(master_timeout), str(script)]
    )
    codes = wait_nodes(nodes, timeout=master_timeout + 60)
    took = [round((n.ended_at or float("inf")) - started, 1) for n in nodes]
    print(f"squatter on the master port: nodes report after {took} s "
          f"(--master-timeout {master_timeout:.0f}s, start-up included)")
    assert codes == [exitcodes.INFRA_FAILURE] * 2, outputs(nodes)
    assert f"port {PORT} on this host is taken by another process" in nodes[0].output
    assert (
        f"the master's port 10.213.0.1:{PORT} accepts connections but did not answer as a "
        f"rendezvous store within --master-timeout (10s)" in nodes[1].output
    ), outputs(nodes)
    assert took[1] < master_timeout + 40, took  # + start-up (python, torch) on a loaded host
    for node in nodes:
        assert "must not run" not in node.output


@pytest.mark.slow
def test_sigterm_to_node_0_stops_every_node_with_143_and_leaves_nothing(network, tmp_path: Path):
    net = network(2)
    nodes, _ = start_training(net, tmp_path, [("worker", 2)])
    nodes[0].proc.send_signal(signal.SIGTERM)
    sent_at = time.monotonic()
    codes = wait_nodes(nodes, timeout=60)
    took = [round((n.ended_at or float("inf")) - sent_at, 1) for n in nodes]
    print(f"SIGTERM to node rank 0: nodes exit after {took} s")
    assert codes == [exitcodes.INFRA_FAILURE] * 2, outputs(nodes)
    assert max(took) < 15, took
    assert "node rank 0 received SIGTERM and stopped its workers" in nodes[1].output
    assert_nothing_left(net)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HANGS))
def test_each_hang_across_hosts_names_the_rank_and_its_host(name: str, network, tmp_path: Path):
    """The five hangs of issue 26 over a real network: node 0 names the culprit by host address, and
    every node ends 124 (a busy culprit at the hard limit, after a straggler warning)."""
    source, culprit, phrase = HANGS[name]
    timeout, hard_limit = 10, 2
    busy = name == "spin-loop-mid-training"
    nproc = 2 if name == "skipped-collective" else 1  # 3 ranks agree on a barrier, the 4th waits elsewhere
    script = tmp_path / "hang.py"
    script.write_text(source)
    net = network(2)
    nodes = start_job(net, tmp_path, [("worker", 2)], [
        "--nproc-per-node", str(nproc), "--master-timeout", "60", "--grace-period", "3",
        "--hang-timeout", str(timeout), "--hang-first-timeout", str(timeout),
        "--hang-hard-limit", str(hard_limit), str(script)])
    started = time.monotonic()
    codes = wait_nodes(nodes, timeout=150)
    assert codes == [exitcodes.HANG] * 2, outputs(nodes)
    limit = hard_limit * timeout if busy else timeout
    assert max(n.ended_at or 0 for n in nodes) - started < 25 + limit + 30  # start-up, then the limit
    node_rank, local_rank = divmod(culprit, nproc)
    host = net.hosts[node_rank].address
    for node in nodes:
        cause = root_cause(node.output)
        assert cause is not None and cause.startswith("hang: "), outputs(nodes)
        assert f"rank {culprit} (node rank {node_rank}, host {host}, local rank {local_rank}) {phrase}" in cause
    if busy:
        assert "warning: straggler: rank 1" in nodes[0].output
