"""``PAI_*`` environment → :class:`DistEnv`, the distributed layout of one task.

This module is pure: :func:`compute_dist_env` reads nothing but its arguments
(no ``os.environ``, no files, no sockets, no torch), so every OpenPAI corner
case is a table test. The launcher probes the machine (visible GPUs, a free
port) and passes the answers in as data.

OpenPAI facts honoured here (sources: rest-server ``models/v2/job/k8s.js`` and openpai-runtime
``framework_parser.py`` / ``runtime_env.sh``, as :mod:`paijob.openpai.names` records them):

* Server-set variables use the task role name *as written*:
  ``PAI_TASK_ROLE_LIST``, ``PAI_TASK_ROLE_TASK_COUNT_<role>``,
  ``PAI_RESOURCE_<role>`` (``gpu,cpu,memoryMB,shmMB``),
  ``PAI_CURRENT_TASK_ROLE_NAME``, ``PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX``
  (older name ``PAI_TASK_INDEX``).
* Runtime-set variables use the role *lowercased with every character but
  a-z0-9 removed* (``ps_server`` → ``psserver``); port labels are unchanged:
  ``PAI_HOST_IP_<role>_<i>``, ``PAI_PORT_LIST_<role>_<i>_<label>`` and
  ``PAI_<role>_<i>_<label>_PORT`` (comma lists when a label has several ports).

Layout: the participating roles form one world. Node ranks start with the
master role (so node rank 0 is always master task 0, which hosts the
rendezvous store) and then run through the other participating roles in
``PAI_TASK_ROLE_LIST`` order, task index by task index. Global ranks are
contiguous per node: ``RANK = rank_offset + LOCAL_RANK`` where
``rank_offset`` is the number of workers on all lower node ranks (that is
``NODE_RANK * nproc`` when every node runs the same number of workers).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

from paijob.common import contract
from paijob.common.options import BACKENDS, MAX_WORKERS_PER_CORE, workers_per_node
from paijob.errors import PaijobError
from paijob.openpai.names import DEFAULT_PORT_LABEL, runtime_role_name  # noqa: F401 - callers import runtime_role_name from here
from paijob.openpai.taskenv import (
    PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX,
    PAI_CURRENT_TASK_ROLE_NAME,
    PAI_JOB_NAME,
    PAI_TASK_INDEX,
    PAI_TASK_ROLE_LIST,
    host_ip_name,
    job_role_name,
    port_list_names,
    resource_name,
    task_count_name,
)

STANDALONE_ADDR = "127.0.0.1"

class DistEnvError(PaijobError):
    """A ``PAI_*`` variable is missing or inconsistent, or an option contradicts the job."""


class MasterNotPlacedError(DistEnvError):
    """The master task has no address (yet): with gang allocation off, OpenPAI starts a task before the others
    are placed."""


@dataclass(frozen=True)
class LaunchOptions:
    """The launch options that shape the layout (CLI flags of ``paijob-runtime``)."""

    port_label: str = DEFAULT_PORT_LABEL
    master_role: str | None = None
    roles: tuple[str, ...] | None = None
    nproc_per_node: int | None = None  # None means "auto"
    backend: str = "auto"
    mode: str = "per-gpu"  # per-gpu | per-node | dataparallel (see workers_per_node)
    # torchrun-style layout: sets it without PAI_* variables, must agree with them otherwise
    nnodes: int | None = None
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None


@dataclass(frozen=True)
class DistEnv:
    """Where this node sits in the distributed world, and how to reach rank 0."""

    master_addr: str
    master_port: int
    node_rank: int
    nnodes: int
    nproc_per_node: int
    world_size: int
    rank_offset: int
    backend: str
    gpus: int = 0
    openpai: bool = False
    role: str | None = None
    task_index: int = 0
    master_role: str | None = None
    port_label: str | None = None
    roles: tuple[str, ...] = field(default_factory=tuple)
    job_name: str | None = None

    def rank(self, local_rank: int) -> int:
        """Global rank of this node's worker ``local_rank``."""
        if not 0 <= local_rank < self.nproc_per_node:
            raise ValueError(f"local rank {local_rank} outside 0..{self.nproc_per_node - 1}")
        return self.rank_offset + local_rank

    def node_env(self) -> dict[str, str]:
        """Variables common to every process this node starts, the layout half of
        :func:`paijob.common.contract.worker_env` (``RANK`` and ``LOCAL_RANK`` come per worker: from torch's
        agent in ``per-gpu`` mode, from the user's own launcher in ``per-node`` mode; :meth:`rank` says which)."""
        return {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "WORLD_SIZE": str(self.world_size),
            "NODE_RANK": str(self.node_rank),
            "GROUP_RANK": str(self.node_rank),
            "NNODES": str(self.nnodes),
            "GROUP_WORLD_SIZE": str(self.nnodes),
            "NPROC_PER_NODE": str(self.nproc_per_node),
            "LOCAL_WORLD_SIZE": str(self.nproc_per_node),
            contract.BACKEND: self.backend,
        }

    def describe(self) -> dict[str, object]:
        """A JSON-ready summary (``paijob-runtime env --json``)."""
        return {
            "openpai": self.openpai,
            "role": self.role,
            "task_index": self.task_index,
            "master_role": self.master_role,
            "port_label": self.port_label,
            "roles": list(self.roles),
            "job_name": self.job_name,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "node_rank": self.node_rank,
            "nnodes": self.nnodes,
            "nproc_per_node": self.nproc_per_node,
            "world_size": self.world_size,
            "ranks": [self.rank(i) for i in range(self.nproc_per_node)],
            "backend": self.backend,
            "gpus": self.gpus,
            "env": self.node_env(),
        }


