"""``paijob status``: a job's state and its tasks' states, exit codes and addresses."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from paijob.commands import _common as common
from paijob.common import contract, records


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="show a job and the state of each of its tasks",
                                   description="Show a job (USER~NAME, or NAME for your own) and a table "
                                               "of its tasks: state, exit code, retries, address.")
    parser.add_argument("job_id", metavar="ID", help="job id USER~NAME (or just NAME for your own jobs)")
    parser.add_argument("--attempt", type=int, metavar="N", help="job attempt to show (default: the latest)")
    common.add_raw_option(parser)
    common.add_cluster_options(parser)
    common.add_output_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    client = common.client_for(args, start_local=False)
    from paijob import api

    detail = api.status(client, args.job_id, attempt=args.attempt)
    if common.print_data(detail, args.output):
        return 0
    job_id = client.job_id(args.job_id)
    print_status(detail, job_id, wide=args.output == "wide", raw=args.raw)
    output = api.output_location(client.cluster_name, job_id)
    if output:
        print(f"\noutput     {output} ({contract.OUTPUT_DIR}; `paijob cp {job_id}:PATH . -c {client.cluster_name}` "
              "copies from it)")
    results = api.job_results(client, job_id)
    if results is not None:
        for line in results_lines(results, f"paijob cp {job_id} --list -c {client.cluster_name}",
                                  api.terminal_text(sys.stdout, raw=args.raw, names=True)):
            print(line)
    return 0


def results_lines(results: Any, lister: str, shown: Callable[[str], str]) -> Iterator[str]:
    """What the job's output folder holds (``api.JobResults``): its newest files with their sizes, or why
    there is none; the file names go through ``shown`` (the job chose them)."""
    from paijob import api

    if results.missing:
        yield f"results    none: {shown(results.missing)}"
        return
    if not results.count:
        yield "results    none yet (the folder is empty)"
        return
    count = f"{results.count}{'+' if results.more else ''} file(s)"
    more = f"; `{lister}` lists them all" if results.count > len(results.files) else ""
    yield f"results    {count}, newest first{more}:"
    for entry in results.files:
        yield f"           {api.human_size(entry.size):>9}  {shown(entry.path)}"


def print_status(detail: dict[str, Any], job_id: str, wide: bool = False, raw: bool = False) -> None:
    from paijob import api

    shown = api.terminal_text(sys.stdout, raw=raw)  # the reasons quote what the job wrote
    for line in _job_lines(detail, job_id, shown):
        print(line)
    print()
    rows = [["TASK", "STATE", "EXIT", "RETRIES", "IP", "PORTS"] + (["STARTED", "DURATION", "EXIT TYPE"] if wide else [])]
    rows.extend(_task_row(role, task, wide) for role, task in common.tasks_of(detail))
    common.table(rows)


def _job_lines(detail: dict[str, Any], job_id: str, shown: Callable[[str], str]) -> Iterator[str]:
    """The job's own lines above the task table; what the job wrote goes through ``shown``."""
    status = detail["jobStatus"]
    yield f"job        {job_id}"
    yield (f"state      {status['state']} (attempt {status.get('attemptId', 0)}, retries {status.get('retries', 0)}, "
           f"execution {status.get('executionType', '-')})")
    yield f"submitted  {common.when(status.get('submissionTime'))}"
    yield f"duration   {common.duration(status.get('launchedTime') or status.get('createdTime'), status.get('completedTime'))}"
    if status.get("appExitCode") is not None:
        spec = status.get("appExitSpec")
        phrase = spec.get("phrase") if isinstance(spec, dict) else None
        yield f"exit code  {status['appExitCode']}" + (f" ({phrase}, OpenPAI's code)" if phrase else "")
    stall = common.served_record(records.StallRecord, status.get("paijobStall"))  # the local cluster: paijob-runtime's hang watch
    if stall is not None:
        yield f"stalled    {shown(stall.describe())}"
    yield from _slow_rank_lines(common.served_record(records.SlowRecord, status.get("paijobSlowRank")), shown)
    yield from _restart_lines(status.get("paijobRestarts"), shown)
    cause = common.root_cause(detail) if status["state"] == "FAILED" else None
    if cause:
        yield f"cause      {shown(str(cause))}"
    message = status.get("appExitTriggerMessage") or status.get("appExitDiagnostics")
    if message:
        yield f"reason     {shown(message)}"
    ended = [f"{where} ({shown(note)})" if note else where for where, note in task_errors(detail, cause)]
    if ended:
        yield f"ended      {', '.join(ended)}"


