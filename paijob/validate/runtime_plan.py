"""What ``paijob-runtime`` (or an MPI launcher) will do with a job: its distributed plan.

The ``paijob-runtime`` calls in a role's commands are parsed with
paijob-runtime's own argparse parser (``paijob.common.options``, torch-free
and the only runtime module the client imports), so whatever the runtime
accepts (``paijob-runtime -v train ...``, ``--nproc-per-node=4``) validate
reads the same way, and options the runtime would refuse are reported.
Workers per node come from ``paijob.common.options.workers_per_node``, the
function the runtime itself uses, so validate and ``paijob-runtime env``
report the same world size.
"""

# No `from __future__ import annotations` here: typing.NamedTuple turns each string annotation
# into a ForwardRef, compiling it, at import; real annotations spare every render ~60 us per field.
import argparse
import functools
import re
import shlex
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from paijob.openpai.model import Job, TaskRole
from paijob.openpai.names import DEFAULT_PORT_LABEL, PAI_ANY_TAG_PATTERN

RUNTIME_PROGRAM = "paijob-runtime"
MPI_LAUNCHERS = ("mpirun", "horovodrun", "mpiexec")
_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", "{", "}"}
_PLACEHOLDER = "__pai_tag_"
_SHLEX_SPECIAL = ("'", '"', "\\", "#")  # shlex.split(comments=True, posix=True): quotes, escape, comment
_SHLEX_SPACES = str.maketrans("\t\r\n", "   ")  # its whitespace, besides the space


# The plan's records are NamedTuples, not dataclasses: validate runs on every
# `paijob render`, and creating a frozen dataclass costs about 0.5 ms of
# start-up each (its methods are compiled from source at import time); those
# without methods in the functional form, cheaper again (ruff.toml's UP014).

# How many processes one role starts, as paijob-runtime will see it.
RoleLayout = NamedTuple("RoleLayout", [
    ("role", str),
    ("instances", int),
    ("processes_per_node", int | None),  # None: not knowable from the file
    ("gpu", int),
    ("mode", str),
])


class DistributedPlan(NamedTuple):
    """Facts about the distributed run that the job file fixes."""

    launcher: str  # "paijob-runtime" or "mpirun"
    master_role: str | None
    port_label: str | None
    roles: tuple[RoleLayout, ...]
    world_size: int | None

    @property
    def nodes(self) -> int:
        return sum(role.instances for role in self.roles)

    def describe(self) -> str:
        """``world size 32 (4 nodes × 8 processes)``, or the per-role sum."""
        if self.world_size is None:
            size = "world size unknown (processes per node not fixed in the file)"
        elif len(self.roles) == 1:
            only = self.roles[0]
            nodes = "node" if only.instances == 1 else "nodes"
            procs = "process" if only.processes_per_node == 1 else "processes"
            size = (
                f"world size {self.world_size} "
                f"({only.instances} {nodes} × {only.processes_per_node} {procs})"
            )
        elif self.launcher == "mpirun":
            size = f"world size {self.world_size} (mpirun -np across {self.nodes} nodes)"
        else:
            parts = " + ".join(f"{r.role} {r.instances} × {r.processes_per_node}" for r in self.roles)
            size = f"world size {self.world_size} ({parts})"
        if self.port_label:
            size += f", port label {self.port_label}"
        return size


class RuntimeCall(NamedTuple):
    """One ``paijob-runtime train`` call found in a role's commands."""

    role: str
    command_index: int
    mode: str = "per-gpu"
    port_label: str | None = None
    master_role: str | None = None
    nproc: str | None = None
    roles: str | None = None
    error: str | None = None  # what paijob-runtime would say about these options
    max_restarts: str = "0"
    min_nodes: str | None = None


def is_literal(value: str) -> bool:
    """False for text that OpenPAI or the shell fills in at run time."""
    return not any(marker in value for marker in ("$", "<%", "`", _PLACEHOLDER))


def split_command(command: str) -> list[str]:
    """Shell words of a command, each ``<% ... %>`` tag kept as one (non-literal) word."""
    return list(_words(command))


