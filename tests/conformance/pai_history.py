"""Writes pai-history-jobs.json.xz: every distinct job file in microsoft/pai's history.

    python tests/conformance/pai_history.py PATH/TO/pai/.git

A job file is any *.yaml / *.yml blob ever added or changed that holds
``protocolVersion`` and ``taskRoles``; 383 at a95d9420e (13 MB of YAML, many
near-copies, hence xz: about 35 KB). test_conformance.py asks the rest-server
and ``paijob validate`` about each.
"""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "pai-history-jobs.json.xz"


def historical_jobs(git_dir: str) -> list[bytes]:
    log = subprocess.run(
        ["git", "--git-dir", git_dir, "log", "--all", "--pretty=format:%H", "--name-only",
         "--diff-filter=AMR", "--", "*.yaml", "*.yml"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    commit, wanted = "", []
    for line in log.splitlines():
        if len(line) == 40 and all(c in "0123456789abcdef" for c in line):
            commit = line
        elif line.strip():
            wanted.append(f"{commit}:{line.strip()}")
    blobs = subprocess.run(
        ["git", "--git-dir", git_dir, "cat-file", "--batch"],
        input="\n".join(wanted).encode(), capture_output=True, check=True, timeout=600,
    ).stdout
    jobs: dict[bytes, None] = {}
    pos = 0
    while pos < len(blobs):
        end = blobs.index(b"\n", pos)
        header = blobs[pos:end].split()
        pos = end + 1
        if len(header) < 3:
            continue
        data = blobs[pos : pos + int(header[2])]
        pos += int(header[2]) + 1
        if b"protocolVersion" in data and b"taskRoles" in data:
            jobs.setdefault(data)
    return list(jobs)


if __name__ == "__main__":
    texts = [job.decode("utf-8") for job in historical_jobs(sys.argv[1])]
    OUT.write_bytes(lzma.compress(json.dumps(texts).encode(), preset=9 | lzma.PRESET_EXTREME))
    print(f"{len(texts)} job files -> {OUT} ({OUT.stat().st_size} bytes)")
