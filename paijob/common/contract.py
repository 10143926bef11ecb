"""Every ``PAIJOB_*`` environment variable, with its meaning, and the one worker environment.

Why one module: the names cross process boundaries (launcher -> worker, local cluster ->
task, user's shell -> paijob), where a misspelling is not an error but a silently ignored
setting. So each name is written here once, and nothing else in ``paijob/`` spells one
(``tests/runtime/test_contract.py`` greps for it). :func:`worker_env` is the one place that
decides what a worker's environment holds, for every launch mode.

Standard library only: the launcher imports it in task images, the client for its settings.
"""

from __future__ import annotations

from collections.abc import Mapping

# -- paijob-runtime -> its workers (set by the launcher, read by the worker wrapper, the recipes,
#    the apex stand-in and the user's own script) --------------------------------------------------

BACKEND = "PAIJOB_BACKEND"
"""The process-group backend (nccl with GPUs, else gloo): ``init_process_group(os.environ[...])``."""

PRECISION = "PAIJOB_PRECISION"
"""``paijob-runtime train --precision``: what the recipes and the apex stand-in train in."""

LAUNCHER_PID = "PAIJOB_LAUNCHER_PID"
"""The launcher's pid: the worker wrapper dies with that process (``PR_SET_PDEATHSIG``)."""

RANK_PREFIXED = "PAIJOB_RANK_PREFIXED"
"""``"1"``: the launcher prefixes each output line with ``[rankN]:`` (so the worker does not)."""

KNOCK_ON_HOLD = "PAIJOB_KNOCK_ON_HOLD"
"""Seconds a worker holds back a traceback that is only a consequence of a peer's failure."""

APEX_COMPAT = "PAIJOB_APEX_COMPAT"
"""``"1"`` while paijob's apex stand-in is installed in this process (and its children)."""

DDP_FIND_UNUSED = "PAIJOB_DDP_FIND_UNUSED"
"""Set by the user, not ``0``: the apex stand-in's DDP wrapper passes ``find_unused_parameters``."""

FAULT_AT = "PAIJOB_FAULT_AT"
"""``EPOCH:STEP[:term|kill|save][:RANK]``: the recipes inject a fault there (resume tests), on that rank only
where given, in the first start only (not after a restart by ``--max-restarts``)."""

HANG_DIR = "PAIJOB_HANG_DIR"
"""The folder where each worker's progress sampler writes ``rank<N>.json`` (the hang watch); unset: none."""

HANG_INTERVAL = "PAIJOB_HANG_INTERVAL"
"""Seconds between two looks of a worker's progress sampler at its main thread."""

FLIGHT_RECORDER = "TORCH_FR_BUFFER_SIZE"
"""torch's name: how many collectives its flight recorder keeps per process (0: off). With the hang
watch on, a gloo job's workers get :data:`FLIGHT_RECORDER_ENTRIES` unless the user set it (or torch's
older name, ``TORCH_NCCL_TRACE_BUFFER_SIZE``): the evidence that names the rank whose collective
differs from its peers' (:mod:`paijob.runtime.watch.node.recorder`), and when each rank enqueued its recent
collectives, the slow-rank doctor's (:mod:`paijob.runtime.watch.evidence`: read every 5 s, so the buffer
holds 5 s of a job issuing up to ~50 collectives a second; a larger buffer costs memory, not time per
collective)."""
FLIGHT_RECORDER_ENTRIES = 256

SPAWN_HOOK = "PAIJOB_SPAWN_HOOK"
"""``"1"`` (``per-node`` mode): the ranks are the ``mp.spawn`` children of the one process; its worker
wrapper hooks into each child the sampler (where ``PAIJOB_HANG_DIR`` is set) and the wrapper's clean
exit (:mod:`paijob.runtime.watch.worker.spawn`)."""

STALL_FILE = "PAIJOB_STALL_FILE"
"""Set by the local cluster: node 0's hang watch keeps its stall record there (ranks that made no progress
for N s: :class:`paijob.common.records.StallRecord`), which ``paijob status`` and the portal show while the
job runs. (Was ``PAIJOB_PROGRESS_FILE``; no user sets it: the local cluster does, for its own paijob-runtime.)"""

SLOW_FILE = "PAIJOB_SLOW_FILE"
"""Set by the local cluster: node 0's slow-rank doctor keeps its latest verdict there (the rank the others
wait for, every rank's figures: :class:`paijob.common.records.SlowRecord`), which ``paijob status`` and the
portal show, while the job runs and after."""