@functools.lru_cache(maxsize=256)
def _words(command: str) -> tuple[str, ...]:
    """``split_command``, cached: one validation reads each command several times (the
    runtime's options, the MPI launcher, the plan), and shlex splits it a character at a time."""
    # (re compiles the pattern on first use: most commands hold no tag)
    text = re.sub(PAI_ANY_TAG_PATTERN, lambda m: f"{_PLACEHOLDER}{m.start()}", command) if "<%" in command else command
    if not any(char in text for char in _SHLEX_SPECIAL):
        # no quote, escape or comment: shlex's words are what its whitespace separates (as most
        # commands are written), split without shlex's loop over every character
        return tuple(word for word in text.translate(_SHLEX_SPACES).split(" ") if word)
    try:
        return tuple(shlex.split(text, comments=True, posix=True))
    except ValueError:
        return tuple(text.split())


class _RuntimeRefuses(Exception):
    pass


def _raise(message: str) -> None:
    raise _RuntimeRefuses(message)


@functools.lru_cache(maxsize=1)
def _train_parser() -> argparse.ArgumentParser:
    # cached: building it is ~1.5 ms, and a render checks several commands
    from paijob.common.options import build_train_parser  # torch-free; imported only when needed

    train = build_train_parser()
    train.error = _raise  # type: ignore[method-assign,assignment]
    return train


def _train_argv(words: tuple[str, ...], start: int) -> tuple[str, ...] | None:
    """The words after ``paijob-runtime [-v] train`` up to a shell separator, or None."""
    from paijob.common.options import GLOBAL_FLAGS

    i = start
    while i < len(words) and words[i] in GLOBAL_FLAGS:
        i += 1
    if words[i : i + 1] != ("train",):
        return None
    end = next((j for j in range(i + 1, len(words)) if words[j] in _SEPARATORS), len(words))
    return words[i + 1 : end]


@functools.lru_cache(maxsize=256)
def _parse_call(role: str, index: int, argv: tuple[str, ...]) -> RuntimeCall:
    """One ``paijob-runtime train`` call, parsed (cached, as ``split_command``: a validation reads it thrice)."""
    from paijob.common.options import split_train_argv

    train = _train_parser()
    ours, command = split_train_argv(train, list(argv))
    try:
        args, unknown = train.parse_known_args(ours)
        if unknown:
            _raise(f"unrecognized arguments: {' '.join(unknown)}")
        if not command and not args.recipe:
            _raise("no training script, -m MODULE or --recipe NAME")
        if args.recipe:
            _check_recipe_args(args.recipe, command)
        _check_recovery(args)
    except _RuntimeRefuses as refused:
        return RuntimeCall(role, index, error=str(refused))
    return RuntimeCall(
        role,
        index,
        mode=args.mode,
        port_label=args.port_label,
        master_role=args.master_role,
        nproc=args.nproc_per_node,
        roles=args.roles,
        max_restarts=args.max_restarts,
        min_nodes=args.min_nodes,
    )


def _check_recovery(args: argparse.Namespace) -> None:
    """``--max-restarts`` and ``--min-nodes`` as paijob-runtime reads them (their values, the mode they need);
    the node count ``--min-nodes`` is checked against is the job's (:func:`recovery_layout`)."""
    from paijob.common.options import max_restarts_error, min_nodes_error

    problem = None
    if is_literal(args.max_restarts):
        problem = max_restarts_error(args.max_restarts)
    if problem is None and args.min_nodes is not None and is_literal(args.min_nodes):
        problem = min_nodes_error(args.min_nodes, None)
    restarts = args.max_restarts.strip() not in ("0", "")
    if problem is None and (restarts or args.min_nodes is not None) and args.mode != "per-gpu":
        problem = (f"--max-restarts and --min-nodes need --mode per-gpu (this call runs --mode {args.mode}, whose "
                   f"script's own processes hold the job's store and its world size); drop them")
    if problem:
        _raise(problem)


def _check_recipe_args(recipe: str, args: list[str]) -> None:
    """The recipe's own parser on its arguments (``recipeArgs``): a typo fails here, not at task start."""
    from paijob.common.recipe_options import recipe_arguments_error

    later = not all(is_literal(word) for word in (recipe, *args))
    error = recipe_arguments_error(recipe, args, filled_in_later=later)
    if error:
        _raise(error)


