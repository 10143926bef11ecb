"""Write what OpenPAI gives each task of a rendered job, for .ci/image-stage to run it in containers.

For every task, ``<role>-<index>.env`` (podman's ``--env-file``: the PAI_* / FC_* variables, made by the same code
the local cluster uses, every task on this host's loopback) and ``<role>-<index>.sh`` (openpai-runtime's
``user.sh``: the role's commands as OpenPAI renders them, under bash errexit nounset pipefail). One line per task
on stdout: ``NAME SHM_MB IMAGE``.

    python .ci/image_tasks.py JOB.yaml OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from paijob.common.ports import draw
from paijob.local.taskspec import Ports, task_env, task_script
from paijob.openpai.jsyaml import load_job
from paijob.openpai.model import parse_job

USER = "ci"
# How openpai-runtime starts the user.sh it writes from the commands.
SCRIPT_HEADER = "#!/bin/bash\nset -o errexit\nset -o nounset\nset -o pipefail\n"


def main(job_file: str, out: str) -> None:
    job = parse_job(load_job(Path(job_file).read_bytes(), job_file).value)
    # Every task shares this host's network, so every port differs (drawn outside the ephemeral range).
    numbers = iter(draw(sum(sum(role.resources.all_ports.values()) * role.instances for role in job.roles)))
    ports: Ports = {role.name: {i: {label: [next(numbers) for _ in range(count)]
                                    for label, count in role.resources.all_ports.items()}
                                for i in range(role.instances)}
                    for role in job.roles}
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for role in job.roles:
        for index in range(role.instances):
            name = f"{role.runtime_name}-{index}"
            env = task_env(job, USER, role.name, index, ports)
            assert not any("\n" in value for value in env.values()), "an --env-file holds one line per variable"
            (out_dir / f"{name}.env").write_text("".join(f"{key}={value}\n" for key, value in env.items()))
            (out_dir / f"{name}.sh").write_text(SCRIPT_HEADER + task_script(job, role) + "\n")
            print(name, role.shm_mb, job.image_uri(role))


if __name__ == "__main__":
    main(*sys.argv[1:])
