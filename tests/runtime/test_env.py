"""PAI_* → DistEnv: the pure mapping, table by table."""

from __future__ import annotations

import pytest

from paijob.runtime.env import (
    DistEnvError,
    LaunchOptions,
    check_nproc_fits,
    compute_dist_env,
    compute_mpi_slot,
    parse_nproc_option,
    parse_roles_option,
    runtime_role_name,
)


def pai_env(
    roles: dict[str, tuple[int, int]] | None = None,
    current: str = "worker",
    index: int = 0,
    *,
    master: str | None = None,
    port: str = "15000",
    label: str = "SynPort",
    ip: str = "10.0.0.1",
    old_index_only: bool = False,
) -> dict[str, str]:
    """The variables OpenPAI gives one task. ``roles``: name → (instances, gpus)."""
    roles = roles or {"worker": (2, 4)}
    master = master or next(iter(roles))
    env = {
        "PAI_JOB_NAME": "alice~job1",
        "PAI_USER_NAME": "alice",
        "PAI_TASK_ROLE_LIST": ",".join(roles),
        "PAI_CURRENT_TASK_ROLE_NAME": current,
    }
    if old_index_only:
        env["PAI_TASK_INDEX"] = str(index)
    else:
        env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] = str(index)
        env["PAI_TASK_INDEX"] = str(index)
    for role, (count, gpus) in roles.items():
        env[f"PAI_TASK_ROLE_TASK_COUNT_{role}"] = str(count)
        env[f"PAI_RESOURCE_{role}"] = f"{gpus},8,16384,512"
        rt = runtime_role_name(role)
        for i in range(count):
            env[f"PAI_HOST_IP_{rt}_{i}"] = f"10.0.{len(rt)}.{i + 1}"
    rt = runtime_role_name(master)
    env[f"PAI_HOST_IP_{rt}_0"] = ip
    env[f"PAI_PORT_LIST_{rt}_0_{label}"] = port
    env[f"PAI_{rt}_0_{label}_PORT"] = port
    return env


# -- single role ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "node_rank", "ranks"),
    [(0, 0, [0, 1, 2, 3]), (1, 1, [4, 5, 6, 7]), (2, 2, [8, 9, 10, 11])],
)
def test_single_role_ranks_are_node_rank_times_nproc_plus_local_rank(index, node_rank, ranks):
    dist = compute_dist_env(pai_env({"worker": (3, 4)}, index=index), visible_gpus=4)
    assert dist.node_rank == node_rank
    assert dist.nnodes == 3
    assert dist.nproc_per_node == 4
    assert dist.world_size == 12
    assert [dist.rank(i) for i in range(4)] == ranks
    assert dist.master_addr == "10.0.0.1"
    assert dist.master_port == 15000
    assert dist.backend == "nccl"


def test_rank_zero_is_task_zero_gpu_zero():
    dist = compute_dist_env(pai_env(index=0), visible_gpus=4)
    assert dist.rank(0) == 0
    assert dist.node_env()["NODE_RANK"] == "0"


def test_node_env_carries_the_torchrun_variables_and_rank_the_rest():
    """What every worker of node 1 starts with (the layout ``contract.worker_env`` adds); its own ``RANK`` is
    ``dist.rank(local_rank)``, the rank torch's agent gives it."""
    dist = compute_dist_env(pai_env(index=1), visible_gpus=4)
    assert dist.rank(2) == 6
    assert dist.node_env() == {
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "15000",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "NODE_RANK": "1",
        "GROUP_RANK": "1",
        "NNODES": "2",
        "GROUP_WORLD_SIZE": "2",
        "NPROC_PER_NODE": "4",
        "PAIJOB_BACKEND": "nccl",
    }


def test_node_env_for_per_node_mode_has_no_per_worker_rank():
    env = compute_dist_env(pai_env(index=1), visible_gpus=4).node_env()
    assert "RANK" not in env and "LOCAL_RANK" not in env
    assert env["NODE_RANK"] == "1" and env["NPROC_PER_NODE"] == "4" and env["WORLD_SIZE"] == "8"


def test_old_pai_task_index_alone_is_enough():
    dist = compute_dist_env(pai_env(index=1, old_index_only=True), visible_gpus=4)
    assert dist.node_rank == 1 and dist.task_index == 1