def runtime_calls(role: str, commands: Iterable[Any]) -> list[RuntimeCall]:
    """Every ``paijob-runtime train`` in a role's commands, parsed by paijob-runtime's parser."""
    calls: list[RuntimeCall] = []
    for index, command in enumerate(commands):
        if not isinstance(command, str) or RUNTIME_PROGRAM not in command:
            continue
        words = _words(command)
        for i, word in enumerate(words):
            if word.rsplit("/", 1)[-1] == RUNTIME_PROGRAM:
                argv = _train_argv(words, i + 1)
                if argv is not None:
                    calls.append(_parse_call(role, index, argv))
    return calls


MpiLaunch = NamedTuple("MpiLaunch", [
    ("role", str),
    ("command_index", int),
    ("np", int | None),
    ("hosts", str | None),
])


def mpi_launch(role: TaskRole) -> MpiLaunch | None:
    """The mpirun / horovodrun in a role's commands that starts paijob-runtime (else the first one),
    with its ``-np`` and ``-H``: an earlier launch may only prepare the hosts (the horovod template's
    install step)."""
    launches: list[tuple[MpiLaunch, bool]] = []
    for index, command in enumerate(role.commands):
        words = _words(command)
        for i, word in enumerate(words):
            if word.rsplit("/", 1)[-1] not in MPI_LAUNCHERS:
                continue
            np: int | None = None
            hosts: str | None = None
            for j in range(i + 1, len(words) - 1):
                if words[j] in ("-np", "-n", "--np", "-c") and np is None:
                    np = int(words[j + 1]) if words[j + 1].isdigit() else None
                elif words[j] in ("-H", "--host", "-host", "--hosts") and hosts is None:
                    hosts = words[j + 1]
            launches.append((MpiLaunch(role.name, index, np, hosts), RUNTIME_PROGRAM in words[i + 1:]))
            break
    runs_runtime = [launch for launch, runtime in launches if runtime]
    found = runs_runtime or [launch for launch, _ in launches]
    return found[0] if found else None


def all_runtime_calls(job: Job) -> list[RuntimeCall]:
    return [call for role in job.roles for call in runtime_calls(role.name, role.commands)]


def first(calls: list[RuntimeCall], attr: str) -> str | None:
    return next((getattr(c, attr) for c in calls if getattr(c, attr)), None)


# The settings every task must agree on, after ``validate --master-role/--port-label``.
RuntimeSettings = NamedTuple("RuntimeSettings", [
    ("calls", tuple[RuntimeCall, ...]),
    ("participating", tuple[str, ...]),
    ("roles_flag", str | None),
    ("master", str),
    ("label", str),
])


def _participating(names: tuple[str, ...], roles_flag: str | None) -> tuple[str, ...]:
    """The roles in the training world: those ``--roles`` names (in job order), or all when it is not literal."""
    if not roles_flag or not is_literal(roles_flag):
        return names
    wanted = {r.strip() for r in roles_flag.split(",") if r.strip()}
    return tuple(r for r in names if r in wanted)


def runtime_settings(
    job: Job, master_override: str | None = None, label_override: str | None = None
) -> RuntimeSettings | None:
    calls = [c for c in all_runtime_calls(job) if c.error is None]
    if not calls or not job.roles:
        return None
    names = job.role_names
    roles_flag = first(calls, "roles")
    participating = _participating(names, roles_flag)
    master = master_override or first(calls, "master_role") or (participating or names)[0]
    label = label_override or first(calls, "port_label") or DEFAULT_PORT_LABEL
    return RuntimeSettings(tuple(calls), participating, roles_flag, master, label)


def workers_per_node(mode: str, nproc: str | None, gpu: int) -> int | None:
    """Processes one task starts, as the runtime computes them (None: not fixed in the file)."""
    from paijob.common.options import workers_per_node as runtime_workers

    if nproc in (None, "auto"):
        return runtime_workers(mode, None, max(gpu, 0))
    if not nproc.isdigit():
        return None
    return runtime_workers(mode, int(nproc), max(gpu, 0))


def runtime_plan(job: Job, settings: RuntimeSettings) -> DistributedPlan:
    layouts: list[RoleLayout] = []
    world: int | None = 0
    for role in job.roles:
        mine = [c for c in settings.calls if c.role == role.name]
        if not mine or role.name not in settings.participating:
            continue
        ppn = workers_per_node(mine[0].mode, mine[0].nproc, role.resources.gpu)
        layouts.append(RoleLayout(role.name, role.instances, ppn, role.resources.gpu, mine[0].mode))
        world = None if world is None or ppn is None else world + role.instances * ppn
    return DistributedPlan(RUNTIME_PROGRAM, settings.master, settings.label, tuple(layouts), world)


