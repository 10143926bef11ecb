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
from suite_helpers import make_tree

from paijob import api, cli, workdir
from paijob.workdir import scan

SECRET_PATHS = [".env", ".env.production", "prod.env", ".envrc", ".netrc", ".pypirc", ".git-credentials",
                ".npmrc", ".pgpass", ".ssh/id_rsa", ".ssh/config", "deploy/.aws/credentials", ".azure/accessTokens.json",
                ".config/gcloud/application_default_credentials.json", ".gcloud/key.json", ".kube/config",
                "kubeconfig", "cluster.kubeconfig", ".docker/config.json", "certs/server.pem", "tls/server.key",
                "keys/id_ed25519", "id_ecdsa", "credentials.json", "conf/client_secret_123.json",
                "my-service-account.json", "store.p12", "infra/terraform.tfstate", ".vault-token", ".ENV",
                "Credentials.JSON", ".huggingface/token", ".cache/huggingface/token", "hf/huggingface/stored_tokens",
                "deploy/.docker/config.json", "tools/.config/gh/hosts.yml"]


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


def test_a_key_inside_a_big_file_is_found(tmp_path: Path) -> None:
    filler = ("x" * 99 + "\n").encode() * 30_000  # 3 MB of text, the key in the middle, across a read chunk
    key = b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----\n"
    cut = workdir.pack.CHUNK * 2 - 10
    (tmp_path / "train.py").write_text("")
    (tmp_path / "notes.txt").write_bytes(filler[:cut] + key + filler[cut:])
    snap = workdir.snapshot(tmp_path)
    assert snap.files == ("train.py",) and b"OPENSSH" not in all_bytes(snap)
    assert any("notes.txt (holds a private key" in line for line in snap.left_out)


@pytest.mark.parametrize("wrap", [0, 76, 64])
def test_a_base64_encoded_key_file_is_found(tmp_path: Path, wrap: int) -> None:
    pem = b"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"
    for lead in range(3):  # every alignment of the marker inside the base64 text
        encoded = base64.b64encode(b"#" * lead + pem).decode()
        if wrap:
            encoded = "\n".join(encoded[i:i + wrap] for i in range(0, len(encoded), wrap))
        (tmp_path / f"key{lead}.b64").write_text(encoded + "\n")
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "data.b64").write_text(base64.b64encode(os.urandom(3000)).decode())
    snap = workdir.snapshot(tmp_path)
    assert snap.files == ("data.b64", "train.py")


def test_an_npm_token_under_another_name_is_found(tmp_path: Path) -> None:
    make_tree(tmp_path, {"train.py": "", "npm.conf": "//registry.npmjs.org/:_authToken=npm_abc123\n"})
    assert workdir.snapshot(tmp_path).files == ("train.py",)


def test_file_modes_survive_in_the_archive(tmp_path: Path) -> None:
    make_tree(tmp_path, {"secret-ish.txt": "x", "run.sh": "echo", "plain.txt": "", "priv/x.txt": ""})
    (tmp_path / "secret-ish.txt").chmod(0o600)
    (tmp_path / "run.sh").chmod(0o750)
    (tmp_path / "plain.txt").chmod(0o4644)  # setuid never travels
    (tmp_path / "priv").chmod(0o500)  # a folder keeps its bits, plus the owner's rwx
    try:
        found = members(workdir.snapshot(tmp_path))
    finally:
        (tmp_path / "priv").chmod(0o700)
    modes = {name: oct(member.mode) for name, member in found.items()}
    assert modes["secret-ish.txt"] == "0o600" and modes["run.sh"] == "0o750" and modes["plain.txt"] == "0o644"
    assert modes["priv"] == "0o700"


def test_a_folder_holding_the_profile_store_or_a_credential_home_is_refused_unless_forced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    config = make_tree(home / ".config", {"paijob/clusters.yaml": "clusters: {lab: {token: eyJSECRET}}\n",
                                          "gh/hosts.yml": "github.com:\n  oauth_token: gho_SECRET\n",
                                          "app/settings.ini": "theme = dark\n"})
    store = config / "paijob" / "clusters.yaml"
    with pytest.raises(workdir.WorkdirError, match=r"credentials folder .*\.config.*--force"):
        workdir.snapshot(config, guarded=[store])
    elsewhere = make_tree(tmp_path / "xdg", {"paijob/clusters.yaml": "token: eyJSECRET\n", "notes.txt": ""})
    with pytest.raises(workdir.WorkdirError, match="holds paijob's cluster profiles"):
        workdir.snapshot(elsewhere, guarded=[elsewhere / "paijob" / "clusters.yaml"])
    snap = workdir.snapshot(config, guarded=[store], force=True)
    assert snap.files == ("app/settings.ini",) and b"SECRET" not in all_bytes(snap)
    assert snap.left_out[0].startswith("--force: ") and "ships 1 file(s)" in snap.left_out[0]
    assert "app/settings.ini" in snap.left_out[0]


def test_submit_with_workdir_holding_the_profile_store_is_refused(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("PAIJOB_LOCAL_STATE_DIR", str(tmp_path / "state"))
    make_tree(tmp_path / "cfg", {"paijob/clusters.yaml": "clusters: {}\n", "train.py": ""})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(workdir.WorkdirError, match="holds paijob's cluster profiles"):
        api.prepare(api.JobRequest("ddp", sets=[("set", "script=train.py")], workdir=str(tmp_path / "cfg"),
                                   cluster="local"))
    job = api.prepare(api.JobRequest("ddp", sets=[("set", "script=train.py")], workdir=str(tmp_path / "cfg"),
                                     cluster="local", force=True))
    forced = [note for note in job.notes if note.startswith("--force: ")]
    assert len(forced) == 1 and forced[0].endswith("user of the cluster: train.py")


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