RESTARTS_FILE = "PAIJOB_RESTARTS_FILE"
"""Set by the local cluster: node 0 keeps the list of the attempt's restarts there (``--max-restarts``: which
restart, after what, how long it took: :class:`paijob.common.records.RestartRecord`), which ``paijob status``
and the portal show, while the job runs and after."""

RESTARTS_NAME = "restarts.json"
"""In the hang watch's folder (``PAIJOB_HANG_DIR``) of node 0: the attempt's restarts, as in
``PAIJOB_RESTARTS_FILE``, for rank 0's own summary (a recipe's ``summary.json``) on any cluster."""

SLOW_VERDICT_NAME = "slow-verdict.json"
"""In the hang watch's folder (``PAIJOB_HANG_DIR``) of node 0: the slow-rank doctor's latest verdict, as in
``PAIJOB_SLOW_FILE``, for rank 0's own summary (a recipe's ``summary.json``) on any cluster."""

RECORD_KEY = "PAIJOB_RECORD_KEY"
"""Set by the local cluster, one per task: the key paijob-runtime signs its failure record with
(:mod:`paijob.common.records`), so that a record a worker prints is not the runtime's. The runtime takes it
out of its own environment when it starts; no worker gets it."""

NODE_KEY = "PAIJOB_NODE_KEY"
"""Set by the local cluster, one per job (every task of it the same): the key with which each node's
paijob-runtime signs what it writes into the job's store and checks what it reads there
(:mod:`paijob.runtime.watch.channel`). On OpenPAI the same key is the job's own secret
:data:`NODE_KEY_SECRET`. The runtime takes it out of its own environment when it starts; no worker gets it."""

NODE_KEY_SECRET = "paijobNodeKey"
"""The name of the per-job node key among an OpenPAI job's ``secrets:`` (added at submit to a job that runs
paijob-runtime); rest-server masks it in the stored config and mounts it only into the job's own containers
(``/usr/local/pai/secrets/secrets.yaml``), where paijob-runtime reads it."""

RUNTIME_ONLY = (RECORD_KEY, NODE_KEY, STALL_FILE, SLOW_FILE, RESTARTS_FILE)
"""What the cluster hands paijob-runtime alone: taken out of its environment before any worker starts (torch's
agent starts a worker with the launcher's whole environment), so no worker's ``/proc/<pid>/environ`` holds it."""

# -- the job (its env: values) -> paijob-runtime ---------------------------------------------------

HANG_TIMEOUT = "PAIJOB_HANG_TIMEOUT"
"""The default of ``paijob-runtime train --hang-timeout`` (seconds; 0 turns the hang watch off)."""

HANG_FIRST_TIMEOUT = "PAIJOB_HANG_FIRST_TIMEOUT"
"""The default of ``--hang-first-timeout``: the allowance until every rank completed a collective."""

HANG_HARD_LIMIT = "PAIJOB_HANG_HARD_LIMIT"
"""The default of ``--hang-hard-limit``: a busy straggler is ended at this multiple of the timeout."""

# -- the cluster -> every task of a job ----------------------------------------------------------

RENDERED_VERSION = "PAIJOB_RENDERED_VERSION"
"""The paijob version that rendered the job (the templates export it): the runtime compares its own."""

OUTPUT_DIR = "PAIJOB_OUTPUT_DIR"
"""The job's output folder, the same for every task and kept across attempts (``paijob cp``)."""

LOCAL_TASK = "PAIJOB_LOCAL_TASK"
"""The local cluster's mark on every process of one task (its uid), to find them all again."""

LOCAL_JOB = "PAIJOB_LOCAL_JOB"
"""The local cluster's mark on every process of one job, unique to that cluster."""

# -- the user's shell -> paijob on the laptop ------------------------------------------------------

TEMPLATE_PATH = "PAIJOB_TEMPLATE_PATH"
"""``:``-separated folders with more templates, searched after the built-in ones."""

NO_TEMPLATE_CACHE = "PAIJOB_NO_TEMPLATE_CACHE"
"""Non-empty: compile templates afresh (no bytecode cache on disk)."""

LOCAL_STATE_DIR = "PAIJOB_LOCAL_STATE_DIR"
"""The local cluster's state folder (default ``$XDG_STATE_HOME/paijob/local``)."""

