"""A job's own storage list and the storage route (issue 54 items 1-4): refused before the queue with what to
write, merged by `render JOB.yaml --set storage=`, and mounted on the local cluster only as the list says
(rest-server k8s.js:599-616, 1044-1102), so a job that would lose its output on OpenPAI loses it on the laptop
too and `status` / `cp` say why; `status` lists a job's results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_helpers import job_yaml
from suite_helpers import paijob

from paijob import api
from paijob.common.storage_route import add_route, mount, output_export, route_problem
from paijob.local import daemon, layout
from paijob.local import storage as local_storage
from paijob.openpai.storages import Storage, mounts, pod_problems

ROUTE_TAIL = "does not mount"


def route_job(name: str, storage: str, commands: list[str], storages: Any = None, sub: str = "runs") -> dict[str, Any]:
    """A job on the storage route (the export line, its storage mounted at /mnt/NAME), its list replaced by
    ``storages`` when given."""
    job = yaml.safe_load(job_yaml(name, [output_export(storage, sub), *commands]))
    job["extras"] = {"storages": [mount(storage)] if storages is None else storages}
    return job


def write(path: Path, job: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(job, sort_keys=False))
    return path


# --------------------------------------------------------------------------- what the list must be (pure)


@pytest.mark.parametrize(("storages", "where", "says"), [
    ([{"name": "nfs-home", "mountPath": "/mnt/data"}], ("extras", "storages", 0, "mountPath"),
     "storage nfs-home is mounted at /mnt/data, not /mnt/nfs-home"),
    ([{"name": "other"}], ("extras", "storages"),
     "extras.storages mounts other but not storage nfs-home"),
    ([{"name": "other", "mountPath": "/mnt/nfs-home"}], ("extras", "storages"),
     "add {name: nfs-home, mountPath: /mnt/nfs-home} to extras.storages and move storage other off /mnt/nfs-home"),
    ([], ("extras", "storages"), "an empty list mounts only your default storages (rest-server k8s.js:1067-1075)"),
])
def test_a_list_that_moves_drops_or_replaces_the_route_s_storage_says_what_to_write(
        storages: list[Any], where: tuple[Any, ...], says: str) -> None:
    job = route_job("moved", "nfs-home", ["true"], storages)
    problem = route_problem(job)
    assert problem is not None and problem[0] == where and says in problem[1], problem
    assert "{name: nfs-home, mountPath: /mnt/nfs-home}" in problem[1] or "write mountPath: /mnt/nfs-home" in problem[1]
    assert route_problem(route_job("kept", "nfs-home", ["true"])) is None
    both = route_job("both", "nfs-home", ["true"], [{"name": "data", "mountPath": "/data"}, mount("nfs-home")])
    assert route_problem(both) is None
    plain = yaml.safe_load(job_yaml("plain", ["true"]))
    assert route_problem(plain) is None  # no route: the list is the user's own business
    gone = route_job("gone", "nfs-home", ["true"])
    del gone["extras"]
    assert route_problem(gone) == (("extras",), route_problem(gone)[1]) and "mounts no storage" in route_problem(gone)[1]


@pytest.mark.parametrize(("entries", "says"), [
    ([{"name": "a"}, {"name": "a", "mountPath": "/mnt/b"}], "storage 'a' is listed twice"),
    ([{"name": "a"}, {"name": "b", "mountPath": "/mnt/a"}], "are both mounted at /mnt/a"),
    ([{"name": "a", "mountPath": "/etc"}], "mountPath /etc would hide /etc"),
    ([{"name": "a", "mountPath": "../../x"}], "mountPath '../../x' is not a plain absolute path"),
    ([{"name": "a", "mountPath": "/mnt/../etc"}], "is not a plain absolute path"),
    ([{"name": "a", "mountPath": "/usr/local"}], "would hide /usr/local/pai"),
    ([{"name": "a", "mountPath": "/usr/local/pai/logs"}], "is inside /usr/local/pai"),
    ([{"name": "a", "mountPath": "/proc/x"}], "is inside /proc"),
    ([{"name": "A_b"}], "makes the volume name 'A_b-volume', which Kubernetes refuses"),
])
def test_what_kubernetes_refuses_after_the_wait_is_refused_before_it(entries: list[Any], says: str) -> None:
    """Issue 54 item 2 (two volumes of one name, two mounts on one path: ValidateVolumes / ValidateVolumeMounts)
    and issue 55 item 6 (mountPath /etc or ../../x validated)."""
    found = list(pod_problems({"extras": {"storages": entries}}))
    assert len(found) == 1 and says in found[0][1], found
    assert list(pod_problems({"extras": {"storages": [{"name": "a"}, {"name": "b", "mountPath": "/data/b"}]}})) == []


def test_rest_server_s_volumes_for_a_list_the_plugin_and_an_empty_list() -> None:
    yours = {"shared": Storage("shared", True, False), "home": Storage("home", False, True)}
    listed = {"extras": {"storages": [{"name": "shared", "mountPath": "/mnt/out", "share": False},
                                      {"name": "home"}, {"name": "nosuch"}]}}
    assert [tuple(m) for m in mounts(listed, "me", yours)] == [
        ("shared", "/mnt/out", "", False),  # share is the storage's own, whatever the job wrote (k8s.js:1092)
        ("home", "/mnt/home", "me", False)]  # not shared: the user's folder (subPath, k8s.js:607)
    assert [m.name for m in mounts({"extras": {"storages": []}}, "me", yours)] == ["home"]  # the defaults
    plugin = {"extras": {"com.microsoft.pai.runtimeplugin": [
        {"plugin": "teamwise_storage", "parameters": {"storageConfigNames": ["shared"]}}]}}
    assert [m.mount_path for m in mounts(plugin, "me", yours)] == ["/mnt/shared"]
    assert mounts({"extras": {}}, "me", yours) == [] and mounts({}, "me", yours) == []


# --------------------------------------------------------------------------- validate, submit, render


def test_validate_and_submit_refuse_a_list_that_loses_the_output_folder(
        capsys: pytest.CaptureFixture[str], local: Path, tmp_path: Path) -> None:
    job = write(tmp_path / "moved.yaml", route_job("moved", local_storage.NAME, ["true"],
                                                   [{"name": local_storage.NAME, "mountPath": "/mnt/data"}]))
    code, out, err = paijob(capsys, "validate", str(job))
    assert code == 2 and "extras.storages[0].mountPath: storage shared is mounted at /mnt/data" in out + err
    assert "write mountPath: /mnt/shared" in out + err
    code, _, err = paijob(capsys, "submit", str(job), "-c", "local")
    assert code == 2 and "write mountPath: /mnt/shared" in err and "Traceback" not in err
    code, _, err = paijob(capsys, "status", "moved", "-c", "local")
    assert code != 0  # refused before the queue
    twice = write(tmp_path / "twice.yaml", route_job("twice", local_storage.NAME, ["true"],
                                                     [mount(local_storage.NAME), mount(local_storage.NAME)]))
    code, out, err = paijob(capsys, "validate", str(twice))
    assert code == 2 and "Duplicate value" in out + err


def test_render_of_a_job_file_with_storage_merges_the_route_or_says_what_to_edit(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    own = yaml.safe_load(job_yaml("own", ["python train.py"]))
    own["extras"] = {"storages": [{"name": "datasets", "mountPath": "/data"}]}
    path = write(tmp_path / "own.yaml", own)
    code, out, err = paijob(capsys, "render", str(path), "--set", "storage=nfs-home", "--set", "storagePath=team")
    assert code == 0, err
    merged = yaml.safe_load(out)
    assert merged["extras"]["storages"] == [{"name": "datasets", "mountPath": "/data"}, mount("nfs-home")]
    assert merged["taskRoles"]["worker"]["commands"] == [output_export("nfs-home", "team"), "python train.py"]
    again = write(tmp_path / "again.yaml", merged)
    code, out2, err = paijob(capsys, "render", str(again), "--set", "storage=nfs-home", "--set", "storagePath=team")
    assert code == 0 and out2 == again.read_text()  # on the route already: the file as it is
    own["extras"] = {"storages": []}
    code, _, err = paijob(capsys, "render", str(write(path, own)), "--set", "storage=nfs-home")
    assert code == 2 and "write storages: [{name: nfs-home, mountPath: /mnt/nfs-home}]" in err
    own["extras"] = {"storages": [{"name": "nfs-home", "mountPath": "/mnt/data"}]}
    code, _, err = paijob(capsys, "render", str(write(path, own)), "--set", "storage=nfs-home")
    assert code == 2 and "write mountPath: /mnt/nfs-home for it" in err
    code, _, err = paijob(capsys, "render", str(again), "--set", "storage=other")
    assert code == 2 and "already on storage nfs-home" in err and output_export("other", "paijob") in err
    code, _, err = paijob(capsys, "render", str(again), "--set", "instances=2")
    assert code == 2 and "except --set storage=NAME" in err


def test_add_route_refuses_a_job_that_sets_its_output_folder_itself() -> None:
    job = yaml.safe_load(job_yaml("self", ["export PAIJOB_OUTPUT_DIR=/data/out", "python t.py"]))
    with pytest.raises(api.PaijobError, match="set PAIJOB_OUTPUT_DIR themselves"):
        add_route(job, "nfs-home")


# --------------------------------------------------------------------------- the local cluster mounts the list


def _submit_raw(text: str) -> str:
    """Sent as any OpenPAI client sends it (the JS SDK, curl): the server's own checks only."""
    client = api.connect("local", start_local=True)
    return client.submit(text)