def mpi_plan(job: Job, launch: MpiLaunch) -> DistributedPlan:
    layouts = tuple(
        RoleLayout(r.name, r.instances, None, max(r.resources.gpu, 0), "mpi") for r in job.roles
    )
    return DistributedPlan("mpirun", launch.role, None, layouts, launch.np)


def distributed_plan(
    job: Job, master_override: str | None = None, label_override: str | None = None
) -> DistributedPlan | None:
    for role in job.roles:
        launch = mpi_launch(role)
        if launch is not None:
            return mpi_plan(job, launch)
    settings = runtime_settings(job, master_override, label_override)
    return runtime_plan(job, settings) if settings else None


# --------------------------------------------------------------------------- rules

Finding = tuple[str, tuple[Any, ...], str]
ERROR = "error"
WARNING = "warning"


def _command_path(call: RuntimeCall) -> tuple[Any, ...]:
    return ("taskRoles", call.role, "commands", call.command_index)


def refused_options(job: Job) -> Iterator[Finding]:
    """Options paijob-runtime's parser refuses: the task would exit 2 at once."""
    for call in all_runtime_calls(job):
        if call.error:
            yield ERROR, _command_path(call), f"paijob-runtime would refuse this command: {call.error}"


def roles_flag(job: Job, s: RuntimeSettings) -> Iterator[Finding]:
    if not s.roles_flag or not is_literal(s.roles_flag):
        return
    for name in (r.strip() for r in s.roles_flag.split(",") if r.strip()):
        if job.role(name) is None:
            yield ERROR, ("taskRoles",), (
                f"--roles names '{name}', which is not a task role (roles: {', '.join(job.role_names)})"
            )


def agreement(job: Job, s: RuntimeSettings) -> Iterator[Finding]:
    """Every task must pass the same layout flags, or ranks and ports do not line up."""
    wanted = {
        "port_label": s.label,
        "master_role": s.master,
        "roles": s.roles_flag,
        "nproc": first(list(s.calls), "nproc"),
    }
    for call in s.calls:
        for attr, value in wanted.items():
            mine = getattr(call, attr)
            if mine and value and is_literal(mine) and mine != value:
                flag = "--" + {"nproc": "nproc-per-node"}.get(attr, attr.replace("_", "-"))
                yield ERROR, _command_path(call), (
                    f"{flag} {mine} here but {value} elsewhere; every task must agree"
                )


def training_roles_run_the_runtime(job: Job, s: RuntimeSettings) -> Iterator[Finding]:
    calling = {call.role for call in s.calls}
    for role in s.participating:
        if role not in calling:
            why = "--roles lists it" if s.roles_flag else "every role does unless --roles says otherwise"
            yield ERROR, ("taskRoles", role, "commands"), (
                f"role '{role}' takes part in training ({why}) but its commands do not run "
                f"paijob-runtime train, so the others would wait for it forever; run it "
                f"here, or pass --roles {','.join(sorted(calling))} to paijob-runtime"
            )
    for role in sorted(calling - set(s.participating)):
        yield ERROR, ("taskRoles", role, "commands"), (
            f"role '{role}' runs paijob-runtime train but --roles {s.roles_flag} leaves "
            "it out; the runtime refuses to start there"
        )


def master_and_port(job: Job, s: RuntimeSettings) -> Iterator[Finding]:
    master = job.role(s.master)
    if master is None:
        yield ERROR, ("taskRoles",), (
            f"master role '{s.master}' (--master-role) is not a task role; "
            f"roles: {', '.join(job.role_names)}"
        )
        return
    if s.master not in s.participating:
        yield ERROR, ("taskRoles", s.master), (
            f"master role '{s.master}' does not take part in training (--roles {s.roles_flag})"
        )
        return
    tasks = sum(r.instances for r in job.roles if r.name in s.participating)
    # (a one-task world needs no rendezvous port: the runtime uses a local one)
    if is_literal(s.label) and tasks > 1 and s.label not in master.resources.ports:
        declared = ", ".join(master.port_labels) or "none"
        yield ERROR, ("taskRoles", s.master, "resourcePerInstance"), (
            f"paijob-runtime reads port label '{s.label}' from the master role "
            f"'{s.master}', but it declares no such port (declared: {declared}); "
            f"add ports: {{{s.label}: 1}}"
        )