def test_task_index_variables_that_disagree_are_an_error():
    env = pai_env(index=1)
    env["PAI_TASK_INDEX"] = "0"
    with pytest.raises(DistEnvError, match=r"CURRENT_TASK_INDEX=1 and PAI_TASK_INDEX=0 disagree"):
        compute_dist_env(env, visible_gpus=4)


def test_port_list_and_port_variable_that_disagree_are_an_error():
    env = pai_env(port="15000")
    env["PAI_worker_0_SynPort_PORT"] = "15001"
    with pytest.raises(DistEnvError, match=r"PAI_PORT_LIST_worker_0_SynPort='15000' and "
                                           r"PAI_worker_0_SynPort_PORT='15001' disagree"):
        compute_dist_env(env, visible_gpus=4)


def test_a_host_name_instead_of_the_master_ip_is_an_error():
    with pytest.raises(DistEnvError, match=r"PAI_HOST_IP_worker_0='node-a' is not an IP address"):
        compute_dist_env(pai_env(ip="node-a"), visible_gpus=4)
    assert compute_dist_env(pai_env(ip="fd00::1"), visible_gpus=4).master_addr == "fd00::1"


def test_port_list_with_several_ports_uses_the_first():
    env = pai_env(port="15001,15002,15003")
    assert compute_dist_env(env, visible_gpus=4).master_port == 15001


def test_legacy_port_variable_is_the_fallback():
    env = pai_env()
    del env["PAI_PORT_LIST_worker_0_SynPort"]
    env["PAI_worker_0_SynPort_PORT"] = "16000,16001"
    assert compute_dist_env(env, visible_gpus=4).master_port == 16000


def test_custom_port_label():
    env = pai_env(label="dist")
    dist = compute_dist_env(env, LaunchOptions(port_label="dist"), visible_gpus=4)
    assert dist.master_port == 15000 and dist.port_label == "dist"


# -- GPUs, nproc, backend ---------------------------------------------------------------------


def test_auto_nproc_falls_back_to_the_declared_gpu_count_when_none_are_visible():
    dist = compute_dist_env(pai_env({"worker": (2, 4)}), visible_gpus=0)
    assert dist.nproc_per_node == 4 and dist.world_size == 8
    assert dist.backend == "gloo"


def test_auto_nproc_is_one_on_a_cpu_role():
    dist = compute_dist_env(pai_env({"worker": (2, 0)}), visible_gpus=0)
    assert dist.nproc_per_node == 1 and dist.world_size == 2 and dist.backend == "gloo"


def test_explicit_nproc_overrides_gpus():
    dist = compute_dist_env(pai_env(index=1), LaunchOptions(nproc_per_node=2), visible_gpus=4)
    assert dist.nproc_per_node == 2 and dist.world_size == 4 and dist.rank(0) == 2


def test_explicit_backend_is_kept():
    dist = compute_dist_env(pai_env(), LaunchOptions(backend="gloo"), visible_gpus=4)
    assert dist.backend == "gloo"


def test_visible_gpus_that_contradict_the_declared_count_are_an_error_on_several_nodes():
    with pytest.raises(DistEnvError, match=r"PAI_RESOURCE_worker=.*--nproc-per-node"):
        compute_dist_env(pai_env({"worker": (2, 4)}), visible_gpus=8)


def test_visible_gpus_win_on_a_single_node():
    dist = compute_dist_env(pai_env({"worker": (1, 4)}), visible_gpus=2)
    assert dist.nproc_per_node == 2 and dist.world_size == 2


# -- standalone -------------------------------------------------------------------------------


def test_standalone_without_pai_variables():
    dist = compute_dist_env({"HOME": "/root"}, visible_gpus=0, free_port=23456)
    assert (dist.master_addr, dist.master_port) == ("127.0.0.1", 23456)
    assert (dist.node_rank, dist.nnodes, dist.nproc_per_node, dist.world_size) == (0, 1, 1, 1)
    assert not dist.openpai and dist.backend == "gloo"


def test_standalone_uses_every_visible_gpu():
    dist = compute_dist_env({}, visible_gpus=3, free_port=1)
    assert dist.nproc_per_node == 3 and dist.world_size == 3 and dist.backend == "nccl"


