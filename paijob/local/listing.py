"""``GET /jobs`` query semantics, as rest-server's ``controllers/v2/job.js`` ``list`` applies them.

Every filter there is a SQL ``WHERE`` over the framework table; here the same
conditions run over the store's rows (a local cluster holds few jobs):

* ``username``, ``vc``, ``state``: comma lists, exact matches;
* ``keyword``: a substring of the user name, the job name or the virtual cluster;
* ``jobPriority``: a comma list, ``default`` meaning no priority (every local job:
  the local cluster has no priority classes, so its jobs' ``jobPriority`` is null);
* ``tagsContain`` / ``tagsNotContain``: jobs with at least one / none of the tags;
* ``order=<field>,ASC|DESC``: one of the fields below, an unknown field or
  direction ignored; ``completionTime`` and ``jobPriority`` put nulls last when
  ascending, first when descending (Postgres' ``NULLS LAST`` / ``NULLS FIRST``);
  default ``submissionTime,DESC``;
* ``offset`` / ``limit`` (default 5000, above 50000 a 400), ``withTotalCount=true``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from paijob.openpai import rest
from paijob.openpai.model import DEFAULT_VIRTUAL_CLUSTER

VIRTUAL_CLUSTER = DEFAULT_VIRTUAL_CLUSTER  # the local cluster's one virtual cluster: OpenPAI's default
# job.js's order fields -> the store's columns (vc and jobPriority are the same for every local job)
_ORDER_COLUMNS: dict[str, str | None] = {
    "jobName": "name", "submissionTime": "seq", "username": "username", "vc": None, "retries": "retries",
    "totalTaskNumber": "total_tasks", "totalGpuNumber": "total_gpu", "state": "state",
    "completionTime": "completed_time", "jobPriority": None,
}
_MAX_NUMBER = 2**31 - 1


class ListQueryError(ValueError):
    """A query value rest-server refuses (400 ``InvalidParametersError``)."""


@dataclass(frozen=True)
class ListQuery:
    offset: int = 0
    limit: int = rest.DEFAULT_LIST_LIMIT
    with_total: bool = False
    keep: Callable[[dict[str, Any], list[str]], bool] = lambda row, tags: True
    order: tuple[str, bool] | None = None  # (column, descending); None: submission, newest first


def _number(args: Mapping[str, str], name: str, default: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    text = value.strip()
    if not text.isdigit() or len(text) > 10 or int(text) > _MAX_NUMBER:
        raise ListQueryError(f"{name} must be a whole number from 0 to {_MAX_NUMBER}, not {value[:40]!r}.")
    return int(text)


def parse(args: Mapping[str, str]) -> ListQuery:
    """The list query of a request's arguments (``ListQueryError`` for a value rest-server refuses)."""
    limit = _number(args, "limit", rest.DEFAULT_LIST_LIMIT)
    if limit > rest.MAX_LIST_LIMIT:
        raise ListQueryError(f"Limit exceeds max number {rest.MAX_LIST_LIMIT}.")
    users, vcs, states = (rest.list_filter(args.get(key)) for key in ("username", "vc", "state"))
    keyword = args.get("keyword")
    priorities = rest.list_filter(args.get("jobPriority"))
    contain, not_contain = rest.list_filter(args.get("tagsContain")), rest.list_filter(args.get("tagsNotContain"))

    def keep(row: dict[str, Any], tags: list[str]) -> bool:
        return (_admits(users, row["username"])
                and _admits(vcs, VIRTUAL_CLUSTER)
                and _admits(states, row["state"])
                and (keyword is None or any(keyword in text for text in (row["username"], row["name"],
                                                                         VIRTUAL_CLUSTER)))
                and _admits(priorities, "default")
                and (contain is None or any(tag in contain for tag in tags))
                and (not_contain is None or not any(tag in not_contain for tag in tags)))

    return ListQuery(offset=_number(args, "offset", 0), limit=limit, with_total=args.get("withTotalCount") == "true",
                     keep=keep, order=_order(args.get("order")))


def _admits(allowed: list[str] | None, value: str) -> bool:
    """An exact-match comma list admits ``value``: it is absent, or ``value`` is one of its items."""
    return allowed is None or value in allowed


def _order(value: str | None) -> tuple[str, bool] | None:
    field, _, direction = (value or "").partition(",")
    if field not in _ORDER_COLUMNS or direction not in ("ASC", "DESC"):
        return None
    column = _ORDER_COLUMNS[field]
    return (column or "", direction == "DESC")


def sort(rows: list[dict[str, Any]], order: tuple[str, bool] | None) -> list[dict[str, Any]]:
    """Rows (from the store, newest first) in the query's order; equal keys keep submission order."""
    if order is None or not order[0]:
        return rows
    column, descending = order
    present = [r for r in rows if r[column] is not None]
    missing = [r for r in rows if r[column] is None]
    present.sort(key=lambda r: r[column], reverse=descending)
    return missing + present if descending else present + missing
