"""The local cluster's REST answers as data: store rows -> OpenPAI's swagger JSON. Pure, no Flask.

What rest-server answers for a job (``GET /jobs/<id>``, its attempts, the job list)
and for the one virtual cluster, built from the store's rows and the job models the
engine keeps (each job parsed once), so that the views are testable without an HTTP app.
"""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any

from paijob.local import capacity, listing
from paijob.openpai import exitspec, rest
from paijob.openpai.jobstate import is_terminal
from paijob.openpai.jsyaml import load_job
from paijob.openpai.model import Job

if TYPE_CHECKING:
    from paijob.local.cluster import LocalCluster


def _retries_and_times(job: dict[str, Any]) -> dict[str, Any]:
    """Fields the swagger's job list entry and job status share."""
    return {
        "executionType": job["execution_type"],
        "retries": job["retries"],
        "retryDetails": {"user": job["retries"], "platform": 0, "resource": 0},
        "retryDelayTime": None,
        "submissionTime": job["submission_time"],
        "createdTime": job["created_time"],
        "launchedTime": job["launched_time"],
    }


def _job_status(job: dict[str, Any], attempt: dict[str, Any] | None, latest: bool) -> dict[str, Any]:
    a = attempt or {}
    state = job["state"] if latest else a.get("state", job["state"])
    done = is_terminal(state)
    end = _outcome(job, a, latest)
    exit_code = end["exit_code"]
    return {
        "username": job["username"],
        "state": state,
        "subState": job["sub_state"] if latest else ("Completed" if done else "AttemptRunning"),
        **_retries_and_times(job),
        "completedTime": end["completed_time"],
        "attemptId": a.get("attempt_id", job["attempt_id"]),
        "attemptState": a.get("state", state),
        "appId": f"{job['username']}~{job['name']}-{a.get('attempt_id', job['attempt_id'])}",
        "appProgress": 1 if done else 0,
        "appTrackingUrl": "",
        "appCreatedTime": a.get("created_time"),
        "appLaunchedTime": a.get("launched_time"),
        "appCompletedTime": a.get("completed_time"),
        "appExitCode": exit_code,
        "appExitSpec": None if not done or exit_code is None else exitspec.spec_for(exit_code).as_json(),
        "appExitDiagnostics": end["diagnostics"],
        "appExitMessages": {"container": None, "runtime": None, "launcher": end["diagnostics"]} if done else None,
        "appExitTriggerMessage": end["trigger_message"],
        "appExitTriggerTaskRoleName": _rest_role(end["trigger_role"]),
        "appExitTriggerTaskIndex": end["trigger_index"],
        "appExitType": None if not done or exit_code is None else ("Succeeded" if exit_code == 0 else "Failed"),
        "virtualCluster": listing.VIRTUAL_CLUSTER,
    }


def _outcome(job: dict[str, Any], attempt: dict[str, Any], latest: bool) -> dict[str, Any]:
    """How the job (``latest``: its newest attempt, kept on the job row) or one earlier attempt ended."""
    if latest:
        return {"exit_code": job["app_exit_code"], "completed_time": job["completed_time"],
                "trigger_message": job.get("trigger_message"), "diagnostics": job.get("diagnostics"),
                "trigger_role": job.get("trigger_role"), "trigger_index": job.get("trigger_index")}
    return {"exit_code": attempt.get("exit_code"), "completed_time": attempt.get("completed_time"),
            "trigger_message": attempt.get("trigger_message"), "diagnostics": attempt.get("diagnostics"),
            "trigger_role": attempt.get("trigger_role"), "trigger_index": attempt.get("trigger_index")}


def read_job(text: str) -> Any:
    """The job as the rest-server's js-yaml reads it (YAML 1.2)."""
    return load_job(text, "job").value


def job_config(cluster: LocalCluster, job: dict[str, Any]) -> Any:
    """``GET /jobs/:id/config``: the stored job with its secrets masked.

    protocolSecret.js masks the text and js-yaml reads the masked text. A text the mask leaves as
    it was (no top-level ``secrets:`` block) reads as the job model's own mapping, kept since the
    submit: only a masked text, a new one, is read.
    """
    masked = rest.mask_secrets(job["config"])
    return cluster.models.of(job).raw if masked == job["config"] else read_job(masked)


def role_names(job: Job) -> dict[str, str]:
    """REST role name (``workera``) -> the job's role name (``Worker_A``)."""
    return {rest.rest_role_name(role.name): role.name for role in job.roles}