# -- several roles ----------------------------------------------------------------------------

MASTER_WORKER = {"master": (1, 2), "worker": (3, 2)}


@pytest.mark.parametrize(
    ("current", "index", "node_rank", "first_rank"),
    [("master", 0, 0, 0), ("worker", 0, 1, 2), ("worker", 2, 3, 6)],
)
def test_roles_form_one_world_in_task_role_list_order(current, index, node_rank, first_rank):
    dist = compute_dist_env(pai_env(MASTER_WORKER, current, index), visible_gpus=2)
    assert dist.nnodes == 4 and dist.world_size == 8
    assert dist.node_rank == node_rank and dist.rank(0) == first_rank
    assert dist.master_role == "master" and dist.roles == ("master", "worker")


def test_roles_with_different_gpu_counts_get_contiguous_ranks():
    roles = {"master": (1, 1), "worker": (2, 4)}
    dist = compute_dist_env(pai_env(roles, "worker", 1), visible_gpus=4)
    assert dist.world_size == 9
    assert [dist.rank(i) for i in range(4)] == [5, 6, 7, 8]


def test_roles_option_selects_who_takes_part():
    roles = {"ps": (2, 0), "worker": (2, 1)}
    env = pai_env(roles, "worker", 1, master="worker")
    dist = compute_dist_env(env, LaunchOptions(roles=("worker",)), visible_gpus=1)
    assert dist.nnodes == 2 and dist.node_rank == 1 and dist.world_size == 2
    assert dist.master_role == "worker"


def test_explicit_master_role_gets_node_rank_zero():
    roles = {"worker": (2, 1), "chief": (1, 1)}
    env = pai_env(roles, "worker", 0, master="chief")
    dist = compute_dist_env(env, LaunchOptions(master_role="chief"), visible_gpus=1)
    assert dist.roles == ("chief", "worker")
    assert dist.node_rank == 1
    chief = compute_dist_env(
        pai_env(roles, "chief", 0, master="chief"), LaunchOptions(master_role="chief"),
        visible_gpus=1,
    )
    assert chief.node_rank == 0 and chief.rank(0) == 0


def test_role_names_are_rewritten_for_runtime_variables_only():
    roles = {"ps_Server-1": (1, 1), "train_er": (2, 1)}
    env = pai_env(roles, "train_er", 1)
    assert "PAI_HOST_IP_psserver1_0" in env and "PAI_TASK_ROLE_TASK_COUNT_ps_Server-1" in env
    dist = compute_dist_env(env, visible_gpus=1)
    assert dist.master_addr == "10.0.0.1" and dist.node_rank == 2 and dist.world_size == 3


def test_runtime_role_name():
    assert runtime_role_name("ps_server") == "psserver"
    assert runtime_role_name("Worker-2") == "worker2"


# -- errors ------------------------------------------------------------------------------------


def _without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (lambda e: _without(e, "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX", "PAI_TASK_INDEX"),
         r"PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX \(older name PAI_TASK_INDEX\) is not set"),
        (lambda e: _without(e, "PAI_TASK_ROLE_TASK_COUNT_worker"),
         r"PAI_TASK_ROLE_TASK_COUNT_worker is not set.*instances"),
        (lambda e: _without(e, "PAI_HOST_IP_worker_0"),
         r"PAI_HOST_IP_worker_0 is not set.*gangAllocation"),
        (lambda e: _without(e, "PAI_PORT_LIST_worker_0_SynPort", "PAI_worker_0_SynPort_PORT"),
         r"PAI_PORT_LIST_worker_0_SynPort nor PAI_worker_0_SynPort_PORT.*ports: \{SynPort: 1\}"),
        (lambda e: _without(e, "PAI_TASK_ROLE_LIST", "PAI_CURRENT_TASK_ROLE_NAME"),
         r"neither PAI_TASK_ROLE_LIST nor PAI_CURRENT_TASK_ROLE_NAME"),
        (lambda e: {**e, "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": "2", "PAI_TASK_INDEX": "2"},
         r"task index 2 \(PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX\) .*PAI_TASK_ROLE_TASK_COUNT_worker=2"),
        (lambda e: {**e, "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": "one"},
         r"PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX='one' is not an integer"),
        (lambda e: {**e, "PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX": "-1"},
         r"PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX='-1' is negative"),
        (lambda e: {**e, "PAI_PORT_LIST_worker_0_SynPort": "http"},
         r"PAI_PORT_LIST_worker_0_SynPort='http' is not a port number"),
        (lambda e: {**e, "PAI_PORT_LIST_worker_0_SynPort": "70000"},
         r"port 70000 is outside 1..65535"),
        (lambda e: {**e, "PAI_TASK_ROLE_TASK_COUNT_worker": "0"},
         r"PAI_TASK_ROLE_TASK_COUNT_worker='0': a task role has at least 1 instance"),
        (lambda e: {**e, "PAI_RESOURCE_worker": "four,8,1,1"},
         r"PAI_RESOURCE_worker='four,8,1,1' does not start with a GPU count"),
        (lambda e: {**e, "PAI_CURRENT_TASK_ROLE_NAME": "ps"},
         r"PAI_CURRENT_TASK_ROLE_NAME='ps' is not in PAI_TASK_ROLE_LIST='worker'"),
    ],
)
def test_missing_or_inconsistent_variables_name_the_variable(mutate, pattern):
    with pytest.raises(DistEnvError, match=pattern) as info:
        compute_dist_env(mutate(pai_env()), visible_gpus=0)
    assert info.value.exit_code == 2


