"""A job's node key among its ``secrets`` (``paijob.render.node_key``): added where the cluster reads it only."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from paijob.common.contract import NODE_KEY_SECRET
from paijob.errors import PaijobError
from paijob.openpai.jsyaml import load_job
from paijob.render.node_key import KEY_SHAPE, new_key, with_node_key
from paijob.runtime import held

KEY = "0123456789abcdef" * 4
PLAIN = """\
# my job: the comments travel
protocolVersion: 2
name: j
type: job
taskRoles:
  worker:
    instances: 2
    dockerImage: img
    commands:
      - paijob-runtime train job.py  # the runtime runs here
"""


def read(text: str) -> Any:
    return load_job(text, "job").value


def test_a_job_without_secrets_gets_them_appended_as_written() -> None:
    keyed = with_node_key(PLAIN, read(PLAIN), KEY)
    assert keyed.note is None
    assert keyed.text.startswith(PLAIN) and "# the runtime runs here" in keyed.text  # nothing else rewritten
    assert read(keyed.text) == keyed.job and keyed.job["secrets"] == {NODE_KEY_SECRET: KEY}
    assert {k: v for k, v in keyed.job.items() if k != "secrets"} == read(PLAIN)


def test_a_job_with_secrets_keeps_them_and_gains_the_key() -> None:
    text = PLAIN + "secrets:\n  registryPassword: hunter2\n"
    keyed = with_node_key(text, read(text), KEY)
    assert keyed.note is None and read(keyed.text) == keyed.job
    assert keyed.job["secrets"] == {"registryPassword": "hunter2", NODE_KEY_SECRET: KEY}


@pytest.mark.parametrize("text", [
    PLAIN + "...\n",  # a document end: what follows it is not this job
    '{"protocolVersion": 2, "name": "j", "type": "job", "taskRoles": {"w": {"commands": ["paijob-runtime x"]}}}',
    PLAIN.rstrip("\n"),  # no newline at the end
])
def test_a_text_an_appended_map_would_not_extend_is_written_again(text: str) -> None:
    keyed = with_node_key(text, read(text), KEY)
    assert keyed.note is None and read(keyed.text) == keyed.job
    assert keyed.job["secrets"][NODE_KEY_SECRET] == KEY and keyed.job["name"] == "j"


def test_a_key_of_the_users_own_is_kept_and_a_bad_one_refused() -> None:
    mine = PLAIN + f"secrets:\n  {NODE_KEY_SECRET}: '{KEY}'\n"
    assert with_node_key(mine, read(mine), new_key()) == (mine, read(mine), None)
    bad = PLAIN + f"secrets:\n  {NODE_KEY_SECRET}: letmein\n"
    with pytest.raises(PaijobError, match=f"secrets.{NODE_KEY_SECRET} is paijob's own.*Remove it") as error:
        with_node_key(bad, read(bad), new_key(), "job.yaml")
    assert str(error.value).startswith("job.yaml: ") and error.value.exit_code == 2


def test_new_keys_are_fresh_and_of_the_shape_the_runtime_reads(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(held, "_held", {})  # no local cluster's key: the mounted file is read
    keys = {new_key() for _ in range(50)}
    assert len(keys) == 50 and all(KEY_SHAPE.fullmatch(key) for key in keys)
    for key in (KEY, "1" * 64, "1e" + "0" * 62):  # all digits or float-like: js-yaml quotes them
        keyed = with_node_key(PLAIN, read(PLAIN), key)
        mounted = tmp_path / "secrets.yaml"  # rest-server mounts yaml.safeDump(config.secrets) (k8s.js ~864)
        mounted.write_text(yaml.safe_dump(keyed.job["secrets"]))
        assert held.node_key(str(mounted)) == key.encode()


def test_a_job_whose_commands_a_secrets_map_would_change_is_left_as_it_is_and_said() -> None:
    """openpai-runtime renders a job's commands again when it has secrets, blanking the tags the server left:
    `echo '<% not-a-parameter %>'` would print nothing. The job keeps its commands; its nodes talk unsigned."""
    text = PLAIN.replace("paijob-runtime train job.py", "echo '<% not-a-parameter %>' && paijob-runtime train job.py")
    keyed = with_node_key(text, read(text), KEY)
    assert (keyed.text, keyed.job) == (text, read(text))
    assert keyed.note is not None and "role worker's commands" in keyed.note and "docs/security.md" in keyed.note
    with_parameter = text.replace("not-a-parameter", "$parameters.x") + "parameters:\n  x: 1\n"  # resolved
    assert with_node_key(with_parameter, read(with_parameter), KEY).note is None
