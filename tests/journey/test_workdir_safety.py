"""What a workdir snapshot must never carry or do: secrets, links out of the tree, special files, silent loss.

On a real OpenPAI cluster the job text (the snapshot included) is readable by every user with a token
(``GET /api/v2/jobs/:name/config``), so each case here is a leak or a hang that once happened.
"""

from __future__ import annotations

import base64
import io
import os
import re
import tarfile
import threading
from pathlib import Path

import pytest
import yaml

from paijob import api, cli, workdir
from paijob.workdir import scan

SECRET_PATHS = [".env", ".env.production", "prod.env", ".envrc", ".netrc", ".pypirc", ".git-credentials",
                ".npmrc", ".pgpass", ".ssh/id_rsa", ".ssh/config", "deploy/.aws/credentials", ".azure/accessTokens.json",
                ".config/gcloud/application_default_credentials.json", ".gcloud/key.json", ".kube/config",
                "kubeconfig", "cluster.kubeconfig", ".docker/config.json", "certs/server.pem", "tls/server.key",
                "keys/id_ed25519", "id_ecdsa", "credentials.json", "conf/client_secret_123.json",
                "my-service-account.json", "store.p12", "infra/terraform.tfstate", ".vault-token", ".ENV",
                "Credentials.JSON"]


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def members(snap: workdir.Snapshot) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(snap.archive)) as tar:
        return {m.name: m for m in tar.getmembers()}


def all_bytes(snap: workdir.Snapshot) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(snap.archive)) as tar:
        return b"".join((tar.extractfile(m) or io.BytesIO()).read() for m in tar.getmembers() if m.isfile())


@pytest.mark.parametrize("rel", SECRET_PATHS)
def test_a_secret_looking_path_is_never_shipped_and_is_listed(tmp_path: Path, rel: str) -> None:
    make_tree(tmp_path, {"train.py": "print(1)\n", rel: "TOPSECRET-1234\n"})
    snap = workdir.snapshot(tmp_path)
    assert snap.files == ("train.py",) and b"TOPSECRET" not in all_bytes(snap)
    listed = [line for line in snap.left_out if "secret-looking" in line]
    top = rel.split("/")[0]
    assert len(listed) == 1 and (rel in listed[0] or f"{top}/" in listed[0] or rel.rsplit("/", 1)[0] in listed[0])


def test_all_secrets_left_out_are_listed_in_one_line(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "", ".env": "A=1", ".netrc": "machine x", "k/id_rsa": "key"})
    lines = [line for line in workdir.snapshot(tmp_path).left_out if "secret" in line]
    assert len(lines) == 1 and all(name in lines[0] for name in (".env", ".netrc", "k/id_rsa"))


def test_a_key_under_an_innocent_name_is_left_out_by_its_content(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "", "notes.txt": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n",
                         "gcp.json": '{"type": "service_account", "private_key": "-----BEGIN"}'})
    snap = workdir.snapshot(tmp_path)
    assert snap.files == ("train.py",)
    assert any("notes.txt" in line and "gcp.json" in line for line in snap.left_out)


def test_a_secret_named_exactly_in_paijobignore_is_shipped(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "", "config/.env": "A=1\n", ".env": "B=2\n", "certs/ca.pem": "pub",
                         ".paijobignore": "!config/.env\n!certs/ca.pem\n!*.key\n", "x.key": "k"})
    snap = workdir.snapshot(tmp_path)
    assert set(snap.files) == {".paijobignore", "certs/ca.pem", "config/.env", "train.py"}  # a glob names nothing


def test_a_gitignore_reinclude_does_not_name_a_secret(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "", ".env": "B=2\n", ".gitignore": "!.env\n", ".paijobignore": ""})
    assert ".env" not in workdir.snapshot(tmp_path).files