def _slow_rank_lines(slow: records.SlowRecord | None, shown: Callable[[str], str]) -> Iterator[str]:
    """The local cluster's slow-rank verdict (paijob-runtime's slow-rank doctor): its line, then each
    rank's figures (how much of the time it waits for the others, how often it arrived last, what it
    spends its time on)."""
    if slow is None:
        return
    yield f"slow rank  {shown(slow.line)}" + (" (over the run)" if slow.final else "")
    named = set(slow.ranks)  # the ranks the line names first, then the others, at most MAX_FIGURES in all
    figures = sorted(slow.figures, key=lambda f: (f["rank"] not in named, f["rank"]))
    for figure in figures[:MAX_FIGURES]:
        yield "           " + shown(_figure_line(figure))
    if len(figures) > MAX_FIGURES:
        yield f"           ... and {len(figures) - MAX_FIGURES} more ranks (paijob status -o json has them all)"


def _restart_lines(served: object, shown: Callable[[str], str]) -> Iterator[str]:
    """The local cluster's restarts of the attempt's workers (paijob-runtime's ``--max-restarts``), one line
    each: which of how many, after what, how long from the failure to the new workers."""
    found = []
    for item in served if isinstance(served, list) else []:
        try:
            found.append(records.RestartRecord.from_json(item))
        except records.RecordError:
            continue
    for index, record in enumerate(found):
        yield ("restarts   " if index == 0 else "           ") + shown(record.describe())


MAX_FIGURES = 16  # ranks' figures printed under the slow-rank line


def _figure_line(figure: Mapping[str, Any]) -> str:
    """``rank 3 (node rank 1, 10.0.0.6): waits 2% of the time, arrived last 40 times; compute 63%, data 9%``
    (then ``; waits for a CPU 78%`` where the doctor knew it)."""
    activity = figure.get("activity")
    shares = sorted(((name, share) for name, share in activity.items() if isinstance(share, (int, float))),
                    key=lambda item: -item[1]) if isinstance(activity, dict) else []
    doing = ", ".join(f"{name} {share:.0%}" for name, share in shares)
    wait = figure.get("wait_share")
    waits = f"waits {wait:.0%} of the time" if isinstance(wait, (int, float)) else "waits ?"
    cpu = figure.get("cpu_wait")
    for_cpu = f"; waits for a CPU {cpu:.0%}" if isinstance(cpu, (int, float)) else ""
    return (f"rank {figure.get('rank')} (node rank {figure.get('node_rank')}, {figure.get('host')}): {waits}, "
            f"arrived last {figure.get('last')} times" + (f"; {doing}" if doing else "") + for_cpu)


def _task_row(role: str, task: dict[str, Any], wide: bool) -> list[str]:
    """One task's cells in the status table (``wide``: with its start, duration and exit type)."""
    ports = task.get("containerPorts")
    ports = ports if isinstance(ports, dict) else {}
    code = task.get("containerExitCode")
    row = [
        f"{role}/{task['taskIndex']}",
        str(task.get("taskState", "-")),
        "-" if code is None else str(code),
        str(task.get("retries", 0)),
        str(task.get("containerIp") or "-"),
        " ".join(f"{label}={value}" for label, value in sorted(ports.items())) or "-",
    ]
    if not wide:
        return row
    spec = task.get("containerExitSpec")
    exit_type = str(spec.get("type", "-")) if isinstance(spec, dict) else "-"
    return row + [common.when(task.get("launchedTime")),
                  common.duration(task.get("launchedTime"), task.get("completedTime")), exit_type]


def task_errors(detail: dict[str, Any], cause: common.RootCause | None = None,
                limit: int = 5) -> list[tuple[str, str]]:
    """(role/index, what its exit diagnostics add) of the failed tasks the job's failure ended: the exit code,
    and what OpenPAI made of it (the code it reports); never the root cause's text again (said once, on the
    cause line: the local cluster puts paijob-runtime's record at the head of each task's diagnostics). The
    task of the root cause comes first, whichever task exited first."""
    found = []
    for role, task in common.tasks_of(detail):
        text = task.get("containerExitDiagnostics")
        code = task.get("containerExitCode")
        if not isinstance(code, int) or code <= 0:
            continue
        note = " ".join(text.split()) if isinstance(text, str) else ""
        record = common.record_of(task)
        said = record.describe() if record is not None else ""
        if said and note.startswith(said):
            note = note[len(said):].lstrip("; ")
        found.append((f"{role}/{task.get('taskIndex')}", f"exit {code}" + (f": {note[:500]}" if note else "")))
    found.sort(key=lambda item: cause is None or item[0] != cause.task)
    return found[:limit]