def _rest_role(name: str | None) -> str | None:
    return None if name is None else rest.rest_role_name(name)


def _log_path(job_id: str, attempt: int, role: str, index: int, task_attempt: int) -> str:
    return (f"/api/v2/jobs/{job_id}/attempts/{attempt}/taskRoles/{rest.rest_role_name(role)}"
            f"/taskIndex/{index}/attempts/{task_attempt}/logs")


def _task_attempt_view(row: dict[str, Any], job_id: str) -> dict[str, Any]:
    ports = {label: ",".join(str(p) for p in numbers) for label, numbers in json.loads(row["ports"] or "{}").items()}
    view = {
        "attemptId": row["task_attempt"],
        "attemptState": row["state"],
        "currentAttemptCreatedTime": row["created_time"],
        "currentAttemptLaunchedTime": row["launched_time"],
        "currentAttemptCompletedTime": row["completed_time"],
        "containerId": row["uid"],
        "containerIp": "127.0.0.1",
        "containerNodeName": socket.gethostname(),
        "containerPorts": ports,
        "containerGpus": row["gpus"],
        "containerLog": _log_path(job_id, row["job_attempt"], row["role"], row["task_index"], row["task_attempt"]),
        "containerExitCode": row["exit_code"],
        "containerExitSpec": None if row["exit_code"] is None else exitspec.spec_for(row["exit_code"]).as_json(),
        "containerExitDiagnostics": row["diagnostics"],
    }
    if row.get("root_cause"):  # paijob's own field: paijob-runtime's record of why the task failed
        view["paijobRootCause"] = json.loads(row["root_cause"])
    return view


def _task_view(rows: list[dict[str, Any]], index: int, job_id: str, created: int | None) -> dict[str, Any]:
    """One entry of ``taskStatuses``: the latest attempt of a task (WAITING when none yet)."""
    if not rows:
        return {"taskIndex": index, "taskUid": "", "taskState": "WAITING", "containerId": None,
                "containerIp": None, "containerNodeName": None, "containerPorts": {}, "containerGpus": None,
                "containerLog": "", "containerExitCode": None, "containerExitSpec": None,
                "containerExitDiagnostics": None, "retries": 0, "accountableRetries": 0,
                "createdTime": created, "launchedTime": None, "completedTime": None, "attemptId": 0,
                "attemptState": "WAITING", "currentAttemptCreatedTime": None,
                "currentAttemptLaunchedTime": None, "currentAttemptCompletedTime": None}
    view = _task_attempt_view(rows[-1], job_id)
    view.update(_task_summary(rows, index))
    return view


def _task_summary(rows: list[dict[str, Any]], index: int) -> dict[str, Any]:
    """A task's identity and state across its attempts (first created, last finished)."""
    first, last = rows[0], rows[-1]
    return {
        "taskIndex": index,
        "taskUid": first["uid"],
        "taskState": last["state"],
        "retries": last["task_attempt"],
        "accountableRetries": last["task_attempt"],
        "createdTime": first["created_time"],
        "launchedTime": first["launched_time"],
        "completedTime": last["completed_time"],
    }