# The paijob client's own settings (a cluster from the environment); OpenPAI never sets them in a task.
CLIENT_VARIABLES = frozenset({"PAI_CLUSTER_URL", "PAI_TOKEN", "PAI_USER"})


def is_openpai(environ: Mapping[str, str]) -> bool:
    """True when the environment carries OpenPAI's variables (not just the client's PAI_CLUSTER_URL/TOKEN/USER)."""
    return any(key.startswith("PAI_") and key not in CLIENT_VARIABLES for key in environ)


def parse_roles_option(text: str | None) -> tuple[str, ...] | None:
    """``--roles a,b`` → ``("a", "b")``; empty or None → None (all roles)."""
    if text is None:
        return None
    roles = tuple(part.strip() for part in text.split(",") if part.strip())
    return roles or None


def parse_nproc_option(text: str | int | None) -> int | None:
    """``--nproc-per-node N|auto`` → N or None (auto)."""
    if text is None or text == "auto":
        return None
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise DistEnvError(
            f"--nproc-per-node must be a positive integer or 'auto', got {text!r}"
        ) from None
    if value < 1:
        raise DistEnvError(f"--nproc-per-node must be at least 1, got {value}")
    return value


def check_nproc_fits(nproc: int, cpu_cores: int) -> None:
    """Refuse a worker count no machine of this size can run (``MAX_WORKERS_PER_CORE``)."""
    limit = MAX_WORKERS_PER_CORE * max(1, cpu_cores)
    if nproc > limit:
        raise DistEnvError(
            f"--nproc-per-node {nproc} is more than {MAX_WORKERS_PER_CORE} workers per CPU core "
            f"this task may use ({cpu_cores} core(s), so at most {limit}); each worker is a "
            f"python process of its own. Use one worker per GPU (--nproc-per-node auto), or "
            f"request more cpu in resourcePerInstance"
        )