def layout_warnings(job: Job, s: RuntimeSettings) -> Iterator[Finding]:
    for call in s.calls:
        role = job.role(call.role)
        if role is None:
            continue
        if call.mode == "dataparallel":
            yield from _dataparallel_layout(call, role)
        else:
            yield from _per_node_layout(job, s, call, role)


def _dataparallel_layout(call: RuntimeCall, role: TaskRole) -> Iterator[Finding]:
    """--mode dataparallel is one process on one node."""
    if role.instances > 1:
        yield ERROR, _command_path(call), (
            f"--mode dataparallel runs one process on one node, but role '{role.name}' has "
            f"{role.instances} instances: paijob-runtime refuses to start (use --mode per-gpu)"
        )


def _per_node_layout(job: Job, s: RuntimeSettings, call: RuntimeCall, role: TaskRole) -> Iterator[Finding]:
    """Workers per node: counted from a role's GPUs unless --nproc-per-node says otherwise."""
    nproc = call.nproc if call.nproc not in (None, "auto") else None
    gpu = role.resources.gpu
    negative = [r for r in job.roles if r.name in s.participating and r.resources.gpu < 0]
    if nproc is None and negative:
        yield ERROR, _command_path(call), (
            f"role '{negative[0].name}' asks for {negative[0].resources.gpu} GPUs; paijob-runtime "
            f"counts workers from PAI_RESOURCE_{negative[0].name} and refuses a negative GPU "
            "count (pass --nproc-per-node, or set gpu to 0 or more)"
        )
    if nproc and nproc.isdigit() and gpu > 0 and int(nproc) != gpu:
        yield WARNING, _command_path(call), (
            f"--nproc-per-node {nproc} but resourcePerInstance.gpu is {gpu}: "
            "one process per GPU is the usual layout"
        )


def recovery(job: Job, s: RuntimeSettings) -> Iterator[Finding]:
    """``--min-nodes M`` below the training world's task count: what OpenPAI must be told so that one failed task
    does not end the attempt (each fact from rest-server's ``models/v2/job/k8s.js`` and FrameworkController's
    ``pkg/apis/frameworkcontroller/v1/types.go``), else the runtime's wait for it never comes."""
    nodes = sum(r.instances for r in job.roles if r.name in s.participating)
    for call in s.calls:
        if call.min_nodes is None or not is_literal(call.min_nodes) or call.error:
            continue
        path, wanted = _command_path(call), int(call.min_nodes)
        if wanted > nodes:
            yield ERROR, path, (f"--min-nodes {wanted} is more than the {nodes} task(s) of the training world: "
                                f"paijob-runtime refuses to start; give at most {nodes}")
            continue
        if is_literal(call.max_restarts) and call.max_restarts.strip() == "0" and wanted < nodes:
            yield ERROR, path, (f"--min-nodes {wanted} needs --max-restarts 1 or more: the nodes that go on without "
                                f"a lost one start their workers again at the smaller world size, a restart")
        if wanted < nodes:
            yield from _elastic_on_openpai(job, s, nodes, wanted, path)


def _elastic_on_openpai(job: Job, s: RuntimeSettings, nodes: int, wanted: int,
                        path: tuple[Any, ...]) -> Iterator[Finding]:
    roles = [role for role in job.roles if role.name in s.participating]
    if len(roles) > 1:
        yield ERROR, path, (f"--min-nodes with a training world of {len(roles)} task roles: OpenPAI counts failed "
                            f"tasks per role (completion.minFailedInstances), so no setting lets a task of any role "
                            f"fail alone; train in one role")
        return
    if job.gang_allocation:
        yield ERROR, ("extras", "gangAllocation"), (
            f"--min-nodes {wanted} needs extras.gangAllocation: false: with gang allocation (the default) OpenPAI "
            f"never retries a task alone (rest-server k8s.js: retryPolicy fancyRetryPolicy false, maxRetryCount 0) "
            f"and the attempt ends when one fails")
    role, need = roles[0], nodes - wanted + 1
    if 0 < role.completion.min_failed < need:
        yield ERROR, ("taskRoles", role.name, "completion", "minFailedInstances"), (
            f"--min-nodes {wanted} of {nodes} tasks needs completion.minFailedInstances: {need} (is "
            f"{role.completion.min_failed}): OpenPAI completes the attempt, whatever still runs, once that many tasks "
            f"of the role failed (k8s.js: minFailedTaskCount = minFailedInstances || 1; FrameworkController's "
            f"CompletionPolicySpec), so the nodes that could go on would be stopped")


