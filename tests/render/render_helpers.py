"""Shared helpers of the render and templates tests."""

from __future__ import annotations

import os
from pathlib import Path

from suite_helpers import paijob

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GOLDEN = HERE / "golden"
EXAMPLES = ROOT / "examples"

UPDATE_GOLDEN = os.environ.get("PAIJOB_UPDATE_GOLDEN") == "1"

# template -> case name -> --set expressions; every template has a 1x1 and a
# 4-node x 8-GPU case (dataparallel: 1 node x 8 GPUs, it is single-instance).
BIG = ["instances=4", "gpu=8", "cpu=48", "memoryMB=393216"]
GOLDEN_CASES: dict[str, dict[str, list[str]]] = {
    "ddp": {
        "1x1": ["instances=1", "gpu=1"],
        "4x8": BIG,
        "cpu-2x2": ["instances=2", "gpu=0", "processesPerNode=2", "cpu=4", "memoryMB=8192"],
        "extras": [
            "instances=2",
            "gpu=4",
            "ssh=true",
            "tensorboard.enabled=true",
            "env.NCCL_SOCKET_IFNAME=eth0",
            "setup=[pip install -r requirements.txt, 'echo \"name has ${#PAI_JOB_NAME} chars\"']",
            "script=train.py",
            'args=[--lr, "<% $parameters.lr %>", --note, two words]',
            "parameters.lr=0.1",
            "secrets.token=abc",
            "taskRetryCount=2",
            "gangAllocation=false",
            "backend=gloo",
            "precision=bf16",
            "infiniband=true",
            "description=A job with every option",
        ],
        # restarts inside the attempt, and 3 of 4 nodes may go on without the 4th: gang allocation off,
        # minFailedInstances 2, the task retried alone
        "recovery": [*BIG, "maxRestarts=2", "minNodes=3", "taskRetryCount=2"],
    },
    "apex": {"1x1": ["instances=1", "gpu=1"], "4x8": [*BIG, "optLevel=O1"]},
    "horovod": {
        "1x1": ["instances=1", "gpu=1"],
        "4x8": BIG,
        "horovodrun": [
            "instances=2",
            "gpu=2",
            "launcher=horovodrun",
            "env.NCCL_DEBUG=null",  # null leaves a default variable out
            "env.NCCL_SOCKET_IFNAME=null",
        ],
    },
    "dataparallel": {"1x1": ["gpu=1"], "1x8": ["gpu=8", "cpu=48", "memoryMB=393216"]},
    "spawn": {"1x1": ["instances=1", "gpu=1"], "4x8": BIG},
}


def golden_path(template: str, case: str) -> Path:
    return GOLDEN / f"{template}-{case}.yaml"


run_cli = paijob  # the suite's one in-process CLI runner, under the name the render tests use