def compute_dist_env(
    environ: Mapping[str, str],
    options: LaunchOptions | None = None,
    *,
    visible_gpus: int = 0,
    free_port: int = 0,
) -> DistEnv:
    """Compute this node's :class:`DistEnv`.

    ``visible_gpus`` is the number of GPUs this process can see (probed by the
    caller); ``free_port`` is the port a standalone run (no ``PAI_*``
    variables) uses for its rendezvous, also chosen by the caller.
    """
    options = options or LaunchOptions()
    if options.backend not in BACKENDS:
        raise DistEnvError(
            f"--backend must be one of {', '.join(BACKENDS)}, got {options.backend!r}"
        )
    if options.nproc_per_node is not None and options.nproc_per_node < 1:
        raise DistEnvError(
            f"--nproc-per-node must be at least 1, got {options.nproc_per_node}"
        )
    if visible_gpus < 0:
        raise ValueError("visible_gpus must be >= 0")
    backend = _backend(options.backend, visible_gpus)
    if not is_openpai(environ):
        return _standalone_env(options, visible_gpus, backend, free_port)
    dist = _openpai_env(environ, options, visible_gpus, backend, free_port)
    _check_agrees(dist, options)
    return dist


def _standalone_env(
    options: LaunchOptions, visible_gpus: int, backend: str, free_port: int
) -> DistEnv:
    """No ``PAI_*`` variables: one node on 127.0.0.1, or the torchrun-style options' layout."""
    nproc = workers_per_node(options.mode, options.nproc_per_node, visible_gpus)
    nnodes = 1 if options.nnodes is None else options.nnodes
    node_rank = 0 if options.node_rank is None else options.node_rank
    if nnodes < 1:
        raise DistEnvError(f"--nnodes must be at least 1, got {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise DistEnvError(f"--node-rank must be in 0..{nnodes - 1} (--nnodes {nnodes}), "
                           f"got {node_rank}")
    if nnodes > 1 and options.master_port is None:
        raise DistEnvError(
            f"--nnodes {nnodes} without PAI_* variables needs --master-port (and "
            f"--master-addr unless every node runs on this host): the nodes must agree on "
            f"where node rank 0 listens"
        )
    port = free_port if options.master_port is None else options.master_port
    if options.master_port is not None and not 0 < options.master_port < 65536:
        raise DistEnvError(f"--master-port {options.master_port} is outside 1..65535")
    return DistEnv(
        master_addr=options.master_addr or STANDALONE_ADDR,
        master_port=port,
        node_rank=node_rank,
        nnodes=nnodes,
        nproc_per_node=nproc,
        world_size=nnodes * nproc,
        rank_offset=node_rank * nproc,
        backend=backend,
        gpus=visible_gpus,
    )


def _check_agrees(dist: DistEnv, options: LaunchOptions) -> None:
    """In an OpenPAI task the torchrun-style options may only repeat what PAI_* says."""
    given = {
        "--nnodes": (options.nnodes, dist.nnodes),
        "--node-rank": (options.node_rank, dist.node_rank),
        "--master-addr": (options.master_addr, dist.master_addr),
        "--master-port": (options.master_port, dist.master_port),
    }
    for option, (value, computed) in given.items():
        if value is not None and value != computed:
            raise DistEnvError(
                f"{option} {value} contradicts this OpenPAI task's layout ({option} would be "
                f"{computed}, from the PAI_* variables); in an OpenPAI job paijob-runtime "
                f"computes it: drop {option} from the command"
            )


def _backend(requested: str, visible_gpus: int) -> str:
    if requested != "auto":
        return requested
    return "nccl" if visible_gpus > 0 else "gloo"


def _training_roles(role_list: tuple[str, ...], current: str, options: LaunchOptions) -> tuple[str, tuple[str, ...]]:
    """The master role and the roles taking part in training, master first; refused when inconsistent."""
    participating = _participating_roles(role_list, options.roles)
    if current not in participating:
        raise DistEnvError(
            f"this task's role {current!r} ({PAI_CURRENT_TASK_ROLE_NAME}) is not among the "
            f"roles taking part in training ({', '.join(participating)}, from --roles); "
            f"add it to --roles, or do not run 'paijob-runtime train' in that role's commands"
        )
    master_role = options.master_role or participating[0]
    if master_role not in role_list:
        raise DistEnvError(
            f"--master-role {master_role!r} is not a task role of this job "
            f"({PAI_TASK_ROLE_LIST}={','.join(role_list)!r})"
        )
    if master_role not in participating:
        raise DistEnvError(
            f"--master-role {master_role!r} does not take part in training "
            f"(--roles selects {', '.join(participating)}); the master must be one of them"
        )
    return master_role, (master_role, *(role for role in participating if role != master_role))


