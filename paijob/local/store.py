"""The local cluster's job store: one SQLite file, so jobs, states and logs survive restarts.

Four tables: ``jobs`` (one row per submitted job), ``job_attempts`` (one per
job retry), ``tasks`` (one row per task attempt) and ``tags`` (a job's tags,
added and removed through the REST API as on OpenPAI). Times are milliseconds
since the epoch, as in OpenPAI's REST answers. One connection shared by the
server's threads behind a lock.

A full disk (SQLite's "database or disk is full") is raised as ``OSError(ENOSPC)``
naming the database, like any other write that found no room. A job's end
(``end_job``) is never lost to it: until it can be written, the job is read as
ended all the same, and the next write that finds room writes it.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    username TEXT NOT NULL,
    name TEXT NOT NULL,
    config TEXT NOT NULL,
    state TEXT NOT NULL,
    sub_state TEXT NOT NULL,
    execution_type TEXT NOT NULL,
    submission_time INTEGER NOT NULL,
    created_time INTEGER,
    launched_time INTEGER,
    completed_time INTEGER,
    attempt_id INTEGER NOT NULL DEFAULT 0,
    retries INTEGER NOT NULL DEFAULT 0,
    app_exit_code INTEGER,
    trigger_message TEXT,
    trigger_role TEXT,
    trigger_index INTEGER,
    diagnostics TEXT,
    total_gpu INTEGER NOT NULL DEFAULT 0,
    total_tasks INTEGER NOT NULL DEFAULT 0,
    total_roles INTEGER NOT NULL DEFAULT 0,
    UNIQUE (username, name)
);
CREATE TABLE IF NOT EXISTS job_attempts (
    username TEXT NOT NULL,
    name TEXT NOT NULL,
    attempt_id INTEGER NOT NULL,
    state TEXT NOT NULL,
    created_time INTEGER,
    launched_time INTEGER,
    completed_time INTEGER,
    exit_code INTEGER,
    trigger_message TEXT,
    trigger_role TEXT,
    trigger_index INTEGER,
    diagnostics TEXT,
    PRIMARY KEY (username, name, attempt_id)
);
CREATE TABLE IF NOT EXISTS tasks (
    username TEXT NOT NULL,
    name TEXT NOT NULL,
    job_attempt INTEGER NOT NULL,
    role TEXT NOT NULL,
    task_index INTEGER NOT NULL,
    task_attempt INTEGER NOT NULL,
    uid TEXT NOT NULL,
    state TEXT NOT NULL,
    exit_code INTEGER,
    created_time INTEGER,
    launched_time INTEGER,
    completed_time INTEGER,
    ports TEXT,
    gpus TEXT,
    pid INTEGER,
    log_dir TEXT,
    diagnostics TEXT,
    root_cause TEXT,
    PRIMARY KEY (username, name, job_attempt, role, task_index, task_attempt)
);
CREATE TABLE IF NOT EXISTS tags (
    username TEXT NOT NULL,
    name TEXT NOT NULL,
    tag TEXT NOT NULL,
    PRIMARY KEY (username, name, tag)
);
"""


SQLITE_FULL = 13  # sqlite3.SQLITE_FULL (named from Python 3.11 on)


def now_ms() -> int:
    return int(time.time() * 1000)