def test_unknown_role_in_roles_option():
    with pytest.raises(DistEnvError, match=r"--roles names 'chief', not a task role"):
        compute_dist_env(pai_env(), LaunchOptions(roles=("worker", "chief")))


def test_current_role_outside_roles_option():
    env = pai_env({"ps": (1, 0), "worker": (2, 1)}, "ps", 0, master="worker")
    with pytest.raises(DistEnvError, match=r"role 'ps' .* is not among the roles"):
        compute_dist_env(env, LaunchOptions(roles=("worker",)))


def test_master_role_must_take_part():
    env = pai_env({"ps": (1, 0), "worker": (2, 1)}, "worker", 0)
    with pytest.raises(DistEnvError, match=r"--master-role 'ps' does not take part"):
        compute_dist_env(env, LaunchOptions(roles=("worker",), master_role="ps"))


def test_unknown_master_role():
    with pytest.raises(DistEnvError, match=r"--master-role 'chief' is not a task role"):
        compute_dist_env(pai_env(), LaunchOptions(master_role="chief"))


def test_peer_role_without_resource_needs_explicit_nproc():
    env = _without(pai_env(MASTER_WORKER, "master", 0), "PAI_RESOURCE_worker")
    with pytest.raises(DistEnvError, match=r"PAI_RESOURCE_worker is not set"):
        compute_dist_env(env, visible_gpus=2)
    assert compute_dist_env(env, LaunchOptions(nproc_per_node=2)).world_size == 8


def test_bad_options():
    with pytest.raises(DistEnvError, match="--backend"):
        compute_dist_env({}, LaunchOptions(backend="mpi"))
    with pytest.raises(DistEnvError, match="--nproc-per-node"):
        parse_nproc_option("zero")
    with pytest.raises(DistEnvError, match="at least 1"):
        parse_nproc_option("0")
    assert parse_nproc_option("auto") is None and parse_nproc_option("3") == 3
    assert parse_roles_option(" a, b ,") == ("a", "b") and parse_roles_option("") is None


def test_a_worker_count_beyond_four_per_core_is_refused():
    check_nproc_fits(8, cpu_cores=2)
    with pytest.raises(DistEnvError, match=r"--nproc-per-node 100000 is more than 4 workers per "
                                           r"CPU core .*2 core\(s\), so at most 8"):
        check_nproc_fits(100000, cpu_cores=2)


def test_torchrun_style_options_set_the_layout_without_pai_variables():
    options = LaunchOptions(nproc_per_node=2, nnodes=3, node_rank=2, master_addr="10.1.1.1",
                            master_port=29400)
    dist = compute_dist_env({}, options, free_port=1)
    assert (dist.master_addr, dist.master_port, dist.node_rank, dist.nnodes) == (
        "10.1.1.1", 29400, 2, 3)
    assert (dist.world_size, dist.rank(1)) == (6, 5)
    with pytest.raises(DistEnvError, match="needs --master-port"):
        compute_dist_env({}, LaunchOptions(nnodes=2), free_port=1)
    with pytest.raises(DistEnvError, match=r"--node-rank must be in 0..1"):
        compute_dist_env({}, LaunchOptions(nnodes=2, node_rank=2, master_port=5), free_port=1)