def _task_position(ordered: tuple[str, ...], current: str, task_index: int,
                   counts: dict[str, int], nprocs: dict[str, int]) -> tuple[int, int]:
    """This task's node rank and its first worker's global rank: the tasks of the roles before it come first."""
    node_rank = 0
    rank_offset = 0
    for role in ordered:
        if role == current:
            return node_rank + task_index, rank_offset + task_index * nprocs[role]
        node_rank += counts[role]
        rank_offset += counts[role] * nprocs[role]
    return node_rank, rank_offset


def _openpai_env(
    environ: Mapping[str, str],
    options: LaunchOptions,
    visible_gpus: int,
    backend: str,
    free_port: int,
) -> DistEnv:
    role_list = _role_list(environ)
    current = _current_role(environ, role_list)
    master_role, ordered = _training_roles(role_list, current, options)

    task_index, index_name = _task_index(environ)
    counts = {role: _task_count(environ, role) for role in ordered}
    if task_index >= counts[current]:
        raise DistEnvError(
            f"task index {task_index} ({index_name}) is not below "
            f"the task count of role {current!r} "
            f"({task_count_name(current)}={counts[current]}); the environment is "
            f"inconsistent: check the role's 'instances' in the job YAML"
        )

    if options.mode == "dataparallel":
        nprocs = {role: workers_per_node(options.mode, None, 0) for role in ordered}
    else:
        nprocs = _nprocs(environ, ordered, current, options.nproc_per_node, visible_gpus)
    node_rank, rank_offset = _task_position(ordered, current, task_index, counts, nprocs)
    nnodes = sum(counts.values())
    world_size = sum(counts[role] * nprocs[role] for role in ordered)

    if nnodes == 1 and free_port and not _declares_port(environ, master_role, options.port_label):
        # One task alone needs no declared port: it only talks to itself.
        master_addr = STANDALONE_ADDR
        master_port = free_port
    else:
        master_addr = _master_addr(environ, master_role)
        master_port = _master_port(environ, master_role, options.port_label)
    job_name = environ.get(PAI_JOB_NAME)
    return DistEnv(
        master_addr=master_addr,
        master_port=master_port,
        node_rank=node_rank,
        nnodes=nnodes,
        nproc_per_node=nprocs[current],
        world_size=world_size,
        rank_offset=rank_offset,
        backend=backend,
        gpus=visible_gpus,
        openpai=True,
        role=current,
        task_index=task_index,
        master_role=master_role,
        port_label=options.port_label,
        roles=ordered,
        job_name=job_name,
    )


def _role_list(environ: Mapping[str, str]) -> tuple[str, ...]:
    text = environ.get(PAI_TASK_ROLE_LIST, "")
    roles = tuple(part.strip() for part in text.split(",") if part.strip())
    if roles:
        return roles
    current = environ.get(PAI_CURRENT_TASK_ROLE_NAME, "").strip()
    if current:
        return (current,)
    raise DistEnvError(
        f"neither {PAI_TASK_ROLE_LIST} nor {PAI_CURRENT_TASK_ROLE_NAME} is set (found other PAI_* "
        "variables, so this looks like an OpenPAI task): OpenPAI's server sets both for every "
        "task; unset the stray PAI_* variables to run standalone"
    )


