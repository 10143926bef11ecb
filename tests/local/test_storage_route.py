"""The storage route: a job's output folder on an OpenPAI storage, checked at submit, read back by `paijob cp`.

On the local cluster end to end (its storage 'shared', GET /api/v2/storages, the folder its tasks see as
/mnt/shared, `paijob cp`), and against a fake OpenPAI whose answers have rest-server's shapes (the swagger's
StorageSummary / StorageDetail): a storage that is not the user's is refused before the queue, naming theirs;
`cp` reads the job's folder where the profile says this machine mounts the storage, else says where it is.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from cluster_helpers import TOKEN, job_yaml
from suite_helpers import paijob
from swagger_check import check, load_swagger

from paijob.common.storage_route import job_route, mount, output_export
from paijob.local import daemon, layout
from paijob.local import storage as local_storage
from paijob.local.server import LocalServer
from paijob.openpai.storages import Storage, job_storages, parse_summary, summary_problem, where
from paijob.remote import profiles
from paijob.remote.client import PaiClient
from paijob.render.templating import render_template

API = "/rest-server/api/v2"


def plugin(name: str) -> dict[str, object]:
    """The deprecated ``teamwise_storage`` runtime plugin entry (paijob before issue 45 wrote it)."""
    return {"plugin": "teamwise_storage", "parameters": {"storageConfigNames": [name]}}


def storage_job(name: str, storage: str, commands: list[str], sub: str = "runs") -> str:
    """A job on the storage route, as the templates write it (the export line and extras.storages)."""
    job = yaml.safe_load(job_yaml(name, [output_export(storage, sub), *commands]))
    job["extras"] = {"storages": [mount(storage)]}
    return yaml.safe_dump(job, sort_keys=False)


# --------------------------------------------------------------------------- the values and the job


def test_storage_mounts_it_in_extras_storages_and_points_the_output_folder_at_the_job_s_own_folder_there() -> None:
    """OpenPAI's documented form (extras.storages: [{name, mountPath}], rest-server models/v2/job/k8s.js), not the
    teamwise_storage plugin, which openpai-runtime ignores and rest-server converts only without extras.storages."""
    job = yaml.safe_load(render_template("ddp", sets=["storage=nfs-home", "storagePath=team/runs"]).text)
    assert job["extras"]["storages"] == [{"name": "nfs-home", "mountPath": "/mnt/nfs-home"}]
    assert "com.microsoft.pai.runtimeplugin" not in job["extras"]
    route = job_route(job)
    assert route is not None and route.in_task("me", "exp1") == "/mnt/nfs-home/team/runs/me/exp1"
    assert job_storages(job) == ["nfs-home"]
    plain = yaml.safe_load(render_template("ddp").text)
    assert job_route(plain) is None and job_storages(plain) == []


def test_the_export_line_names_the_folder_from_the_task_s_own_user_and_job(tmp_path: Path) -> None:
    import subprocess

    line = output_export("nfs-home", "runs")
    env = {"PATH": "/usr/bin:/bin", "PAI_USER_NAME": "me", "PAI_JOB_NAME": "me~exp1",
           "PAIJOB_STORAGE_MOUNT": str(tmp_path)}
    done = subprocess.run(["bash", "-c", f"set -o errexit -o nounset -o pipefail\n{line}\necho \"$PAIJOB_OUTPUT_DIR\""],
                          env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"{tmp_path}/nfs-home/runs/me/exp1" and (tmp_path / "nfs-home/runs/me/exp1").is_dir()


def test_rest_server_reads_storages_from_extras_storages_else_from_the_plugin() -> None:
    both = {"extras": {"storages": [{"name": "a"}], "com.microsoft.pai.runtimeplugin": [plugin("b")]}}
    assert job_storages(both) == ["a"]
    assert job_storages({"extras": {"com.microsoft.pai.runtimeplugin": [plugin("b"), {"plugin": "ssh"}]}}) == ["b"]


def test_rest_server_shaped_storage_answers_are_parsed_and_their_secrets_never_shown() -> None:
    swagger = load_swagger()
    storages = swagger["paths"]["/api/v2/storages"]["get"]["responses"]["200"]["content"]["application/json"]
    assert summary_problem(storages["example"]) is None
    assert parse_summary(storages["example"]) == [Storage("name", True, True)]
    assert summary_problem({"storages": [{"share": True}]}) and summary_problem([])
    one = swagger["paths"]["/api/v2/storages/{storage}"]["get"]["responses"]["200"]["content"]["application/json"]
    assert where(one["example"]) == "nfs <ip-address>:/data"
    samba = where({"type": "samba", "data": {"address": "//files/share", "username": "u", "password": "hunter2"}})
    azure = where({"type": "azureFile", "data": {"shareName": "s", "accountName": "acc", "accountKey": "k3y"}})
    assert samba == "samba //files/share" and "hunter2" not in samba
    assert azure == "azureFile s (account acc)" and "k3y" not in azure


# --------------------------------------------------------------------------- the local cluster's storage


def test_the_local_cluster_lists_its_storage_as_rest_server_does(client: PaiClient, server: LocalServer) -> None:
    """models/v2/storage.js: the summary's entries {name, share, volumeName, default}; the detail
    (convertVolumeDetail) {name, share, volumeName, type, data, readOnly, mountOptions}, no `default`; 403
    ForbiddenUserError for a storage the user may not use, 404 NoStorageError for none (issue 54)."""
    swagger = load_swagger()
    assert client.storages() == [Storage(local_storage.NAME, True, False), Storage(local_storage.HOME, False, True)]
    listed = requests.get(f"{server.url}{API}/storages", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    check(swagger, "/api/v2/storages", "get", 200, listed.json())
    detail = client.storage(local_storage.NAME)
    check(swagger, "/api/v2/storages/{storage}", "get", 200, detail)
    missing = requests.get(f"{server.url}{API}/storages/nosuch", headers={"Authorization": f"Bearer {TOKEN}"},
                           timeout=10)
    assert missing.status_code == 404 and missing.json()["code"] == "NoStorageError"
    assert requests.get(f"{server.url}{API}/storages", timeout=10).status_code == 401  # the API's token check
    assert detail["readOnly"] is False  # rest-server's detail says readOnly (models/v2/storage.js); submit reads it
    assert set(detail) == {"name", "share", "volumeName", "type", "data", "readOnly", "mountOptions"}
    assert detail["mountOptions"] == ["rw"] and detail["type"] == "other"
    defaults = requests.get(f"{server.url}{API}/storages", params={"default": "true"},
                            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert defaults.json() == {"storages": [{"name": "home", "share": False, "volumeName": "home", "default": True}]}
    forbidden = requests.get(f"{server.url}{API}/storages/{local_storage.ADMIN}",
                             headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert forbidden.status_code == 403 and forbidden.json() == {
        "code": "ForbiddenUserError", "message": f"User {client.user} is not allowed to access admin."}
    assert "admin" not in [s.name for s in client.storages()]


def test_the_local_cluster_refuses_at_submit_a_job_that_mounts_a_storage_it_does_not_have(
        client: PaiClient, server: LocalServer) -> None:
    """rest-server's submit (k8s.js put): 404 NoStorageError for the first storage that is not the user's,
    named by the plugin (the last teamwise_storage entry sets the list) or by extras.storages."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "text/yaml"}
    by_plugin = storage_job("nost1", "team-nfs", ["true"])
    listed = yaml.safe_load(job_yaml("nost2", ["true"]))
    listed["extras"] = {"storages": [{"name": local_storage.NAME}, {"name": "other"}],
                        "com.microsoft.pai.runtimeplugin": [plugin(local_storage.NAME)]}
    last = yaml.safe_load(job_yaml("nost3", ["true"]))
    last["extras"] = {"com.microsoft.pai.runtimeplugin": [plugin(local_storage.NAME), plugin("gone")]}
    for text, missing in ((by_plugin, "team-nfs"), (yaml.safe_dump(listed), "other"), (yaml.safe_dump(last), "gone")):
        answer = requests.post(f"{server.url}{API}/jobs", data=text, headers=headers, timeout=10)
        assert answer.status_code == 404, answer.text
        assert answer.json() == {"code": "NoStorageError", "message": f"Storage {missing} is not found."}
    assert client.list_jobs() == []  # none of them was taken
    mine = requests.post(f"{server.url}{API}/jobs", data=storage_job("ok", local_storage.NAME, ["true"]),
                         headers=headers, timeout=10)
    assert mine.status_code == 202, mine.text