@pytest.mark.parametrize("where", ["home", "above-home", ".ssh", ".aws/sub", ".config/gcloud"])
def test_a_workdir_that_is_home_or_a_credentials_folder_is_refused(tmp_path: Path, where: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home" / "me"
    make_tree(home, {"project/train.py": "", ".ssh/id_rsa": "k", ".aws/sub/x": "", ".config/gcloud/x": ""})
    monkeypatch.setenv("HOME", str(home))
    folder = {"home": home, "above-home": home.parent}.get(where, home / where)
    with pytest.raises(workdir.WorkdirError, match="home folder|credentials folder"):
        workdir.snapshot(folder)
    assert workdir.snapshot(home / "project").files == ("train.py",)


def test_a_values_file_naming_ssh_as_workdir_ships_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    make_tree(home, {".ssh/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\n"})
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.yaml").write_text("workdir: ~/.ssh\nscript: train.py\n")
    with pytest.raises(workdir.WorkdirError, match="credentials folder"):
        api.prepare(api.JobRequest("ddp", values=[str(tmp_path / "v.yaml")], cluster="local"))
    assert not (tmp_path / "state" / "snapshots").exists()


def test_links_inside_ship_as_relative_links_and_links_out_are_listed(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "p", {"train.py": "x", "data/a.csv": "1", ".paijobignore": ""})
    outside = make_tree(tmp_path / "big", {"weights.bin": "w" * 50000})
    (root / "abs_inside").symlink_to(root / "data" / "a.csv")
    (root / "data" / "up").symlink_to("../train.py")
    (root / "weights").symlink_to(outside / "weights.bin")
    (root / "home").symlink_to(outside)
    snap = workdir.snapshot(root)
    tar = members(snap)
    assert tar["abs_inside"].issym() and tar["abs_inside"].linkname == "data/a.csv"
    assert tar["data/up"].issym() and tar["data/up"].linkname == "../train.py"
    assert "weights" not in tar and "home" not in tar
    assert snap.size == 2 and "w" * 100 not in all_bytes(snap).decode()  # the size counts what is shipped
    line = next(line for line in snap.left_out if "link(s) out" in line)
    assert f"weights -> {outside / 'weights.bin'}" in line and "home ->" in line


def test_a_link_out_named_exactly_ships_its_target(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "p", {"train.py": "x", ".paijobignore": "!shared/config.yaml\n!lib\n"})
    outside = make_tree(tmp_path / "o", {"config.yaml": "a: 1\n", "lib/m.py": "M", "lib/.env": "S=1"})
    (root / "shared").mkdir()
    (root / "shared" / "config.yaml").symlink_to(outside / "config.yaml")
    (root / "lib").symlink_to(outside / "lib")
    snap = workdir.snapshot(root)
    tar = members(snap)
    assert tar["shared/config.yaml"].isfile() and tar["lib/m.py"].isfile() and "lib/.env" not in tar


def test_a_fifo_socket_or_device_is_skipped_without_opening(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "", ".paijobignore": ""})
    os.mkfifo(tmp_path / "pipe")  # opening it for reading would block forever
    (tmp_path / "null").symlink_to("/dev/null")  # a link out: listed, not opened
    snap = workdir.snapshot(tmp_path)
    assert snap.files == (".paijobignore", "train.py")
    assert any("pipe (FIFO)" in line for line in snap.left_out)