def test_a_job_whose_list_moves_its_storage_loses_its_output_on_the_laptop_too_and_status_says_why(
        capsys: pytest.CaptureFixture[str], local: Path) -> None:
    job = route_job("lost", local_storage.NAME, ['echo result > "$PAIJOB_OUTPUT_DIR/result.txt"',
                                                 'test -d "$PAIJOB_STORAGE_MOUNT/data"'],
                    [{"name": local_storage.NAME, "mountPath": "/mnt/data"}])
    job_id = _submit_raw(yaml.safe_dump(job, sort_keys=False))  # rest-server takes it: so does the local one
    client = api.connect("local", start_local=False)
    assert client.wait(job_id, poll=0.2, timeout=60)["jobStatus"]["state"] == "SUCCEEDED"
    user = daemon.local_user()
    on_storage = layout.storage(local, local_storage.NAME) / "runs" / user / "lost"
    assert not on_storage.exists()  # as on OpenPAI: written to the task's own disk
    code, out, err = paijob(capsys, "status", "lost", "-c", "local")
    assert code == 0, err
    (line,) = [row for row in out.splitlines() if row.startswith("results ")]
    assert "results    none: it was never on the storage: storage shared is mounted at /mnt/data" in line
    code, _, err = paijob(capsys, "cp", "lost:result.txt", ".", "-c", "local")
    assert code == 2 and "does not exist: it was never on the storage" in err and "never started" not in err