def test_on_the_local_cluster_the_task_writes_to_the_storage_and_cp_brings_it_back(
        capsys: pytest.CaptureFixture[str], local: Path, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(storage_job("st", local_storage.NAME, ['echo "result of $PAI_JOB_NAME" > "$PAIJOB_OUTPUT_DIR/result.txt"']))
    code, _, err = paijob(capsys, "run", str(job), "--local", "--name", "st1")
    assert code == 0, err
    user = daemon.local_user()
    written = layout.storage(local, local_storage.NAME) / "runs" / user / "st1" / "result.txt"
    assert written.read_text() == f"result of {user}~st1\n"
    # the hint names the cluster: it must work when another cluster is the default
    assert f"paijob: output folder {written.parent} (`paijob cp st1:PATH . -c local` copies from it)" in err
    dest = tmp_path / "back"
    dest.mkdir()
    code, _, err = paijob(capsys, "cp", "st1:result.txt", str(dest), "-c", "local")
    assert code == 0, err
    assert (dest / "result.txt").read_text() == f"result of {user}~st1\n"


def test_a_storage_that_is_not_yours_is_refused_before_the_queue(
        capsys: pytest.CaptureFixture[str], local: Path, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(storage_job("nost", "team-nfs", ["true"]))
    code, _, err = paijob(capsys, "submit", str(job), "-c", "local")
    assert code == 2
    assert f"storage 'team-nfs' is not one you may use on cluster local (yours: {local_storage.NAME}, home)" in err
    assert err.count("\n") == 1
    code, _, err = paijob(capsys, "status", "nost", "-c", "local")
    assert code != 0  # never submitted


# --------------------------------------------------------------------------- a real cluster (a fake one)


class FakePai:
    def __init__(self) -> None:
        self.storages: list[dict[str, Any]] = [
            {"name": "nfs-home", "share": True, "volumeName": "nfs-home-pv", "default": True},
            {"name": "datasets", "share": True, "volumeName": "datasets-pv", "default": False}]
        self.configs: dict[str, str] = {}
        self.states: dict[str, str] = {}  # job id -> jobStatus.state of GET /jobs/{id}
        self.posted: list[str] = []
        self.before_v1_0 = False  # a rest-server older than OpenPAI v1.0: no /api/v2/storages


def _handler(fake: FakePai) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: Any, content_type: str = "application/json") -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.removeprefix(API)
            if path == "/info":
                return self._answer(200, {"name": "PAI RESTful API", "version": "v1.8.1", "launcherType": "k8s",
                                          "authnMethod": "basic"})
            if path.startswith("/storages") and fake.before_v1_0:  # express's own 404 for a route it lacks
                return self._answer(404, "Cannot GET " + self.path, "text/html")
            if path == "/storages":
                return self._answer(200, {"storages": fake.storages})
            if path == "/storages/nfs-home":
                return self._answer(200, {"name": "nfs-home", "share": True, "volumeName": "nfs-home-pv",
                                          "default": True, "type": "nfs",
                                          "readOnly": False, "data": {"server": "10.0.0.5", "path": "/export/home"}})
            if path == "/storages/datasets":  # rest-server mounts it read-only (models/v2/storage.js readOnly)
                return self._answer(200, {"name": "datasets", "share": True, "volumeName": "datasets-pv",
                                          "default": False, "type": "nfs", "readOnly": True,
                                          "data": {"server": "10.0.0.5", "path": "/export/datasets"}})
            if path.startswith("/jobs/") and path.count("/") == 2 and path.split("/")[2] in fake.states:
                return self._answer(200, {"name": path.split("/")[2], "jobStatus": {
                    "state": fake.states[path.split("/")[2]], "attemptId": 0}, "taskRoles": {}})
            if path.startswith("/jobs/") and path.endswith("/config"):
                job_id = path.split("/")[2]
                if job_id in fake.configs:
                    return self._answer(200, fake.configs[job_id], "text/yaml")
            return self._answer(404, {"code": "NoJobError", "message": "no"})

        def do_POST(self) -> None:  # noqa: N802
            fake.posted.append(self.path)
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._answer(202, {"message": "ok"})

    return Handler


@pytest.fixture
def pai(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakePai, str]]:
    fake = FakePai()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    monkeypatch.setenv("PAI_TEST_TOKEN", TOKEN)
    try:
        yield fake, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_submit_to_a_real_cluster_checks_the_storage_against_the_user_s_list(
        pai: tuple[FakePai, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fake, url = pai
    profiles.add("pai", url, user="me", token_env="PAI_TEST_TOKEN")
    job = tmp_path / "job.yaml"
    job.write_text(storage_job("exp", "scratch", ["true"]))
    code, _, err = paijob(capsys, "submit", str(job), "-c", "pai")
    assert code == 2 and "storage 'scratch' is not one you may use on cluster pai (yours: nfs-home, datasets)" in err
    assert fake.posted == []
    job.write_text(storage_job("exp", "datasets", ["true"]))  # issue 45: the task's mkdir failed on it
    code, _, err = paijob(capsys, "submit", str(job), "-c", "pai")
    assert code == 2 and "storage 'datasets' is read-only on cluster pai" in err and "set storage to" in err
    assert fake.posted == []
    job.write_text(storage_job("exp", "nfs-home", ["true"]))
    code, out, err = paijob(capsys, "submit", str(job), "-c", "pai")
    assert code == 0, err
    assert fake.posted == [f"{API}/jobs"]


def test_cp_reads_a_real_cluster_s_job_from_where_this_machine_mounts_its_storage(
        pai: tuple[FakePai, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fake, url = pai
    fake.configs["me~exp"] = storage_job("exp", "nfs-home", ["true"])
    mounted = tmp_path / "nfs"
    (mounted / "runs/me/exp/ckpt").mkdir(parents=True)
    (mounted / "runs/me/exp/ckpt/last.pt").write_text("weights")
    code, _, err = paijob(capsys, "cluster", "add", "pai", "--url", url, "--user", "me", "--token-env",
                          "PAI_TEST_TOKEN", "--mount", f"nfs-home={mounted}")
    assert code == 0, err
    dest = tmp_path / "here"
    dest.mkdir()
    code, _, err = paijob(capsys, "cp", "exp:ckpt/last.pt", str(dest), "-c", "pai")
    assert code == 0, err
    assert (dest / "last.pt").read_text() == "weights"


def test_cp_without_a_mount_says_where_the_files_are_and_how_to_get_them(
        pai: tuple[FakePai, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fake, url = pai
    fake.configs["me~exp"] = storage_job("exp", "nfs-home", ["true"])
    fake.configs["me~plain"] = job_yaml("plain", ["true"])
    profiles.add("pai", url, user="me", token_env="PAI_TEST_TOKEN")
    code, _, err = paijob(capsys, "cp", "exp:ckpt", str(tmp_path), "-c", "pai")
    assert code == 2 and err.count("\n") == 1
    assert "on storage nfs-home (nfs 10.0.0.5:/export/home) at runs/me/exp" in err
    assert "/mnt/nfs-home/runs/me/exp" in err and "--mount nfs-home=" in err
    code, _, err = paijob(capsys, "cp", "plain:x", str(tmp_path), "-c", "pai")
    assert code == 2 and "--set storage=NAME" in err


def test_a_mount_must_name_a_storage_and_an_absolute_folder(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("nfs-home", "nfs-home=relative/dir", "=/mnt/x"):
        code, _, err = paijob(capsys, "cluster", "add", "pai", "--url", "https://pai.example.com", "--mount", bad)
        assert code == 2 and "--mount" in err


def test_a_storage_that_is_not_shared_is_read_under_the_user_s_own_folder(
        pai: tuple[FakePai, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """rest-server mounts a storage with share: false at its <user> folder (subPath), so /mnt/NAME/x in a
    task is <storage>/<user>/x on the storage."""
    fake, url = pai
    fake.storages[0]["share"] = False
    fake.configs["me~exp"] = storage_job("exp", "nfs-home", ["true"])
    mounted = tmp_path / "nfs"
    (mounted / "me/runs/me/exp").mkdir(parents=True)
    (mounted / "me/runs/me/exp/out.txt").write_text("mine")
    profiles.add("pai", url, user="me", token_env="PAI_TEST_TOKEN", mounts={"nfs-home": str(mounted)})
    code, _, err = paijob(capsys, "cp", "exp:out.txt", str(tmp_path / "out.txt"), "-c", "pai")
    assert code == 0, err
    assert (tmp_path / "out.txt").read_text() == "mine"


def test_horovod_passes_the_output_folder_on_to_every_rank() -> None:
    job = yaml.safe_load(render_template("horovod", sets=["script=train.py", "instances=2", "storage=nfs-home",
                                                          "image=registry.example.net/horovod:1"]).text)
    (launch,) = [c for c in job["taskRoles"]["master"]["commands"] if c.startswith("mpirun") and "train" in c]
    assert " -x PAIJOB_OUTPUT_DIR " in launch
    plain = yaml.safe_load(render_template("horovod", sets=["script=train.py", "instances=2",
                                                            "image=registry.example.net/horovod:1"]).text)
    assert all("PAIJOB_OUTPUT_DIR" not in c for c in plain["taskRoles"]["master"]["commands"])


def test_a_plugin_storage_beside_the_job_s_own_extras_storages_is_refused_not_silently_unmounted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 45: rest-server converts the plugin only when extras.storages is absent, so a job with both lost the
    plugin's storage (its results written to the container's disk) while validate said ok."""
    job = yaml.safe_load(storage_job("both", "nfs-home", ["true"]))
    job["extras"] = {"storages": [{"name": "datasets", "mountPath": "/data"}],
                     "com.microsoft.pai.runtimeplugin": [plugin("nfs-home")]}
    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    code, out, err = paijob(capsys, "validate", str(path))
    assert code != 0 and "teamwise_storage names storage 'nfs-home', which is not mounted" in out + err
    merged = {**job, "extras": {"storages": [{"name": "datasets", "mountPath": "/data"}, mount("nfs-home")]}}
    path.write_text(yaml.safe_dump(merged, sort_keys=False))
    code, out, err = paijob(capsys, "validate", str(path))
    assert "not mounted" not in out + err  # both mounted: the user's own storage and the route's
    assert job_storages(merged) == ["datasets", "nfs-home"] and job_route(merged) is not None


def test_cp_tells_a_storage_not_mounted_where_the_profile_says_from_no_such_job(
        pai: tuple[FakePai, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 45: a SUCCEEDED job's cp said "the job never started on this cluster, or the id is wrong" when the
    storage was simply not mounted at the profile's --mount path."""
    fake, url = pai
    fake.configs["me~exp"] = storage_job("exp", "nfs-home", ["true"])
    empty = tmp_path / "empty-mount-point"
    empty.mkdir()
    profiles.add("pai", url, user="me", token_env="PAI_TEST_TOKEN", mounts={"nfs-home": str(empty)})
    code, _, err = paijob(capsys, "cp", "exp:ckpt", str(tmp_path), "-c", "pai")
    assert code == 2 and "this machine does not mount storage nfs-home at" in err and "an empty folder" in err
    assert "never started" not in err and err.count("\n") == 1


def test_a_mount_point_is_judged_by_the_mount_table(tmp_path: Path) -> None:
    from paijob.copyout import mount_problem

    point = tmp_path / "pai-home"
    point.mkdir()
    table = tmp_path / "mounts"
    table.write_text(f"10.0.0.9:/export/other {point} nfs4 rw 0 0\n")
    assert "is a mount of 10.0.0.9:/export/other, not of the storage (10.0.0.5:/export/home)" in str(
        mount_problem(str(point), "10.0.0.5:/export/home", str(table)))
    table.write_text(f"10.0.0.5:/export/home {point} nfs4 rw 0 0\n")
    assert mount_problem(str(point), "10.0.0.5:/export/home", str(table)) is None
    assert "does not exist" in str(mount_problem(str(tmp_path / "missing"), None, str(table)))
    (point / "a-file").write_text("x")  # a folder with files, nothing mounted: maybe a folder inside a mount
    table.write_text("")
    assert mount_problem(str(point), None, str(table)) is None


def test_cluster_add_mount_checks_the_folder_and_the_storage_name(
        pai: tuple[FakePai, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 45: `--mount nosuch=...` and `--mount NAME=/does/not/exist` were accepted silently."""
    fake, url = pai
    code, _, err = paijob(capsys, "cluster", "add", "pai", "--url", url, "--user", "me", "--token-env",
                          "PAI_TEST_TOKEN", "--mount", f"nfs-home={tmp_path / 'does-not-exist'}")
    assert code == 2 and "is not a folder on this machine" in err
    code, _, err = paijob(capsys, "cluster", "add", "pai", "--url", url, "--user", "me", "--token-env",
                          "PAI_TEST_TOKEN", "--mount", f"nosuch={tmp_path}")
    assert code == 2 and "has no storage nosuch of yours (yours: nfs-home, datasets)" in err
    assert not profiles.config_path().exists() or "pai" not in profiles.load()["clusters"]


def test_where_a_real_cluster_job_s_results_are_and_what_they_are_without_copying(
        pai: tuple[FakePai, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 45: status showed the output folder for local jobs only, and nothing listed results without copying."""
    from paijob import api

    fake, url = pai
    fake.configs["me~exp"] = storage_job("exp", "nfs-home", ["true"])
    profiles.add("pai", url, user="me", token_env="PAI_TEST_TOKEN")
    where = api.output_location("pai", "me~exp")
    assert where is not None and "storage nfs-home, folder runs/me/exp (in its tasks /mnt/nfs-home/runs/me/exp)" in where
    assert "not mounted on this machine" in where and "--mount nfs-home=PATH" in where
    mounted = tmp_path / "nfs"
    (mounted / "runs/me/exp/ckpt").mkdir(parents=True)
    (mounted / "runs/me/exp/ckpt/last.pt").write_text("weights")
    (mounted / "runs/me/exp/summary.json").write_text("{}")
    profiles.add("pai", url, user="me", token_env="PAI_TEST_TOKEN", mounts={"nfs-home": str(mounted)})
    assert f"here {mounted}/runs/me/exp" in str(api.output_location("pai", "me~exp"))
    code, out, err = paijob(capsys, "cp", "exp", "--list", "-c", "pai")
    assert code == 0, err
    assert out.split("\n")[:3] == ["    folder  ckpt/", "       7 B  ckpt/last.pt", "       2 B  summary.json"]
    assert not any(p.name == "last.pt" for p in Path.cwd().iterdir())  # nothing copied
    code, _, err = paijob(capsys, "cp", "exp", str(tmp_path), "--list", "-c", "pai")
    assert code == 2 and "without DEST" in err


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_the_local_cluster_answers_info_to_any_method_as_rest_server_does(server: LocalServer, method: str) -> None:
    """rest-server mounts /info with router.use, so a POST /info is the same answer, not a 405 (issue 45)."""
    answer = requests.request(method, f"{server.url}{API}/info", headers={"Authorization": f"Bearer {TOKEN}"},
                              timeout=10)
    assert answer.status_code == 200 and answer.json()["launcherType"] == "k8s"


def test_a_cluster_without_the_storage_route_is_too_old_for_storages(
        pai: tuple[FakePai, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 54 item 4: a rest-server before OpenPAI v1.0 has no /api/v2/storages: the raw 404 was shown."""
    fake, url = pai
    fake.before_v1_0 = True
    profiles.add("pai", url, user="me", token_env="PAI_TEST_TOKEN")
    job = tmp_path / "job.yaml"
    job.write_text(storage_job("exp", "nfs-home", ["true"]))
    code, _, err = paijob(capsys, "submit", str(job), "-c", "pai")
    assert code != 0 and "too old for storages (needs OpenPAI v1.0+)" in err and err.count("\n") == 1
    assert fake.posted == []


def test_cp_of_a_finished_job_without_its_folder_says_why_not_no_such_job(
        pai: tuple[FakePai, str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 54 item 4: a SUCCEEDED job whose folder is missing on a good mount said "the job never started on
    this cluster, or the id is wrong"."""
    fake, url = pai
    fake.configs["me~exp"] = storage_job("exp", "nfs-home", ["true"])
    fake.states["me~exp"] = "SUCCEEDED"
    mounted = tmp_path / "nfs"
    (mounted / "runs/me/other").mkdir(parents=True)  # the storage, with another job's folder
    table = tmp_path / "mounts"
    table.write_text(f"10.0.0.5:/export/home {mounted} nfs4 rw 0 0\n")
    profiles.add("pai", url, user="me", token_env="PAI_TEST_TOKEN", mounts={"nfs-home": str(mounted)})
    from paijob import copyout

    real = copyout.mount_problem
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(copyout, "mount_problem", lambda mount, nfs=None: real(mount, nfs, str(table)))
        code, _, err = paijob(capsys, "cp", "exp:ckpt", str(tmp_path), "-c", "pai")
        assert code == 2 and "job me~exp SUCCEEDED, and its folder was removed since" in err, err
        assert "never started" not in err and err.count("\n") == 1
        fake.states["me~exp"] = "RUNNING"
        code, _, err = paijob(capsys, "cp", "exp:ckpt", str(tmp_path), "-c", "pai")
        assert code == 2 and "is RUNNING and has not made it yet" in err
        code, _, err = paijob(capsys, "cp", "gone:ckpt", str(tmp_path), "-c", "pai")
        assert code == 2 and "reading config of me~gone on pai" in err and "`paijob list`" in err


def test_a_folder_with_files_on_this_machine_s_own_disk_is_not_the_storage(tmp_path: Path) -> None:
    """Issue 54 item 4: a non-empty folder that nothing is mounted on passed as the storage (a copy, or the
    profile naming the wrong folder); inside an NFS mount it still may be the storage's own folder."""
    from paijob.copyout import mount_problem

    folder = tmp_path / "copy-of-results"
    (folder / "runs").mkdir(parents=True)
    table = tmp_path / "mounts"
    table.write_text("/dev/sda1 / ext4 rw 0 0\ntmpfs /run tmpfs rw 0 0\n")
    problem = mount_problem(str(folder), None, str(table))
    assert problem is not None and "it is a folder on this machine's own disk (ext4 /dev/sda1, mounted at /)" in problem
    table.write_text(f"/dev/sda1 / ext4 rw 0 0\n10.0.0.5:/export {tmp_path} nfs4 rw 0 0\n")
    assert mount_problem(str(folder), None, str(table)) is None  # a folder inside the NFS mount
