"""Issue 55 item 5: a local task drops every credential-shaped variable of the shell that started the cluster
(``DATABASE_URL`` with a password, ``PGPASSWORD``, ``KAGGLE_KEY``, ``AZURE_STORAGE_CONNECTION_STRING``, a token
of a known shape under any name), unless ``PAIJOB_LOCAL_PASS_ENV`` names it; the job's own env always wins.
The task's log names what was dropped, never a value."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_helpers import TOKEN, job_yaml

from paijob.local import settings
from paijob.local.daemon import local_user
from paijob.local.server import LocalServer
from paijob.local.taskspec import split_env
from paijob.remote.client import PaiClient

CREDENTIALS = {
    "DATABASE_URL": "postgres://app:Hunter2pw@db.internal:5432/app",
    "REDIS_URL": "redis://:Hunter2pw@cache:6379/0",
    "PGPASSWORD": "Hunter2pw",
    "MYSQL_PWD": "Hunter2pw",
    "KAGGLE_KEY": "0123456789abcdef0123456789abcdef",
    "AZURE_STORAGE_CONNECTION_STRING": "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=" + "Qk9y" * 22,
    "STRIPE_SECRET": "sk_live_51H8xYzAbCdEfGhIjKlMnOp",
    "DEPLOY_THING": "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",  # an innocent name, a token's value
    "SLACK_BOT_TOKEN": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "SENTRY_DSN": "https://abc@o1.ingest.sentry.io/1",
}
ORDINARY = {"HOME": "/home/alice", "LANG": "C.UTF-8", "TOKENIZERS_PARALLELISM": "false", "HF_HOME": "/data/hf",
            "OMP_NUM_THREADS": "4", "PWD": "/work", "HTTPS_PROXY": "http://proxy.internal:3128",
            "PIP_INDEX_URL": "https://pypi.internal/simple", "CUDA_VISIBLE_DEVICES": "0"}


def test_credential_shaped_variables_are_dropped_and_named() -> None:
    kept, dropped = split_env({**CREDENTIALS, **ORDINARY})
    assert kept == ORDINARY
    assert dropped == sorted(CREDENTIALS)


def test_the_pass_list_passes_what_it_names_and_never_openpai_s_own() -> None:
    kept, dropped = split_env({**CREDENTIALS, "PAI_TOKEN": "x", "PAIJOB_LOCAL_TOKEN": "y"},
                              {"DATABASE_URL", "PAI_TOKEN", "PAIJOB_LOCAL_TOKEN"})
    assert kept == {"DATABASE_URL": CREDENTIALS["DATABASE_URL"]}
    assert "DATABASE_URL" not in dropped and "PAI_TOKEN" not in kept


@pytest.mark.parametrize("value", ["DATABASE_URL KAGGLE_KEY", "DATABASE_URL,KAGGLE_KEY", " DATABASE_URL , "])
def test_the_pass_list_setting_is_read(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PAIJOB_LOCAL_PASS_ENV", value)
    assert settings.passed_env() <= {"DATABASE_URL", "KAGGLE_KEY"} and "DATABASE_URL" in settings.passed_env()


def test_a_bad_pass_list_is_refused_without_repeating_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAIJOB_LOCAL_PASS_ENV", "postgres://app:Hunter2pw@db/app")
    with pytest.raises(settings.LocalSettingError) as refused:
        settings.check()
    assert "Hunter2pw" not in str(refused.value) and "PAIJOB_LOCAL_PASS_ENV" in str(refused.value)


def test_a_local_task_gets_no_credential_unless_passed_or_set_by_the_job(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**CREDENTIALS, **ORDINARY}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PAIJOB_LOCAL_PASS_ENV", "KAGGLE_KEY")
    with LocalServer(tmp_path / "state", TOKEN) as srv:
        client = PaiClient(srv.url, TOKEN, user=local_user(), cluster_name="local", retries=1)
        job_id = client.submit(job_yaml("env", ["export PGPASSWORD=from-the-job", 'env > "$PAIJOB_OUTPUT_DIR/env.txt"']))
        assert client.wait(job_id, poll=0.1, timeout=60)["jobStatus"]["state"] == "SUCCEEDED"
    seen = (tmp_path / "state" / "outputs" / job_id / "env.txt").read_text()
    assert f"KAGGLE_KEY={CREDENTIALS['KAGGLE_KEY']}" in seen  # passed by name
    assert "PGPASSWORD=from-the-job" in seen  # the job's own
    assert not [name for name, value in CREDENTIALS.items() if name != "KAGGLE_KEY" and value in seen]
    assert [name for name, value in ORDINARY.items() if f"{name}={value}" not in seen and name not in (
        "PWD", "CUDA_VISIBLE_DEVICES")] == []  # (bash sets PWD; the cluster sets a task's GPUs)
    log = "".join(path.read_text(errors="replace") for path in (tmp_path / "state" / "logs").rglob("*") if path.is_file())
    assert "not passed to the tasks, as they look like credentials: " in log and "DATABASE_URL" in log
    assert "Hunter2pw" not in log
