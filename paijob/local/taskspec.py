"""Pure facts about a job for the local cluster: command lines and each task's environment.

Nothing here does I/O. The runner hands in the job model it was given at
submit (``paijob.openpai.model``: roles, completion and retry rules, OpenPAI's
defaults) and the ports it picked, and gets back what OpenPAI would put in each
task's environment and command line. The OpenPAI facts themselves live in
``paijob.openpai`` (``model``, ``taskenv``, ``markers``); this module only
applies them to one job, adding what a local run needs instead of a container
(one host IP, a working directory).
"""

from __future__ import annotations

import fnmatch
import uuid
from collections.abc import Collection, Mapping

from paijob.common import contract, credentials
from paijob.openpai import taskenv
from paijob.openpai.markers import task_command
from paijob.openpai.model import Job, TaskRole
from paijob.openpai.names import framework_object_name
from paijob.remote import profiles

HOST_IP = "127.0.0.1"
# What a local task never inherits from the shell that started the local cluster (matched case-insensitively):
# OpenPAI's own client variables and paijob's local token (the server's).
NEVER_INHERITED = ("PAI_*", contract.LOCAL_TOKEN)
# And credentials. On OpenPAI a task never sees the submitter's shell; here one would otherwise hand every job the
# GitHub token, cloud keys, database URLs and registry passwords exported there. Besides these names, any variable
# whose name or value looks like a credential (``paijob.common.credentials``: ``*PASSWORD*``, ``*_KEY``,
# ``*TOKEN*``, ``*SECRET*``, connection strings, a URL with a password, a token of a known shape) is left out. A
# job that needs one sets it in its own env (the values' ``env``, from an OpenPAI secret), or the cluster is
# started with ``PAIJOB_LOCAL_PASS_ENV=NAME,...`` naming the variables it may pass on.
NOT_INHERITED = (
    *NEVER_INHERITED,
    "*_TOKEN", "*_TOKENS", "*_SECRET", "*_SECRET_*", "*_SECRETS", "*_PASSWORD", "*_PASSWD", "*_API_KEY",
    "*_APIKEY", "*_ACCESS_KEY", "*_PRIVATE_KEY", "*_CREDENTIALS", "*_AUTH", "*_PAT",
    "AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CREDENTIALS", "CLOUDSDK_AUTH_*", "KUBECONFIG", "DOCKER_AUTH_CONFIG", "NETRC", "SSH_AUTH_SOCK",
    "VAULT_*", "OP_SESSION_*",
)


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name.upper(), pattern) for pattern in patterns)


def split_env(environ: Mapping[str, str], passed: Collection[str] = ()) -> tuple[dict[str, str], list[str]]:
    """(what a local task keeps of the cluster process's environment, the names it does not get because they
    look like credentials). Left out: ``NEVER_INHERITED`` always; ``NOT_INHERITED``, every variable whose name
    or value looks like a credential and the variables the user's cluster profiles hold their tokens in
    (``--token-env``), unless ``passed`` (``PAIJOB_LOCAL_PASS_ENV``) names them."""
    tokens = profiles.token_variables()
    kept: dict[str, str] = {}
    dropped: list[str] = []
    for name, value in environ.items():
        if _matches(name, NEVER_INHERITED):
            continue
        if name not in passed and (name in tokens or _matches(name, NOT_INHERITED)
                                   or credentials.credential_variable(name, value)):
            dropped.append(name)
            continue
        kept[name] = value
    return kept, sorted(dropped)


def inherited_env(environ: Mapping[str, str], passed: Collection[str] = ()) -> dict[str, str]:
    """What a local task keeps of the cluster process's environment (``split_env``)."""
    return split_env(environ, passed)[0]


Ports = dict[str, dict[int, dict[str, list[int]]]]  # role -> index -> label -> ports


def task_script(job: Job, role: TaskRole) -> str:
    """The command line OpenPAI would run for ``role`` (deployments, ``<% %>`` tags, secrets)."""
    return task_command(job.raw, role.name)


def task_env(job: Job, username: str, role_name: str, index: int, ports: Ports,
             host_ip: str = HOST_IP, *, placed: Collection[tuple[str, int]] | None = None,
             job_attempt: int = 0, task_attempt: int = 0, pod_uid: str = "",
             work_dir: str = taskenv.RUNTIME_WORK_DIR) -> dict[str, str]:
    """Every variable OpenPAI (server, frameworkcontroller, runtime) gives task ``role_name``/``index``.

    ``placed`` is the tasks that have a host IP (None: all of them, as with
    gang allocation). Every local task runs on ``host_ip``.
    """
    job_id = f"{username}~{job.name}"
    framework = framework_object_name(job_id)
    env = taskenv.server_env(job_id, job)
    env.update(taskenv.current_task_env(role_name, index))
    configmap_uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"paijob-local:{job_id}:{job_attempt}"))
    env.update(taskenv.fc_env(framework, role_name, index, framework_attempt=job_attempt,
                              task_attempt=task_attempt, configmap_uid=configmap_uid,
                              pod_uid=pod_uid or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{configmap_uid}:{role_name}:{index}"))))
    all_tasks = [(role.name, i) for role in job.roles for i in range(role.instances)]
    ips = {task: host_ip for task in all_tasks if placed is None or task in placed}
    env.update(taskenv.runtime_env([(role.name, role.instances) for role in job.roles], role_name, index,
                                   ports, ips))
    env["PAI_WORK_DIR"] = work_dir
    return env