def test_torchrun_style_options_must_agree_with_an_openpai_task():
    env = pai_env(index=1)
    same = LaunchOptions(nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=15000)
    assert compute_dist_env(env, same, visible_gpus=4).node_rank == 1
    with pytest.raises(DistEnvError, match=r"--node-rank 0 contradicts .*would be 1"):
        compute_dist_env(env, LaunchOptions(node_rank=0), visible_gpus=4)
    with pytest.raises(DistEnvError, match=r"--master-port 12355 contradicts"):
        compute_dist_env(env, LaunchOptions(master_port=12355), visible_gpus=4)


def test_dist_env_is_frozen():
    dist = compute_dist_env({}, free_port=1)
    with pytest.raises(AttributeError):
        dist.world_size = 3  # type: ignore[misc]


def test_a_single_task_without_a_declared_port_uses_a_free_local_port():
    env = _without(pai_env({"worker": (1, 2)}), "PAI_PORT_LIST_worker_0_SynPort",
                   "PAI_worker_0_SynPort_PORT")
    dist = compute_dist_env(env, visible_gpus=2, free_port=34567)
    assert (dist.master_addr, dist.master_port, dist.world_size) == ("127.0.0.1", 34567, 2)
    with pytest.raises(DistEnvError, match="ports: {SynPort: 1}"):
        compute_dist_env(env, visible_gpus=2)  # no free port offered


# -- horovod mode: one MPI slot -----------------------------------------------------------------

OMPI = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}


def test_an_open_mpi_slot_gets_torchrun_names():
    slot = compute_mpi_slot(OMPI, visible_gpus=4)
    assert slot.worker_env() == {
        "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
        "NODE_RANK": "1", "GROUP_RANK": "1", "NPROC_PER_NODE": "4", "PAIJOB_BACKEND": "nccl",
    }
    assert "CUDA_VISIBLE_DEVICES" not in slot.worker_env()  # hvd.local_rank() picks the GPU


def test_horovodrun_gloo_and_pmi_variables_are_understood():
    hvd = {"HOROVOD_RANK": "2", "HOROVOD_SIZE": "3", "HOROVOD_LOCAL_RANK": "0",
           "HOROVOD_LOCAL_SIZE": "1", "HOROVOD_CROSS_RANK": "2"}
    slot = compute_mpi_slot(hvd)
    assert (slot.rank, slot.size, slot.local_rank, slot.node_rank, slot.backend) == (
        2, 3, 0, 2, "gloo")
    pmi = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    assert compute_mpi_slot(pmi).node_rank == 1
    assert compute_mpi_slot({**hvd, **OMPI}).rank == 5  # Open MPI's own variables first


@pytest.mark.parametrize(
    ("environ", "gpus", "pattern"),
    [
        ({}, 0, r"none of OMPI_COMM_WORLD_RANK, HOROVOD_RANK, PMI_RANK .* is set.*mpirun -np N"),
        ({"PMI_RANK": "0", "PMI_SIZE": "2"}, 0, r"not its place on the node"),
        ({**OMPI, "OMPI_COMM_WORLD_RANK": "8"}, 0, r"rank 8 of 8"),
        (OMPI, 2, r"4 MPI slots on this node but 2 visible GPU\(s\).*-H host:2"),
    ],
)
def test_mpi_variables_that_cannot_place_the_slot_are_errors(environ, gpus, pattern):
    with pytest.raises(DistEnvError, match=pattern):
        compute_mpi_slot(environ, visible_gpus=gpus)


# -- the edges of each input (ranks, ports, counts), table by table ---------------------------------


@pytest.mark.parametrize("local_rank", [-1, 4, 5])
def test_a_local_rank_outside_the_node_has_no_global_rank(local_rank):
    dist = compute_dist_env(pai_env(index=1), visible_gpus=4)
    assert dist.rank(3) == 7
    with pytest.raises(ValueError, match=rf"local rank {local_rank} outside 0..3"):
        dist.rank(local_rank)