def test_a_file_replaced_by_a_fifo_while_packing_is_an_error_not_a_hang(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    make_tree(tmp_path, {"train.py": "", "data.csv": "1"})
    walk = scan.walk

    def walk_then_swap(*args: object, **kwargs: object) -> scan.Scan:
        found = walk(*args, **kwargs)  # type: ignore[arg-type]
        (tmp_path / "data.csv").unlink()
        os.mkfifo(tmp_path / "data.csv")
        return found

    monkeypatch.setattr(scan, "walk", walk_then_swap)
    errors: list[BaseException] = []
    worker = threading.Thread(target=lambda: _capture(errors, lambda: workdir.snapshot(tmp_path)), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "packing blocked on a FIFO"
    assert isinstance(errors[0], workdir.WorkdirError) and "data.csv is no longer a regular file" in str(errors[0])


def _capture(errors: list[BaseException], call: object) -> None:
    try:
        call()  # type: ignore[operator]
    except BaseException as error:  # noqa: BLE001
        errors.append(error)


def test_a_file_that_changes_while_packing_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_tree(tmp_path, {"train.py": "", "log.txt": "x" * 100})
    walk = scan.walk

    def walk_then_grow(*args: object, **kwargs: object) -> scan.Scan:
        found = walk(*args, **kwargs)  # type: ignore[arg-type]
        (tmp_path / "log.txt").write_text("y" * 10)
        return found

    monkeypatch.setattr(scan, "walk", walk_then_grow)
    packed = workdir.snapshot(tmp_path)  # the file is read as it is when packed: consistent
    assert packed.size == 10 and all_bytes(packed).count(b"y") == 10


def deny(monkeypatch: pytest.MonkeyPatch, denied: Path) -> None:
    """Make ``denied`` unreadable whoever runs the tests (root reads anything chmod forbids)."""
    real_open, real_scandir = os.open, os.scandir

    def guarded_open(path: str, *args: object, **kwargs: object) -> int:
        if Path(path) == denied:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    def guarded_scandir(path: str) -> object:
        if Path(path) == denied:
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "scandir", guarded_scandir)
    denied.chmod(0)


@pytest.mark.parametrize("unreadable", ["secret.txt", "private"])
def test_an_unreadable_file_or_folder_is_an_error_naming_it_or_a_listed_skip(tmp_path: Path, unreadable: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    make_tree(tmp_path, {"train.py": "", "secret.txt": "x", "private/a.txt": "y"})
    deny(monkeypatch, tmp_path / unreadable)
    with pytest.raises(workdir.WorkdirError, match=rf"{unreadable} .*--skip-unreadable"):
        workdir.snapshot(tmp_path)
    snap = workdir.snapshot(tmp_path, skip_unreadable=True)
    assert unreadable not in snap.files and "train.py" in snap.files
    assert any("unreadable" in line and unreadable in line for line in snap.left_out)
    (tmp_path / unreadable).chmod(0o755)


def test_dry_run_of_a_project_holding_secrets_shows_none_of_their_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {".env": "AWS_SECRET=SEKRIT-env", ".netrc": "password SEKRIT-netrc", ".ssh/id_rsa": "SEKRIT-ssh",
               "credentials.json": '{"k": "SEKRIT-cred"}', "conf/key.pem": "SEKRIT-pem",
               "notes.txt": "-----BEGIN RSA PRIVATE KEY-----\nSEKRIT-sniffed\n"}
    project = make_tree(tmp_path / "proj", {"train.py": "print('hi')\n", **secrets})
    monkeypatch.setenv("PAI_CLUSTER_URL", "https://pai.example.com")
    monkeypatch.setenv("PAI_TOKEN", "t")
    monkeypatch.setenv("PAI_USER", "alice")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    code = cli.main(["submit", "ddp", "--set", "script=train.py", "--workdir", str(project), "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "SEKRIT" not in out + err
    job = yaml.safe_load(out[out.index("protocolVersion"):] if "protocolVersion" in out else out)
    archive = base64.b64decode(job["parameters"][workdir.PARAMETER])
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert [m.name for m in tar.getmembers() if not m.isdir()] == ["train.py"]
        shipped = b"".join((tar.extractfile(m) or io.BytesIO()).read() for m in tar.getmembers())
    assert b"SEKRIT" not in shipped
    assert re.search(r"left out 6 secret-looking path\(s\)", err)


def test_a_file_removed_while_the_folder_is_walked_is_simply_not_shipped(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    make_tree(tmp_path, {"train.py": "", "tmp.lock": "", ".paijobignore": ""})
    real_scandir = os.scandir

    class Listed(list):  # type: ignore[type-arg]
        def __enter__(self) -> Listed:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    def listing_then_remove(path: str) -> Listed:
        with real_scandir(path) as listing:
            entries = Listed(listing)
        (tmp_path / "tmp.lock").unlink(missing_ok=True)  # an editor or a build removes it meanwhile
        return entries

    monkeypatch.setattr(os, "scandir", listing_then_remove)
    assert workdir.snapshot(tmp_path).files == (".paijobignore", "train.py")