def _current_role(environ: Mapping[str, str], role_list: tuple[str, ...]) -> str:
    current = environ.get(PAI_CURRENT_TASK_ROLE_NAME, "").strip()
    if not current:
        if len(role_list) == 1:
            return role_list[0]
        raise DistEnvError(
            f"{PAI_CURRENT_TASK_ROLE_NAME} is not set and the job has several task roles "
            f"({PAI_TASK_ROLE_LIST}={','.join(role_list)!r}): cannot tell which role this task is"
        )
    resolved = job_role_name(current, role_list)  # OpenPAI sets the converted name (Worker_A -> workera)
    if resolved is None:
        raise DistEnvError(
            f"{PAI_CURRENT_TASK_ROLE_NAME}={current!r} is not in "
            f"{PAI_TASK_ROLE_LIST}={','.join(role_list)!r}: the environment is inconsistent"
        )
    return resolved


def _participating_roles(
    role_list: tuple[str, ...], requested: tuple[str, ...] | None
) -> tuple[str, ...]:
    if not requested:
        return role_list
    unknown = [role for role in requested if role not in role_list]
    if unknown:
        raise DistEnvError(
            f"--roles names {', '.join(repr(r) for r in unknown)}, not a task role of this job "
            f"({PAI_TASK_ROLE_LIST}={','.join(role_list)!r}); role names are case-sensitive and "
            f"written as in the job YAML's taskRoles"
        )
    return tuple(role for role in role_list if role in requested)


def _task_index(environ: Mapping[str, str]) -> tuple[int, str]:
    found = [
        (_non_negative_int(environ, name, "the task index"), name)
        for name in (PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX, PAI_TASK_INDEX)
        if name in environ
    ]
    if len(found) == 2 and found[0][0] != found[1][0]:
        raise DistEnvError(
            f"{PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX}={found[0][0]} and "
            f"{PAI_TASK_INDEX}={found[1][0]} disagree: OpenPAI sets both to this task's index; "
            f"something in the job's commands overwrote one of them"
        )
    if found:
        return found[0]
    raise DistEnvError(
        f"{PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX} (older name {PAI_TASK_INDEX}) is not set: "
        "OpenPAI sets it for every task; when running by hand, export it (0 for the first task)"
    )


def _task_count(environ: Mapping[str, str], role: str) -> int:
    name = task_count_name(role)
    if name not in environ:
        raise DistEnvError(
            f"{name} is not set: OpenPAI sets it from 'instances' of task role {role!r}; "
            f"check that the role exists in the job YAML's taskRoles"
        )
    value = _non_negative_int(environ, name, "the role's instance count")
    if value < 1:
        raise DistEnvError(f"{name}={environ[name]!r}: a task role has at least 1 instance")
    return value


def _non_negative_int(environ: Mapping[str, str], name: str, what: str) -> int:
    text = environ[name]
    try:
        value = int(text.strip())
    except ValueError:
        raise DistEnvError(f"{name}={text!r} is not an integer ({what})") from None
    if value < 0:
        raise DistEnvError(f"{name}={text!r} is negative ({what})")
    return value


def _resource_gpus(environ: Mapping[str, str], role: str) -> int | None:
    name = resource_name(role)
    if name not in environ:
        return None
    text = environ[name]
    first = text.split(",")[0].strip()
    try:
        gpus = int(first)
    except ValueError:
        raise DistEnvError(
            f"{name}={text!r} does not start with a GPU count: OpenPAI writes "
            f"'gpu,cpu,memoryMB,shmMB' (e.g. '4,16,32768,512')"
        ) from None
    if gpus < 0:
        raise DistEnvError(f"{name}={text!r}: the GPU count is negative")
    return gpus


def _nprocs(
    environ: Mapping[str, str],
    ordered: tuple[str, ...],
    current: str,
    requested: int | None,
    visible_gpus: int,
) -> dict[str, int]:
    if requested is not None:
        return {role: requested for role in ordered}
    nprocs: dict[str, int] = {}
    for role in ordered:
        declared = _resource_gpus(environ, role)
        if role == current:
            nprocs[role] = visible_gpus or declared or 1
            others_expect = declared or 1
            if (
                declared is not None
                and nprocs[role] != others_expect
                and _multi_node(environ, ordered)
            ):
                raise DistEnvError(
                    f"this task sees {visible_gpus} GPU(s) but {resource_name(role)}="
                    f"{environ[resource_name(role)]!r} declares {declared}; the other tasks "
                    f"count {others_expect} worker(s) for this role, so the ranks would not line "
                    f"up. Pass an explicit --nproc-per-node, or fix CUDA_VISIBLE_DEVICES"
                )
        else:
            if declared is None:
                raise DistEnvError(
                    f"{resource_name(role)} is not set, so the number of workers on role {role!r}'s "
                    f"tasks is unknown (--nproc-per-node auto): OpenPAI sets it from the role's "
                    f"resourcePerInstance; or pass an explicit --nproc-per-node"
                )
            nprocs[role] = declared or 1
    return nprocs