@pytest.mark.parametrize(("port", "accepted"), [("0", False), ("1", True), ("65535", True), ("65536", False)])
def test_a_master_port_variable_must_be_a_port(port, accepted):
    env = pai_env(port=port)
    if accepted:
        assert compute_dist_env(env, visible_gpus=4).master_port == int(port)
    else:
        with pytest.raises(DistEnvError, match=rf"port {port} is outside 1..65535"):
            compute_dist_env(env, visible_gpus=4)


@pytest.mark.parametrize(("port", "accepted"), [(0, False), (1, True), (65535, True), (65536, False)])
def test_a_master_port_option_must_be_a_port(port, accepted):
    options = LaunchOptions(master_port=port)
    if accepted:
        assert compute_dist_env({}, options, free_port=40000).master_port == port
    else:
        with pytest.raises(DistEnvError, match=rf"--master-port {port} is outside 1..65535"):
            compute_dist_env({}, options, free_port=40000)


@pytest.mark.parametrize(("nnodes", "node_rank", "error"), [
    (0, None, r"--nnodes must be at least 1, got 0"),
    (2, -1, r"--node-rank must be in 0..1 \(--nnodes 2\), got -1"),
    (2, 2, r"--node-rank must be in 0..1 \(--nnodes 2\), got 2"),
    (1, 0, None),
    (2, 1, None),
])
def test_torchrun_style_node_counts_and_ranks(nnodes, node_rank, error):
    options = LaunchOptions(nnodes=nnodes, node_rank=node_rank, master_port=29400)
    if error is None:
        dist = compute_dist_env({}, options, free_port=1)
        assert (dist.nnodes, dist.node_rank) == (nnodes, node_rank)
    else:
        with pytest.raises(DistEnvError, match=error):
            compute_dist_env({}, options, free_port=1)


@pytest.mark.parametrize(("nproc", "accepted"), [(-1, False), (0, False), (1, True), (2, True)])
def test_an_explicit_worker_count_is_at_least_one(nproc, accepted):
    options = LaunchOptions(nproc_per_node=nproc)
    if accepted:
        assert compute_dist_env({}, options, free_port=1).world_size == nproc
    else:
        with pytest.raises(DistEnvError, match=rf"--nproc-per-node must be at least 1, got {nproc}"):
            compute_dist_env({}, options, free_port=1)


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("2", 2), ("auto", None), (None, None), (4, 4)])
def test_the_nproc_option_parses(text, value):
    assert parse_nproc_option(text) == value


@pytest.mark.parametrize(("text", "roles"), [(None, None), ("", None), (" , ", None), ("worker", ("worker",))])
def test_the_roles_option_parses(text, roles):
    assert parse_roles_option(text) == roles


@pytest.mark.parametrize(("nproc", "cores", "fits"), [
    (4, 1, True), (5, 1, False), (4, 0, True), (5, 0, False), (8, 2, True), (9, 2, False), (1, 0, True),
])
def test_at_most_four_workers_per_core_and_a_task_without_cores_counts_as_one(nproc, cores, fits):
    if fits:
        check_nproc_fits(nproc, cpu_cores=cores)
    else:
        with pytest.raises(DistEnvError, match=rf"--nproc-per-node {nproc} is more than 4"):
            check_nproc_fits(nproc, cpu_cores=cores)


def test_a_negative_count_of_visible_gpus_is_a_bug_of_the_caller():
    with pytest.raises(ValueError, match="visible_gpus must be >= 0"):
        compute_dist_env({}, visible_gpus=-1, free_port=1)
    assert compute_dist_env({}, visible_gpus=0, free_port=1).backend == "gloo"


@pytest.mark.parametrize(("gpus", "backend"), [(0, "gloo"), (1, "nccl"), (2, "nccl")])
def test_auto_backend_is_nccl_from_one_visible_gpu(gpus, backend):
    assert compute_dist_env({}, visible_gpus=gpus, free_port=1).backend == backend
    assert compute_dist_env(pai_env({"worker": (1, gpus)}), visible_gpus=gpus).backend == backend


def test_a_negative_gpu_count_in_the_role_resource_is_an_error():
    env = {**pai_env({"worker": (2, 0)}), "PAI_RESOURCE_worker": "-1,8,16384,512"}
    with pytest.raises(DistEnvError, match=r"PAI_RESOURCE_worker='-1,8,16384,512': the GPU count is negative"):
        compute_dist_env(env)