def task_attempts(job: dict[str, Any], attempt: int, role: str, index: int,
                  rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One task of one job attempt with all its attempts, newest first (``.../taskIndex/<i>/attempts``)."""
    job_id = f"{job['username']}~{job['name']}"
    return {
        **_task_summary(rows, index),
        "username": job["username"],
        "jobName": job["name"],
        "jobAttemptId": attempt,
        "taskRoleName": role,
        "attempts": [_task_attempt_view(row, job_id) for row in reversed(rows)],  # newest first
    }


def job_detail(cluster: LocalCluster, job: dict[str, Any], attempt_id: int | None = None) -> dict[str, Any]:
    latest = attempt_id is None or attempt_id == job["attempt_id"]
    attempt_id = job["attempt_id"] if attempt_id is None else attempt_id
    attempt = cluster.store.attempt(job["username"], job["name"], attempt_id)
    job_id = f"{job['username']}~{job['name']}"
    plan = cluster.models.of(job)
    rows = cluster.store.tasks(job["username"], job["name"], attempt_id)
    roles: dict[str, Any] = {}
    for role in plan.roles:
        statuses = []
        for index in range(role.instances):
            mine = [r for r in rows if r["role"] == role.name and r["task_index"] == index]
            statuses.append(_task_view(mine, index, job_id, (attempt or {}).get("created_time")))
        roles[role.runtime_name] = {"taskRoleStatus": {"name": role.runtime_name}, "taskStatuses": statuses}
    status = _job_status(job, attempt, latest)
    stall = cluster.stall(job_id, attempt_id, plan) if latest and status.get("state") == "RUNNING" else None
    if stall:  # paijob's own field: paijob-runtime's hang watch sees ranks that stopped moving
        status["paijobStall"] = stall
    slow = cluster.slow_rank(job_id, attempt_id, plan, running=status.get("state") == "RUNNING") if latest else None
    if slow:  # paijob's own field: paijob-runtime's slow-rank doctor names the rank the others wait for
        status["paijobSlowRank"] = slow
    restarts = cluster.restarts(job_id, attempt_id, plan)
    if restarts:  # paijob's own field: paijob-runtime restarted the workers inside this attempt (--max-restarts)
        status["paijobRestarts"] = restarts
    status["retryDetails"] = _retry_details(cluster.store.attempts(job["username"], job["name"]), job["retries"])
    return {
        "name": job["name"],
        "tags": cluster.store.tags(job["username"], job["name"]),
        "jobPriority": None,
        "jobStatus": status,
        "taskRoles": roles,
        "debugId": job_id,
    }


def doctors_marks(cluster: LocalCluster, job: dict[str, Any]) -> dict[str, Any]:
    """paijob's own fields for a running job's entry in the list (``GET /jobs``): what paijob-runtime's hang
    watch (``paijobStall``) and slow-rank doctor (``paijobSlowRank``, its line) say of it now, as its detail
    says them; nothing for a job that does not run (its page has the run's verdict)."""
    if job["state"] != "RUNNING":
        return {}
    job_id, plan = f"{job['username']}~{job['name']}", cluster.models.of(job)
    marks: dict[str, Any] = {}
    stall = cluster.stall(job_id, job["attempt_id"], plan)
    if stall:
        marks["paijobStall"] = stall
    slow = cluster.slow_rank(job_id, job["attempt_id"], plan, running=True)
    if slow:
        marks["paijobSlowRank"] = {"line": slow.get("line"), "final": slow.get("final")}
    return marks


def _retry_details(attempts: list[dict[str, Any]], retries: int) -> dict[str, int]:
    """k8s.js: user = retries counted against jobRetryCount, platform = the transient ones (not counted)."""
    platform = sum(1 for a in attempts[:retries] if a.get("exit_code") is not None
                   and exitspec.spec_for(a["exit_code"]).retried_without_limit)
    return {"user": retries - platform, "platform": platform, "resource": 0}


def job_summary(job: dict[str, Any], tags: list[str] | None = None) -> dict[str, Any]:
    return {
        "name": job["name"],
        "username": job["username"],
        "state": job["state"],
        "subState": job["sub_state"],
        "tags": tags or [],
        **_retries_and_times(job),
        "completedTime": job["completed_time"],
        "appExitCode": job["app_exit_code"],
        "virtualCluster": listing.VIRTUAL_CLUSTER,
        "totalGpuNumber": job["total_gpu"],
        "totalTaskNumber": job["total_tasks"],
        "totalTaskRoleNumber": job["total_roles"],
        "debugId": f"{job['username']}~{job['name']}",
        "jobPriority": None,
    }


def vc_status(cluster: LocalCluster) -> dict[str, Any]:
    """The swagger's VirtualCluster for ``default``: this machine, what running jobs ask for in use."""
    machine = capacity.this_machine(len(cluster.gpus))
    cpu = memory = gpu = 0
    for job in cluster.store.active_jobs():
        for role in cluster.models.of(job).roles:
            cpu += role.instances * role.resources.cpu
            memory += role.instances * role.resources.memory_mb
            gpu += role.instances * role.resources.gpu

    def resources(cpus: int, memory_mb: int, gpus: int) -> dict[str, int]:
        return {"cpu": cpus, "vCores": cpus, "memory": memory_mb, "gpu": gpus, "GPUs": gpus}

    total = resources(machine.cpus, machine.memory_mb, machine.gpus)
    used_share = 100.0 * cpu / machine.cpus if machine.cpus else 0.0
    return {"capacity": 100, "usedCapacity": round(used_share, 2), "maxCapacity": 100, "dedicated": False,
            "resourcesUsed": resources(cpu, memory, gpu), "resourcesGuaranteed": total, "resourcesTotal": total}