def _multi_node(environ: Mapping[str, str], ordered: tuple[str, ...]) -> bool:
    total = 0
    for role in ordered:
        name = task_count_name(role)
        try:
            total += int(environ.get(name, "1"))
        except ValueError:
            total += 1
    return total > 1


def _master_addr(environ: Mapping[str, str], master_role: str) -> str:
    name = host_ip_name(master_role, 0)
    addr = environ.get(name, "").strip()
    if addr:
        try:
            ipaddress.ip_address(addr)
        except ValueError:
            raise DistEnvError(
                f"{name}={addr!r} is not an IP address: OpenPAI's runtime writes the master "
                f"task's IP there, and the nodes bind and connect by IP; if you set it by hand, "
                f"give the address (e.g. $(getent hosts {addr} | cut -d' ' -f1))"
            ) from None
    if not addr:
        raise MasterNotPlacedError(
            f"{name} is not set, so the master task (role {master_role!r}, index 0) has no "
            f"address. OpenPAI's runtime sets it (role name lowercased, non-alphanumerics "
            f"removed) once the task is placed: keep extras.gangAllocation true (the default) "
            f"so every task is placed before any starts; an ssh session must first source "
            f"/usr/local/pai/runtime.d/runtime_env.sh"
        )
    return addr


def _declares_port(environ: Mapping[str, str], master_role: str, label: str) -> bool:
    return any(name in environ for name in port_list_names(master_role, 0, label))


def _master_port(environ: Mapping[str, str], master_role: str, label: str) -> int:
    names = port_list_names(master_role, 0, label)
    lists = {name: _port_list(environ, name) for name in names if name in environ}
    if len(lists) == 2 and lists[names[0]] != lists[names[1]]:
        raise DistEnvError(
            f"{names[0]}={environ[names[0]]!r} and {names[1]}={environ[names[1]]!r} disagree: "
            f"OpenPAI's runtime writes the same ports into both; something in the job's "
            f"commands overwrote one of them"
        )
    for name in names:
        if name in lists:
            return lists[name][0]
    raise DistEnvError(
        f"neither {names[0]} nor {names[1]} is set: the master role {master_role!r} declares no "
        f"port labelled {label!r}. Declare it in the job YAML under taskRoles.{master_role}."
        f"resourcePerInstance: 'ports: {{{label}: 1}}', or pass --port-label to name a label "
        f"the role declares"
    )


def _port_list(environ: Mapping[str, str], name: str) -> list[int]:
    """A comma-separated port variable; the first port is the rendezvous port."""
    text = environ[name]
    ports = []
    for part in text.split(","):
        try:
            port = int(part.strip())
        except ValueError:
            raise DistEnvError(
                f"{name}={text!r} is not a port number (expected a comma-separated list of "
                f"integers, the first is the rendezvous port)"
            ) from None
        if not 0 < port < 65536:
            raise DistEnvError(f"{name}={text!r}: port {port} is outside 1..65535")
        ports.append(port)
    return ports


# -- horovod mode: one MPI slot ----------------------------------------------------------------