@pytest.mark.parametrize(("current", "index", "node_rank", "ranks"), [
    ("master", 0, 0, [0]),
    ("worker", 0, 1, [1, 2, 3, 4]),
    ("worker", 1, 2, [5, 6, 7, 8]),
])
def test_a_cpu_role_beside_gpu_roles_runs_one_worker_with_nproc_auto(current, index, node_rank, ranks):
    roles = {"master": (1, 0), "worker": (2, 4)}
    dist = compute_dist_env(pai_env(roles, current, index), visible_gpus=0 if current == "master" else 4)
    assert dist.world_size == 9 and dist.nnodes == 3
    assert dist.node_rank == node_rank and [dist.rank(i) for i in range(dist.nproc_per_node)] == ranks


def test_dataparallel_in_an_openpai_task_is_one_process_per_task():
    dist = compute_dist_env(pai_env({"worker": (3, 4)}, index=2), LaunchOptions(mode="dataparallel"),
                            visible_gpus=4)
    assert (dist.nproc_per_node, dist.world_size, dist.node_rank, dist.rank(0)) == (1, 3, 2, 2)


def test_the_job_name_is_pai_job_name():
    env = {**pai_env(), "PAI_JOB_NAME": "alice~run7", "PAI_USER_NAME": "bob"}
    assert compute_dist_env(env, visible_gpus=4).job_name == "alice~run7"
    assert compute_dist_env({}, free_port=1).job_name is None


def test_without_pai_task_role_list_the_current_role_is_the_only_role():
    env = _without(pai_env({"worker": (2, 1)}, index=1), "PAI_TASK_ROLE_LIST")
    dist = compute_dist_env(env, visible_gpus=1)
    assert (dist.roles, dist.role, dist.node_rank, dist.world_size) == (("worker",), "worker", 1, 2)


def test_without_the_current_role_name_one_role_is_enough_and_several_are_an_error():
    one = _without(pai_env({"trainer": (2, 1)}, "trainer", 1), "PAI_CURRENT_TASK_ROLE_NAME")
    dist = compute_dist_env(one, visible_gpus=1)
    assert (dist.role, dist.node_rank) == ("trainer", 1)
    several = _without(pai_env(MASTER_WORKER, "worker", 1), "PAI_CURRENT_TASK_ROLE_NAME")
    with pytest.raises(DistEnvError, match=r"PAI_CURRENT_TASK_ROLE_NAME is not set and the job has several "
                                           r"task roles \(PAI_TASK_ROLE_LIST='master,worker'\)"):
        compute_dist_env(several, visible_gpus=2)


def test_a_single_task_with_a_declared_port_uses_it_not_a_free_one():
    dist = compute_dist_env(pai_env({"worker": (1, 2)}, port="15009"), visible_gpus=2, free_port=34567)
    assert (dist.master_addr, dist.master_port) == ("10.0.0.1", 15009)


def test_a_single_task_with_only_the_legacy_port_variable_uses_it():
    env = _without(pai_env({"worker": (1, 2)}, port="15009"), "PAI_PORT_LIST_worker_0_SynPort")
    dist = compute_dist_env(env, visible_gpus=2, free_port=34567)
    assert (dist.master_addr, dist.master_port) == ("10.0.0.1", 15009)


def test_env_json_describes_an_openpai_task_key_by_key():
    """Every key of ``paijob-runtime env --json`` (the CLI adds the two version keys)."""
    dist = compute_dist_env(pai_env(MASTER_WORKER, "worker", 2), LaunchOptions(port_label="SynPort"),
                            visible_gpus=2)
    assert dist.describe() == {
        "openpai": True,
        "role": "worker",
        "task_index": 2,
        "master_role": "master",
        "port_label": "SynPort",
        "roles": ["master", "worker"],
        "job_name": "alice~job1",
        "master_addr": "10.0.0.1",
        "master_port": 15000,
        "node_rank": 3,
        "nnodes": 4,
        "nproc_per_node": 2,
        "world_size": 8,
        "ranks": [6, 7],
        "backend": "nccl",
        "gpus": 2,
        "env": {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "15000", "WORLD_SIZE": "8", "NODE_RANK": "3",
                "GROUP_RANK": "3", "NNODES": "4", "GROUP_WORLD_SIZE": "4", "NPROC_PER_NODE": "2",
                "LOCAL_WORLD_SIZE": "2", "PAIJOB_BACKEND": "nccl"},
    }


