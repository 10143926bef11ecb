"""Secrets never ride in the workdir snapshot (issue 35): a values file holding
the job's ``secrets:`` map (``-f`` or ``paijob.yaml``'s) is left out and listed,
whatever its form; so is any YAML/JSON file with a top-level ``secrets:`` map,
a file named ``token`` or holding an access token; and ``--force`` on a
credential home (``~/.cache/huggingface``) still leaves its token out."""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path

import pytest
import yaml
from suite_helpers import make_tree

from paijob import cli, workdir

PASSWORD = "SEKRIT-registry-pw-0451"
HF_TOKEN = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYzAbCdEfGh"  # the shape of a Hugging Face token: hf_ + 34 letters


def shipped(snap: workdir.Snapshot) -> tuple[list[str], bytes]:
    with tarfile.open(fileobj=io.BytesIO(snap.archive)) as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
        return [m.name for m in files], b"".join((tar.extractfile(m) or io.BytesIO()).read() for m in files)


@pytest.fixture
def real_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAI_CLUSTER_URL", "https://pai.example.com")
    monkeypatch.setenv("PAI_TOKEN", "t")
    monkeypatch.setenv("PAI_USER", "alice")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict[str, object], list[str], bytes, str]:
    code = cli.main(["submit", *argv, "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    job = yaml.safe_load(out[out.index("protocolVersion"):])
    archive = base64.b64decode(job["parameters"][workdir.PARAMETER])
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
        content = b"".join((tar.extractfile(m) or io.BytesIO()).read() for m in files)
        return job, [m.name for m in files], content, err


REGISTRY_VALUES = ("imageCredentials: {registry: https://registry.example.com, username: alice,\n"
                   "  password: '<% $secrets.registryPassword %>'}\n"
                   f"secrets:\n  registryPassword: {PASSWORD}\n")


def test_the_projects_values_file_with_the_registry_login_stays_out_of_the_snapshot(
        tmp_path: Path, real_cluster: None, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # docs/real-cluster.md's registry login written into a project's values.yaml (issue 35)
    project = make_tree(tmp_path / "proj", {"train.py": "print('hi')\n", "values.yaml": REGISTRY_VALUES,
                                            "paijob.yaml": "template: ddp\nvalues: [values.yaml]\nworkdir: .\n"})
    monkeypatch.chdir(project)
    job, files, content, err = dry_run(capsys, "--set", "script=train.py")
    assert "values.yaml" not in files and PASSWORD.encode() not in content
    assert sorted(files) == ["paijob.yaml", "train.py"]
    assert "values.yaml (a values file of this job with a secrets: map; never shipped)" in err
    assert PASSWORD not in yaml.safe_dump(job["parameters"])


def test_a_values_file_given_with_f_stays_out_whatever_its_form(
        tmp_path: Path, real_cluster: None, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a key written with a YAML escape (secr\x65ts) is no pattern's business: the file is read as values
    project = make_tree(tmp_path / "proj", {"train.py": "", "deploy/login.yaml":
                                            f'"secr\\x65ts": {{registryPassword: {PASSWORD}}}\n'})
    monkeypatch.chdir(tmp_path)
    _, files, content, err = dry_run(capsys, "ddp", "--set", "script=train.py", "-f", str(project / "deploy/login.yaml"),
                                     "--workdir", str(project))
    assert files == ["train.py"] and PASSWORD.encode() not in content
    assert "deploy/login.yaml (a values file of this job with a secrets: map; never shipped)" in err


@pytest.mark.parametrize("text", [
    f"secrets:\n  registryPassword: {PASSWORD}\n",
    f"name: x\nsecrets:   # for the registry\n\n    pw: {PASSWORD}\n",
    f"secrets: {{pw: {PASSWORD}}}\n",
    f"'secrets': {{pw: {PASSWORD}}}\n",
    f"base: &s {{pw: {PASSWORD}}}\nsecrets: *s\n",
])
def test_any_yaml_file_with_a_top_level_secrets_map_is_left_out(tmp_path: Path, text: str) -> None:
    make_tree(tmp_path, {"train.py": "", "conf/prod-values.yml": text, "conf/values.json":
                         f'{{"image": "x", "secrets": {{"pw": "{PASSWORD}"}}}}'})
    snap = workdir.snapshot(tmp_path)
    files, content = shipped(snap)
    assert files == ["train.py"] and PASSWORD.encode() not in content
    assert any("conf/prod-values.yml (a top-level secrets: map)" in line for line in snap.left_out)


@pytest.mark.parametrize(("name", "data"), [
    ("bom.yaml", b"\xef\xbb\xbfsecrets:\n  pw: " + PASSWORD.encode() + b"\n"),  # as Windows editors save
    ("next-line.yaml", f"secrets: {{\n  pw: {PASSWORD}}}\n".encode()),
    ("flow.yaml", f"{{secrets: {{pw: {PASSWORD}}}}}\n".encode()),
    ("explicit.yaml", f"? secrets\n: {{pw: {PASSWORD}}}\n".encode()),
    ("escaped.yaml", f'"secr\\u0065ts": {{pw: {PASSWORD}}}\n'.encode()),
    ("prod.values", f"secrets:\n  pw: {PASSWORD}\n".encode()),
    ("two-docs.yaml", f"image: x\n---\nsecrets: {{pw: {PASSWORD}}}\n".encode()),
    ("bom.json", b'\xef\xbb\xbf{"secrets": {"pw": "' + PASSWORD.encode() + b'"}}'),
])
def test_a_secrets_map_is_found_by_parsing_whatever_its_form(tmp_path: Path, name: str, data: bytes) -> None:
    """Issue 46 row 3: six valid YAML forms slipped past the old regex and shipped in clear."""
    (tmp_path / "train.py").write_text("")
    (tmp_path / name).write_bytes(data)
    snap = workdir.snapshot(tmp_path)
    files, content = shipped(snap)
    assert files == ["train.py"] and PASSWORD.encode() not in content
    assert any(f"{name} (a top-level secrets: map)" in line for line in snap.left_out)


def test_yaml_that_only_mentions_secrets_still_ships(tmp_path: Path) -> None:
    make_tree(tmp_path, {"a.yaml": "secrets: {}\n", "b.yaml": "# secrets:\n#   pw: x\n",
                         "c.yaml": "job:\n  secrets:\n    pw: x\n", "d.yaml": "secrets: none\n",
                         "notes.txt": "secrets:\n  pw: x\n"})
    assert set(workdir.snapshot(tmp_path).files) == {"a.yaml", "b.yaml", "c.yaml", "d.yaml", "notes.txt"}


def test_force_on_the_hugging_face_cache_still_leaves_its_token_out(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    cache = make_tree(home / ".cache" / "huggingface", {
        "token": HF_TOKEN, "stored_tokens": f"[t]\nhf_token = {HF_TOKEN}\n", "hub/models--x/config.json": "{}"})
    with pytest.raises(workdir.WorkdirError, match="credentials folder"):
        workdir.snapshot(cache)
    snap = workdir.snapshot(cache, force=True)
    files, content = shipped(snap)
    assert files == ["hub/models--x/config.json"] and HF_TOKEN.encode() not in content
    assert any("token" in line and "secret-looking" in line for line in snap.left_out)


def test_force_on_a_credential_home_reads_the_paths_as_seen_from_home(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    # inside ~/.config/gh the path is just hosts.yml, inside ~/.config/gcloud just access_tokens.db
    gh = make_tree(home / ".config" / "gh", {"hosts.yml": "github.com: {user: me}\n", "config.yml": "editor: vi\n"})
    assert workdir.snapshot(gh, force=True).files == ()
    gcloud = make_tree(home / ".config" / "gcloud", {"access_tokens.db": "x", "configurations/config_default": ""})
    assert workdir.snapshot(gcloud, force=True).files == ()
    apps = make_tree(home / ".config", {"app/settings.ini": "", "gh/hosts.yml": "x"})
    assert workdir.snapshot(apps, force=True).files == ("app/settings.ini",)
    ssh = make_tree(home / ".ssh", {"config": "Host x\n", "known_hosts": "x"})
    assert workdir.snapshot(ssh, force=True).files == ()
    docker = make_tree(home / ".docker", {"config.json": '{"auths": {}}', "features.json": "{}"})
    assert workdir.snapshot(docker, force=True).files == ("features.json",)
    podman = make_tree(home / ".config" / "containers", {"auth.json": "{}", "registries.conf": ""})
    assert workdir.snapshot(podman, force=True).files == ("registries.conf",)


def test_a_token_under_any_name_or_a_file_named_token_is_left_out(tmp_path: Path) -> None:
    gh_token = "ghp_" + "a1B2" * 9
    make_tree(tmp_path, {"train.py": "", "hf/token": "not-a-known-shape\n", "notes.txt": f"login with {HF_TOKEN}\n",
                         "ci.sh": f"export GH_TOKEN={gh_token}\n", "tokenizer.json": "{}",
                         "readme.md": "tokens look like hf_xxx and ghp_xxx\n"})
    snap = workdir.snapshot(tmp_path)
    assert set(snap.files) == {"train.py", "tokenizer.json", "readme.md"}
    files, content = shipped(snap)
    assert HF_TOKEN.encode() not in content and gh_token.encode() not in content


def test_a_token_across_a_chunk_boundary_is_found() -> None:
    from paijob.workdir.pack import KeySniffer

    sniffer = KeySniffer()
    text = b"x" * 1000 + b" " + HF_TOKEN.encode() + b"\n"
    cut = 1000 + 1 + 10
    assert not sniffer.feed(text[:cut])
    assert sniffer.feed(text[cut:])


@pytest.mark.parametrize("token", [
    "glpat-" + "Ab1_" * 5,  # GitLab
    "AKIA" + "IOSFODNN7EXAMPL3",  # AWS access key id
    "xoxb-" + "1234567890-abcdefghij",  # Slack
    "sk-proj-" + "Zy9" * 14,  # OpenAI
    "sk-ant-api03-" + "Qw8" * 30,  # Anthropic
    "postgres://app:Hunter2-" + "pw@db.internal:5432/app",  # a URL with a password
])
def test_common_token_shapes_are_left_out_and_listed(tmp_path: Path, token: str) -> None:
    """Issue 46 row 4: only ghp_ and hf_ shapes were recognised; the others shipped."""
    make_tree(tmp_path, {"train.py": "", "settings.py": f"KEY = {token!r}\n"})
    snap = workdir.snapshot(tmp_path)
    files, content = shipped(snap)
    assert files == ["train.py"] and token.encode() not in content
    assert any("settings.py (holds a private key, credential or access token)" in line for line in snap.left_out)


def test_code_that_reads_a_password_from_the_environment_still_ships(tmp_path: Path) -> None:
    make_tree(tmp_path, {"db.py": 'URL = f"postgres://app:${PASSWORD}@db/app"\nHOST = "https://example.com/x"\n',
                         "risk.py": "name = 'risk-assessment-model-v2-with-a-long-name'\n"})
    assert set(workdir.snapshot(tmp_path).files) == {"db.py", "risk.py"}