# Where each launcher puts a slot's place, most specific first: Open MPI (mpirun, and
# horovodrun on top of it), horovodrun's gloo controller, then MPICH / Intel MPI (PMI).
MPI_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "PMI_RANK")
MPI_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "HOROVOD_SIZE", "PMI_SIZE")
MPI_LOCAL_RANK_VARS = ("OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK", "MPI_LOCALRANKID")
MPI_LOCAL_SIZE_VARS = ("OMPI_COMM_WORLD_LOCAL_SIZE", "HOROVOD_LOCAL_SIZE", "MPI_LOCALNRANKS")
MPI_NODE_RANK_VARS = ("HOROVOD_CROSS_RANK",)


@dataclass(frozen=True)
class MpiSlot:
    """One process started by mpirun / horovodrun: ``--mode horovod``."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    node_rank: int
    backend: str
    gpus: int = 0

    def worker_env(self) -> dict[str, str]:
        """torchrun's names for this slot, so env:// scripts and the recipes work under MPI too.

        ``CUDA_VISIBLE_DEVICES`` is left alone: horovod scripts pick their GPU with
        ``torch.cuda.set_device(hvd.local_rank())``, which needs every GPU visible;
        ``LOCAL_RANK`` names the same GPU for the others.
        """
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_size),
            "NODE_RANK": str(self.node_rank),
            "GROUP_RANK": str(self.node_rank),
            "NPROC_PER_NODE": str(self.local_size),
            contract.BACKEND: self.backend,
        }


def _first_int(environ: Mapping[str, str], names: tuple[str, ...], what: str) -> int | None:
    for name in names:
        if name in environ:
            return _non_negative_int(environ, name, what)
    return None


def compute_mpi_slot(
    environ: Mapping[str, str], *, visible_gpus: int = 0, backend: str = "auto"
) -> MpiSlot:
    """This slot's place from the MPI launcher's variables (pure, like :func:`compute_dist_env`).

    One GPU per slot: a node with more slots than visible GPUs is refused.
    ``NODE_RANK`` is horovodrun's cross rank where set, else ``rank // local_size``
    (mpirun's default by-slot placement, as the horovod template asks for).
    """
    if backend not in BACKENDS:
        raise DistEnvError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    rank = _first_int(environ, MPI_RANK_VARS, "this slot's rank")
    size = _first_int(environ, MPI_SIZE_VARS, "the number of slots")
    if rank is None or size is None:
        raise DistEnvError(
            f"--mode horovod runs as one slot of mpirun or horovodrun, but none of "
            f"{', '.join(MPI_RANK_VARS)} (with its size) is set: start it as "
            f"'mpirun -np N ... paijob-runtime train --mode horovod SCRIPT', or use "
            f"--mode per-gpu without MPI"
        )
    local_rank = _first_int(environ, MPI_LOCAL_RANK_VARS, "this slot's rank on its node")
    local_size = _first_int(environ, MPI_LOCAL_SIZE_VARS, "the slots on this node")
    if local_rank is None or local_size is None:
        raise DistEnvError(
            f"the MPI launcher set this slot's rank but not its place on the node (none of "
            f"{', '.join(MPI_LOCAL_RANK_VARS)} / {', '.join(MPI_LOCAL_SIZE_VARS)}): use Open "
            f"MPI's mpirun or horovodrun, which set them"
        )
    if not (0 <= rank < size and 0 <= local_rank < local_size <= size):
        raise DistEnvError(
            f"inconsistent MPI variables: rank {rank} of {size}, local rank {local_rank} of "
            f"{local_size} on this node"
        )
    if visible_gpus and local_size > visible_gpus:
        raise DistEnvError(
            f"{local_size} MPI slots on this node but {visible_gpus} visible GPU(s): horovod "
            f"runs one slot per GPU; give each host at most {visible_gpus} slots "
            f"(-H host:{visible_gpus}) or -np {visible_gpus} per node"
        )
    cross = _first_int(environ, MPI_NODE_RANK_VARS, "this node's rank")
    return MpiSlot(
        rank=rank,
        size=size,
        local_rank=local_rank,
        local_size=local_size,
        node_rank=cross if cross is not None else rank // local_size,
        backend=_backend(backend, visible_gpus),
        gpus=visible_gpus,
    )