def test_env_json_describes_a_standalone_run_key_by_key():
    described = compute_dist_env({}, visible_gpus=0, free_port=23456).describe()
    assert described == {
        "openpai": False, "role": None, "task_index": 0, "master_role": None, "port_label": None, "roles": [],
        "job_name": None, "master_addr": "127.0.0.1", "master_port": 23456, "node_rank": 0, "nnodes": 1,
        "nproc_per_node": 1, "world_size": 1, "ranks": [0], "backend": "gloo", "gpus": 0,
        "env": {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "23456", "WORLD_SIZE": "1", "NODE_RANK": "0",
                "GROUP_RANK": "0", "NNODES": "1", "GROUP_WORLD_SIZE": "1", "NPROC_PER_NODE": "1",
                "LOCAL_WORLD_SIZE": "1", "PAIJOB_BACKEND": "gloo"},
    }


# -- horovod: the edges of an MPI slot -----------------------------------------------------------


def _slot(rank, size, local_rank, local_size, **extra):
    return {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(size),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(local_rank), "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size), **extra}


@pytest.mark.parametrize(("environ", "place"), [
    (_slot(0, 8, 0, 4), (0, 8, 0, 4, 0)),  # the job's first rank
    (_slot(0, 1, 0, 1), (0, 1, 0, 1, 0)),  # a single-slot job
    (_slot(3, 4, 3, 4), (3, 4, 3, 4, 0)),  # a single-node job: every slot on this node
    (_slot(7, 8, 3, 4), (7, 8, 3, 4, 1)),  # the last rank
])
def test_every_slot_of_a_horovod_job_has_its_place(environ, place):
    slot = compute_mpi_slot(environ)
    assert (slot.rank, slot.size, slot.local_rank, slot.local_size, slot.node_rank) == place


@pytest.mark.parametrize(("environ", "pattern"), [
    (_slot(8, 8, 0, 4), r"rank 8 of 8"),
    (_slot(1, 8, 4, 4), r"local rank 4 of 4"),
    (_slot(1, 4, 1, 8), r"local rank 1 of 8 on this node"),  # more slots on the node than in the job
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
     r"none of OMPI_COMM_WORLD_RANK"),  # a rank without the job's size
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"},
     r"none of OMPI_COMM_WORLD_RANK"),  # a size without this slot's rank
    ({**_slot(0, 2, 0, 1), "OMPI_COMM_WORLD_LOCAL_SIZE": ""}, r"is not an integer"),
    ({k: v for k, v in _slot(0, 2, 0, 1).items() if k != "OMPI_COMM_WORLD_LOCAL_SIZE"},
     r"not its place on the node"),  # a local rank without the node's slot count
    ({k: v for k, v in _slot(0, 2, 0, 1).items() if k != "OMPI_COMM_WORLD_LOCAL_RANK"},
     r"not its place on the node"),
])
def test_mpi_variables_that_do_not_add_up_are_refused(environ, pattern):
    with pytest.raises(DistEnvError, match=pattern):
        compute_mpi_slot(environ)


def test_horovodrun_cross_rank_is_the_node_rank_even_where_placement_differs():
    # horovodrun places by host, not by slot: rank 1 of 4 with 2 slots per host may sit on the second host.
    slot = compute_mpi_slot(_slot(1, 4, 0, 2, HOROVOD_CROSS_RANK="1"))
    assert slot.node_rank == 1 and slot.worker_env()["NODE_RANK"] == "1"
    assert compute_mpi_slot(_slot(1, 4, 0, 2)).node_rank == 0  # without it: rank // local_size


def test_an_unknown_backend_is_refused_in_horovod_mode_too():
    with pytest.raises(DistEnvError, match=r"--backend must be one of .*got 'mpi'"):
        compute_mpi_slot(_slot(0, 1, 0, 1), backend="mpi")
    assert compute_mpi_slot(_slot(0, 1, 0, 1), backend="gloo", visible_gpus=1).backend == "gloo"
