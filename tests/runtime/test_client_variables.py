"""The paijob client's PAI_CLUSTER_URL / PAI_TOKEN / PAI_USER in a laptop shell do not make it an OpenPAI task.

The README offers those three as a cluster profile from the environment; with
them exported, `paijob-runtime train` on the same laptop must still run
standalone (OpenPAI never sets them in a task).
"""

from __future__ import annotations

from paijob.runtime.env import compute_dist_env, is_openpai

CLIENT = {"PAI_CLUSTER_URL": "https://pai.example.com", "PAI_TOKEN": "t", "PAI_USER": "alice", "HOME": "/h"}


def test_the_clients_variables_alone_are_not_an_openpai_task() -> None:
    assert not is_openpai(CLIENT)
    dist = compute_dist_env(CLIENT, free_port=29999)
    assert (dist.master_addr, dist.master_port, dist.nnodes) == ("127.0.0.1", 29999, 1)


def test_any_variable_openpai_sets_still_is() -> None:
    assert is_openpai({**CLIENT, "PAI_TASK_ROLE_LIST": "worker"})
    assert is_openpai({"PAI_USER_NAME": "alice"})  # OpenPAI's own, not the client's PAI_USER
