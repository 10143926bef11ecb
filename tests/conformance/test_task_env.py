"""The task environment = the rest-server's: paijob's job model and ``taskenv`` give every task the
``PAI_*`` variables that OpenPAI's own ``runtime-env.js`` computes for the same job text, and the
framework object name (``FC_FRAMEWORK_NAME``) that its ``encodeName`` gives, run under node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from test_conformance import _node_missing  # noqa: E402

from paijob.openpai import taskenv  # noqa: E402
from paijob.openpai.jsyaml import load_job  # noqa: E402
from paijob.openpai.model import parse_job  # noqa: E402
from paijob.openpai.names import framework_object_name  # noqa: E402

JOB = """\
protocolVersion: 2
name: env
type: job
prerequisites:
  - {type: dockerimage, name: image, uri: repo/image:tag}
taskRoles:
  Main_Worker:
    instances: 3
    dockerImage: image
    resourcePerInstance: {cpu: 4, memoryMB: 8192, gpu: 2, ports: {SynPort: 2}}
    commands: [python train.py]
"""

# Role lines each job adds (some the server's schema refuses: runtime-env.js must agree anyway, since the
# local cluster's runner sees only validated jobs but the model takes any), and top-level lines.
ROLE_EXTRAS = {
    "no-options": "",
    "shm-null": "    extraContainerOptions: {shmMB: null}\n",
    "shm-0": "    extraContainerOptions: {shmMB: 0}\n",
    "shm-1024": "    extraContainerOptions: {shmMB: 1024}\n",
    "options-without-shm": "    extraContainerOptions: {infiniband: true}\n",
    "options-empty": "    extraContainerOptions: {}\n",
    "completion-null": "    completion: {minFailedInstances: null, minSucceededInstances: null}\n",
    "completion-0": "    completion: {minFailedInstances: 0, minSucceededInstances: 0}\n",
    "completion-never": "    completion: {minFailedInstances: -1, minSucceededInstances: -1}\n",
    "completion-counts": "    completion: {minFailedInstances: 2, minSucceededInstances: 1}\n",
    "completion-empty": "    completion: {}\n",
}
TOP_EXTRAS = {
    "second-role": "  ps:\n    dockerImage: image\n    resourcePerInstance: {cpu: 1, memoryMB: 512, gpu: 0}\n"
                   "    commands: [serve]\n",
    "virtual-cluster": "defaults: {virtualCluster: vc1}\n",
    "virtual-cluster-null": "defaults: {virtualCluster: null}\n",
}


def _jobs() -> dict[str, str]:
    jobs = {name: JOB.replace("    commands:", extra + "    commands:") for name, extra in ROLE_EXTRAS.items()}
    jobs.update({name: JOB + extra for name, extra in TOP_EXTRAS.items()})
    jobs["no-instances"] = JOB.replace("    instances: 3\n", "")
    jobs["no-gpu-field"] = JOB.replace(" gpu: 2,", "")
    return jobs


JOBS = _jobs()
NAMES = ["alice~env", "a.b-c_d~Job-1", "x~y~z", "unknownbob~job", "unknown~Job_A", "My_Framework-2", ""]


def openpai(jobs: list[tuple[str, str]], names: list[str]) -> dict[str, list]:  # type: ignore[type-arg]
    """runtime-env.js and encodeName under node, on OpenPAI's own files (task_env.js)."""
    result = subprocess.run(
        ["node", str(HERE / "task_env.js")], input=json.dumps({"jobs": jobs, "names": names}),
        capture_output=True, text=True, cwd=HERE, env={**os.environ, "NODE_PATH": str(HERE / "rest-server")},
        timeout=120, check=True,
    )
    answer: dict[str, list] = json.loads(result.stdout)  # type: ignore[type-arg]
    return answer


@pytest.mark.skipif(_node_missing() is not None, reason=str(_node_missing()))
def test_every_server_variable_is_what_runtime_env_js_writes() -> None:
    framework = "alice~env"
    expected = openpai([(framework, text) for text in JOBS.values()], [])["env"]
    for (name, text), theirs in zip(JOBS.items(), expected, strict=True):
        ours = taskenv.server_env(framework, parse_job(load_job(text, name).value))
        assert ours == theirs, name


@pytest.mark.skipif(_node_missing() is not None, reason=str(_node_missing()))
def test_shm_null_gives_an_empty_fourth_resource_field_as_on_openpai() -> None:
    (theirs,) = openpai([("alice~env", JOBS["shm-null"])], [])["env"]
    assert theirs["PAI_RESOURCE_Main_Worker"] == "2,4,8192,"  # [.., null].join(','): not 0, not 512


@pytest.mark.skipif(_node_missing() is not None, reason=str(_node_missing()))
def test_framework_object_names_are_encode_names() -> None:
    theirs = openpai([], NAMES)["names"]
    assert [framework_object_name(name) for name in NAMES] == theirs
    assert len(theirs[0]) == 32  # md5 hex since microsoft/pai 207ca6cde, no longer base32