def test_a_per_user_storage_is_the_user_s_folder_and_an_empty_list_mounts_the_defaults(
        capsys: pytest.CaptureFixture[str], local: Path, tmp_path: Path) -> None:
    user = daemon.local_user()
    job = route_job("mine", local_storage.HOME, ['echo first > "$PAIJOB_OUTPUT_DIR/a.txt"',
                                                 'echo second-and-longer > "$PAIJOB_OUTPUT_DIR/b.txt"',
                                                 'touch -d "2020-01-01 00:00" "$PAIJOB_OUTPUT_DIR/a.txt"',
                                                 'test ! -e "$PAIJOB_STORAGE_MOUNT/shared"'])
    code, _, err = paijob(capsys, "run", str(write(tmp_path / "mine.yaml", job)), "--local", "--name", "mine")
    assert code == 0, err
    folder = layout.storage(local, local_storage.HOME) / user / "runs" / user / "mine"
    assert (folder / "b.txt").read_text() == "second-and-longer\n"
    code, out, err = paijob(capsys, "status", "mine", "-c", "local")
    assert code == 0, err
    listed = out.split("results    ", 1)[1].splitlines()
    assert listed[0] == "2 file(s), newest first:"
    assert [row.split()[-1] for row in listed[1:3]] == ["b.txt", "a.txt"]  # newest first (a.txt made old)
    assert listed[1].split()[:2] == ["18", "B"]
    code, _, err = paijob(capsys, "cp", "mine:a.txt", str(tmp_path), "-c", "local")
    assert code == 0 and (tmp_path / "a.txt").read_text() == "first\n"
    defaults = yaml.safe_load(job_yaml("defaults", ['echo x > "$PAIJOB_STORAGE_MOUNT/home/from-default.txt"',
                                                    'test ! -e "$PAIJOB_STORAGE_MOUNT/shared"']))
    defaults["extras"] = {"storages": []}
    code, _, err = paijob(capsys, "run", str(write(tmp_path / "defaults.yaml", defaults)), "--local",
                          "--name", "defaults")
    assert code == 0, err
    assert (layout.storage(local, local_storage.HOME) / user / "from-default.txt").read_text() == "x\n"


def test_a_storage_mounted_outside_mnt_is_told_in_the_task_log(capsys: pytest.CaptureFixture[str], local: Path,
                                                               tmp_path: Path) -> None:
    job = yaml.safe_load(job_yaml("outside", ['test ! -e "$PAIJOB_STORAGE_MOUNT/shared"']))
    job["extras"] = {"storages": [{"name": local_storage.NAME, "mountPath": "/data/shared"}]}
    code, out, err = paijob(capsys, "run", str(write(tmp_path / "outside.yaml", job)), "--local", "--name", "outside")
    assert code == 0, err
    assert "storage shared is mounted at /data/shared on OpenPAI; a local task sees storages only under /mnt" in out


def test_cp_of_a_job_that_has_not_ended_or_does_not_exist_says_so(capsys: pytest.CaptureFixture[str],
                                                                  local: Path) -> None:
    code, _, err = paijob(capsys, "cp", "nosuchjob:x", ".", "-c", "local")
    assert code == 2 and "cluster local has no job" in err