class JobExists(Exception):
    pass


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = path
        # SQLite creates -wal / -shm (and journals) with the database file's mode: make it 0600
        # before the first connection, whatever the umask (they hold job configs, secrets included)
        for private in (path, *(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal"))):
            if private == path or private.exists():
                os.close(os.open(private, os.O_RDWR | os.O_CREAT, 0o600))
                os.chmod(private, 0o600)
        self._lock = threading.RLock()
        self._unwritten: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}  # job -> (attempt, its end)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(SCHEMA)
            self._add_missing_columns()

    def _add_missing_columns(self) -> None:
        """Columns added since a database was made: ``tasks.root_cause`` (paijob-runtime's failure record,
        :mod:`paijob.common.records`, as JSON)."""
        have = {row["name"] for row in self._db.execute("PRAGMA table_info(tasks)")}
        if "root_cause" not in have:
            self._db.execute("ALTER TABLE tasks ADD COLUMN root_cause TEXT")

    def close(self) -> None:
        with self._lock:
            try:
                self.flush()
            except OSError:
                pass  # still no room: the next start ends the job as one the server left behind
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                if getattr(error, "sqlite_errorcode", None) == SQLITE_FULL or "disk is full" in str(error):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path)) from error
                raise

    def _one(self, sql: str, args: tuple[Any, ...]) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(sql, args).fetchone()
        return dict(row) if row else None

    def _all(self, sql: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(row) for row in self._db.execute(sql, args).fetchall()]

    # ------------------------------------------------------------------ jobs

    def insert_job(self, username: str, name: str, config: str, totals: tuple[int, int, int]) -> None:
        with self._tx() as db:
            if db.execute("SELECT 1 FROM jobs WHERE username=? AND name=?", (username, name)).fetchone():
                raise JobExists(name)
            db.execute(
                "INSERT INTO jobs (username, name, config, state, sub_state, execution_type, submission_time,"
                " created_time, total_gpu, total_tasks, total_roles) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (username, name, config, "WAITING", "AttemptCreationPending", "START", now_ms(), now_ms(), *totals),
            )

    def job(self, username: str, name: str) -> dict[str, Any] | None:
        return self._ended(self._one("SELECT * FROM jobs WHERE username=? AND name=?", (username, name)))

    def _ended(self, row: dict[str, Any] | None) -> dict[str, Any] | None:
        """A job row with its end applied where that end is not written yet."""
        unwritten = self._unwritten.get((row["username"], row["name"])) if row else None
        return {**row, **unwritten[1]} if row and unwritten else row

    def jobs(self, *, username: str | None = None, state: str | None = None,
             limit: int | None = None, offset: int = 0) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM jobs WHERE 1=1", list[Any]()
        if username:
            sql += " AND username=?"
            args.append(username)
        if state:
            sql += " AND state=?"
            args.append(state)
        sql += " ORDER BY seq DESC LIMIT ? OFFSET ?"
        args += [limit if limit else -1, offset]
        rows = [self._ended(row) for row in self._all(sql, tuple(args))]
        return [row for row in rows if row and (not state or row["state"] == state)]

    def delete_finished_job(self, username: str, name: str) -> str | None:
        """Remove a finished job's record (its attempts, tasks and tags too); its state before (None: no such
        job). A job that has not finished is left as it is: the caller reads the state it returned."""
        with self._tx() as db:
            row = db.execute("SELECT state FROM jobs WHERE username=? AND name=?", (username, name)).fetchone()
            if row is None or (username, name) in self._unwritten:
                return None if row is None else str(row["state"])
            if row["state"] in ("SUCCEEDED", "FAILED", "STOPPED"):
                for table in ("tasks", "job_attempts", "tags", "jobs"):
                    db.execute(f"DELETE FROM {table} WHERE username=? AND name=?", (username, name))  # noqa: S608
            return str(row["state"])

    def update_job(self, username: str, name: str, **fields: Any) -> None:
        if not fields:
            return
        cols = ", ".join(f"{key}=?" for key in fields)
        with self._tx() as db:
            db.execute(f"UPDATE jobs SET {cols} WHERE username=? AND name=?", (*fields.values(), username, name))

    def active_jobs(self) -> list[dict[str, Any]]:
        rows = self._all("SELECT * FROM jobs WHERE state IN ('WAITING','RUNNING','STOPPING') ORDER BY seq", ())
        return [row for row in rows if (row["username"], row["name"]) not in self._unwritten]

    def end_job(self, username: str, name: str, attempt_id: int, state: str, diagnostics: str,
                **fields: Any) -> bool:
        """End a job: its current attempt and every task of it still WAITING or RUNNING, and the job itself,
        ``state`` with ``diagnostics`` (and the job's other ``fields``), in one transaction.

        Never lost to a full disk: until it is written the job reads as ended, and each later call (or
        ``flush``, ``close``) tries again. Returns whether it is written now."""
        job = {"state": state, "sub_state": "Completed", "completed_time": now_ms(), "diagnostics": diagnostics,
               **fields}
        with self._lock:
            self._unwritten[(username, name)] = (attempt_id, job)
            try:
                return self.flush()
            except OSError:
                return False

    def flush(self) -> bool:
        """Write the ends of jobs a full disk held back; ``OSError`` while it still cannot."""
        with self._lock:
            for (username, name), (attempt_id, job) in list(self._unwritten.items()):
                with self._tx() as db:
                    db.execute(
                        "UPDATE tasks SET state=?, completed_time=?, diagnostics=COALESCE(diagnostics, ?)"
                        " WHERE username=? AND name=? AND job_attempt=? AND state IN ('WAITING','RUNNING')",
                        (job["state"], job["completed_time"], job["diagnostics"], username, name, attempt_id))
                    db.execute("INSERT OR IGNORE INTO job_attempts (username, name, attempt_id, state, created_time)"
                               " VALUES (?,?,?,?,?)", (username, name, attempt_id, "WAITING", job["completed_time"]))
                    db.execute(
                        "UPDATE job_attempts SET state=?, completed_time=?, diagnostics=?,"
                        " exit_code=COALESCE(?, exit_code), trigger_message=COALESCE(?, trigger_message)"
                        " WHERE username=? AND name=? AND attempt_id=? AND state IN ('WAITING','RUNNING')",
                        (job["state"], job["completed_time"], job["diagnostics"], job.get("app_exit_code"),
                         job.get("trigger_message"), username, name, attempt_id))
                    cols = ", ".join(f"{key}=?" for key in job)
                    db.execute(f"UPDATE jobs SET {cols} WHERE username=? AND name=?", (*job.values(), username, name))
                del self._unwritten[(username, name)]
        return True

    # ------------------------------------------------------------------ attempts

    def upsert_attempt(self, username: str, name: str, attempt_id: int, **fields: Any) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO job_attempts (username, name, attempt_id, state, created_time)"
                " VALUES (?,?,?,?,?)",
                (username, name, attempt_id, "WAITING", now_ms()),
            )
            if fields:
                cols = ", ".join(f"{key}=?" for key in fields)
                db.execute(
                    f"UPDATE job_attempts SET {cols} WHERE username=? AND name=? AND attempt_id=?",
                    (*fields.values(), username, name, attempt_id),
                )

    def attempt(self, username: str, name: str, attempt_id: int) -> dict[str, Any] | None:
        return self._one(
            "SELECT * FROM job_attempts WHERE username=? AND name=? AND attempt_id=?", (username, name, attempt_id)
        )

    def attempts(self, username: str, name: str) -> list[dict[str, Any]]:
        return self._all("SELECT * FROM job_attempts WHERE username=? AND name=? ORDER BY attempt_id", (username, name))

    # ------------------------------------------------------------------ tasks

    def insert_task(self, username: str, name: str, job_attempt: int, role: str, index: int,
                    task_attempt: int, uid: str, ports: dict[str, list[int]], gpus: str | None,
                    log_dir: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO tasks (username, name, job_attempt, role, task_index, task_attempt, uid, state,"
                " created_time, ports, gpus, log_dir) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (username, name, job_attempt, role, index, task_attempt, uid, "WAITING", now_ms(),
                 json.dumps(ports), gpus, log_dir),
            )

    def update_task(self, username: str, name: str, job_attempt: int, role: str, index: int,
                    task_attempt: int, **fields: Any) -> None:
        cols = ", ".join(f"{key}=?" for key in fields)
        with self._tx() as db:
            db.execute(
                f"UPDATE tasks SET {cols} WHERE username=? AND name=? AND job_attempt=? AND role=?"
                " AND task_index=? AND task_attempt=?",
                (*fields.values(), username, name, job_attempt, role, index, task_attempt),
            )

    def tasks(self, username: str, name: str, job_attempt: int) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM tasks WHERE username=? AND name=? AND job_attempt=?"
            " ORDER BY role, task_index, task_attempt",
            (username, name, job_attempt),
        )

    def task_attempts(self, username: str, name: str, job_attempt: int, role: str, index: int) -> list[dict[str, Any]]:
        return self._all(
            "SELECT * FROM tasks WHERE username=? AND name=? AND job_attempt=? AND role=? AND task_index=?"
            " ORDER BY task_attempt",
            (username, name, job_attempt, role, index),
        )

    # ------------------------------------------------------------------ tags

    def tags(self, username: str, name: str) -> list[str]:
        rows = self._all("SELECT tag FROM tags WHERE username=? AND name=? ORDER BY rowid", (username, name))
        return [row["tag"] for row in rows]

    def all_tags(self) -> dict[tuple[str, str], list[str]]:
        out: dict[tuple[str, str], list[str]] = {}
        for row in self._all("SELECT username, name, tag FROM tags ORDER BY rowid", ()):
            out.setdefault((row["username"], row["name"]), []).append(row["tag"])
        return out

    def add_tag(self, username: str, name: str, tag: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO tags (username, name, tag) VALUES (?,?,?)", (username, name, tag))

    def delete_tag(self, username: str, name: str, tag: str) -> bool:
        """False when the job had no such tag."""
        with self._tx() as db:
            cursor = db.execute("DELETE FROM tags WHERE username=? AND name=? AND tag=?", (username, name, tag))
            return cursor.rowcount > 0