def gang_allocation(job: Job, nodes: int, what: str, path: tuple[Any, ...]) -> Iterator[Finding]:
    """gangAllocation: false starts tasks one by one: no barrier, partial host lists, no job ssh."""
    if job.gang_allocation or nodes < 2:
        return
    yield WARNING, path, (
        f"extras.gangAllocation is false but {what} spans {nodes} tasks: OpenPAI then starts "
        "tasks as they are placed, exports PAI_HOST_IP_<role>_<i> only for tasks already placed "
        "and disables job ssh, so the rendezvous can fail; remove gangAllocation: false"
    )


RUNTIME_RULES = (roles_flag, agreement, training_roles_run_the_runtime, master_and_port, layout_warnings, recovery)


def runtime_findings(
    job: Job, master_override: str | None = None, label_override: str | None = None
) -> Iterator[Finding]:
    yield from refused_options(job)
    if any(mpi_launch(role) for role in job.roles):
        yield from mpi_findings(job)
        return
    settings = runtime_settings(job, master_override, label_override)
    if settings is None:
        return
    for rule in RUNTIME_RULES:
        yield from rule(job, settings)
    nodes = sum(r.instances for r in job.roles if r.name in settings.participating)
    if not any(call.min_nodes for call in settings.calls):  # --min-nodes: gang allocation off is the point
        yield from gang_allocation(job, nodes, "paijob-runtime's training world", ("extras", "gangAllocation"))


def mpi_findings(job: Job) -> Iterator[Finding]:
    launch = next(launch for role in job.roles if (launch := mpi_launch(role)))
    path = ("taskRoles", launch.role, "commands")
    if launch.hosts:
        for message in _host_problems(job, launch):
            yield WARNING, path, message
    ssh = job.plugin("ssh")
    if ssh is None:
        yield WARNING, path, (
            "an MPI launcher needs ssh between tasks: add the ssh runtime plugin "
            "(extras.com.microsoft.pai.runtimeplugin: [{plugin: ssh, parameters: "
            "{jobssh: true, sshbarrier: true}}])"
        )
    elif not (ssh.get("parameters") or {}).get("sshbarrier"):
        yield WARNING, ("extras", "com.microsoft.pai.runtimeplugin"), (
            "without sshbarrier: true the launcher may start before the other tasks accept ssh"
        )
    total_gpu = sum(r.instances * max(r.resources.gpu, 0) for r in job.roles)
    if launch.np is not None and total_gpu and launch.np > total_gpu:
        yield WARNING, path, f"mpirun starts {launch.np} processes but the job has {total_gpu} GPUs"
    yield from gang_allocation(job, sum(r.instances for r in job.roles), "the MPI job", ("extras", "gangAllocation"))


def _host_problems(job: Job, launch: MpiLaunch) -> list[str]:
    """Check ``role-index[:slots]`` host names (the ssh plugin's) against the roles."""
    problems: list[str] = []
    slots_total = 0
    for entry in (launch.hosts or "").split(","):
        name, _, slots = entry.partition(":")
        role_name, dash, index = name.rpartition("-")
        if not is_literal(entry) or not dash or not index.isdigit():
            return []  # not the role-index form: nothing to check
        role = job.role(role_name)
        if role is None:
            problems.append(f"host '{name}' names no task role (roles: {', '.join(job.role_names)})")
            continue
        if int(index) >= role.instances:
            problems.append(f"host '{name}' does not exist: role '{role_name}' has {role.instances} instance(s)")
        slots_total += int(slots) if slots.isdigit() else 1
    if launch.np is not None and not problems and slots_total and launch.np != slots_total:
        problems.append(f"-np {launch.np} but the hosts list offers {slots_total} slots")
    return problems
