"""Failure latency: one worker crashes in a 2-node job on the local cluster; how long until
both nodes' `paijob-runtime` have exited? Target: <= 5 s.

Each task's command records when its `paijob-runtime` returned; the crashing
worker records when it raised. Latency = last node exit - crash.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from harness import BIN, base_env, progress, summarize, timed

CRASH = Path(__file__).with_name("crash_ddp.py")

JOB = """\
protocolVersion: 2
name: bench-failure-{stamp}
type: job
prerequisites:
  - {{name: image, type: dockerimage, uri: "python:3.11"}}
taskRoles:
  worker:
    instances: 2
    # Let the job fail only when both tasks have: the cluster must not kill the
    # healthy node for us, since paijob-runtime's own propagation is measured.
    completion: {{minFailedInstances: 2}}
    dockerImage: image
    resourcePerInstance: {{cpu: 1, memoryMB: 2048, gpu: 0, ports: {{SynPort: 1}}}}
    commands:
      - export CRASH_RANK=1 CRASH_AFTER=30 CRASH_FILE={tmp}/crash
      - status=0
      - paijob-runtime train --nproc-per-node 1 --backend gloo -- {crash} || status=$?
      - date +%s.%N > {tmp}/exit-${{PAI_TASK_INDEX}}
      - exit $status
"""


def run(samples: int) -> dict[str, object]:
    raw: list[float] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env = base_env({"PAIJOB_LOCAL_STATE_DIR": str(tmp / "state")})
        try:
            for i in range(samples):
                progress(f"failure latency: round {i + 1}/{samples}")
                for stale in tmp.glob("exit-*"):
                    stale.unlink()
                job = tmp / f"job-{i}.yaml"
                job.write_text(JOB.format(stamp=f"{int(time.time())}-{i}", tmp=tmp, crash=CRASH))
                result = timed([str(BIN / "paijob"), "run", str(job), "--local"], env=env)
                if result.returncode == 0:
                    raise RuntimeError("the crashing job succeeded:\n" + result.output_tail)
                crash = float((tmp / "crash").read_text())
                exits = [float((tmp / f"exit-{index}").read_text()) for index in (0, 1)]
                raw.append(max(exits) - crash)
        finally:
            timed([str(BIN / "paijob"), "local", "down"], env=env)
    return {"raw_seconds": raw, "crash_to_both_nodes_exited": summarize(raw), "target": 5.0}