LOCAL_TOKEN = "PAIJOB_LOCAL_TOKEN"
"""A local cluster token in the user's environment: never passed on to a task."""

LOCAL_STOP_GRACE = "PAIJOB_LOCAL_STOP_GRACE"
"""Seconds the local cluster gives a task between SIGTERM and SIGKILL."""

LOCAL_UNLIMITED_RETRY_CAP = "PAIJOB_LOCAL_UNLIMITED_RETRY_CAP"
"""How often the local cluster retries a task whose exit OpenPAI retries without limit."""

LOCAL_CGROUP = "PAIJOB_LOCAL_CGROUP"
"""``0``: the local cluster tracks tasks without a cgroup of their own (default 1)."""

LOCAL_PASS_ENV = "PAIJOB_LOCAL_PASS_ENV"
"""Names (comma- or space-separated) of variables of the shell that started the local cluster that its tasks
get although they look like credentials (``DATABASE_URL`` with a password, ``KAGGLE_KEY``): by default a task
gets none of those."""

PORT_RANGE = "PAIJOB_PORT_RANGE"
"""``LOW-HIGH``: where the local cluster's task ports and a standalone run's rendezvous port
are drawn from (default 20000-28999), less the kernel's ephemeral range (:mod:`paijob.common.ports`)."""

STORAGE_MOUNT = "PAIJOB_STORAGE_MOUNT"
"""Where a task finds the storages its job mounts (default ``/mnt``, OpenPAI's ``/mnt/<name>``): the local cluster
sets it to its own storages folder, as it runs tasks without a container to mount them in."""

OPENPAI_BEFORE_1_6 = "PAIJOB_OPENPAI_BEFORE_1_6"
"""``1``: the cluster runs OpenPAI older than v1.6, whose runtime runs role names it rewrites (``--openpai-before-1.6``)."""

KNOCK_ON_HOLD_SECONDS = 5.0  # per-gpu: the agent learns a root cause within about a second


def worker_env(
    base: Mapping[str, str],
    layout: Mapping[str, str],
    *,
    mode: str,
    launcher_pid: int | None = None,
    precision: str | None = None,
    world_size: int = 1,
    workers: int = 1,
    cores: int = 1,
    hang_dir: str | None = None,
    hang_interval: float = 1.0,
) -> dict[str, str]:
    """The environment a worker starts with: ``base`` (the launcher's own) plus the contract.

    ``layout`` is torchrun's names for this node (or MPI slot), ``PAIJOB_BACKEND`` among
    them; ``mode`` is ``--mode``. Pure: the launcher's own environment is never changed,
    except in ``horovod`` mode, where the worker is the launcher's own process.
    A user's own ``PYTHONUNBUFFERED``, ``OMP_NUM_THREADS`` and ``PAIJOB_KNOCK_ON_HOLD`` win.
    ``hang_dir``: where each worker's progress sampler writes (the hang watch on; None: off).
    """
    env = dict(base)
    env.pop(STALL_FILE, None)  # the runtime's own report of a stall: a worker (the user's code) gets no pen for it
    env.pop(SLOW_FILE, None)  # nor for its slow-rank verdict
    env.pop(RESTARTS_FILE, None)  # nor for the attempt's restarts
    env.pop(RECORD_KEY, None)  # nor the key of the runtime's own failure record
    env.update(layout)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if precision:
        env[PRECISION] = precision
    if launcher_pid is not None:
        env[LAUNCHER_PID] = str(launcher_pid)
    if hang_dir:
        env[HANG_DIR] = hang_dir
        env[HANG_INTERVAL] = f"{hang_interval:g}"
        if env.get(BACKEND) == "gloo" and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in env:
            env.setdefault(FLIGHT_RECORDER, str(FLIGHT_RECORDER_ENTRIES))
    if mode == "per-node":
        env[SPAWN_HOOK] = "1"
    if mode == "dataparallel":
        env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
    if mode == "per-gpu":
        env[RANK_PREFIXED] = "1"  # torch's agent prefixes the workers' lines with [rankN]:
        if world_size > 1:  # a worker alone has no peer whose failure it could be a knock-on of
            env.setdefault(KNOCK_ON_HOLD, str(KNOCK_ON_HOLD_SECONDS))
        # Each worker would otherwise start one intra-op thread per core, and N workers on
        # one node would fight over the cores (torchrun sets 1, which starves CPU training).
        env.setdefault("OMP_NUM_THREADS", str(max(1, cores // max(1, workers))))
    return env
