"""Every command the documentation shows, run as written, in order, in one shell: the tour.

The tour is the shell blocks of the documentation's pages (docs/, in mkdocs.yml's nav order), read as one
session: a `bash` block is commands, a `python` block is a script, a `text` block's `$ ` lines are commands
followed by what they print. The README's commands must each be one of them, so the README cannot show a command
that no test runs. The tour runs in a copy of the repository (its tracked files, committed in a
fresh git repository) with an empty HOME and the venv this test runs in as
`.venv`. Commands that need a real OpenPAI cluster (or data this machine does
not have, or are the install this test runs in) are skipped, each named in SKIPPED with the reason; the test
fails when a skipped command is no longer on a page, so the list stays true.
Afterwards the tour must have left nothing behind: `git status` is clean (no
untracked files), `paijob cluster list` shows what it showed before (the tour's
example profile is gone, `local` is the default again), no process the tour
started still runs (the local cluster is down), and its TMPDIR is empty.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

SKIPPED = {
    "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e '.[train]' && .venv/bin/paijob run ddp --local "
    "-f examples/cifar10-local.values.yaml": "the install the tour runs in (its job is the first-job page's)",
    "python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e '.[train,test,dev]' && .venv/bin/python -m "
    "pytest": "the command that runs this test",
    ".venv/bin/pip install torch==2.14.1 torchvision==0.29.1 -e '.[train,vision,bench]' && .venv/bin/python "
    "benchmarks/run.py --out benchmarks/results": "about 30 minutes on 2 cores; tests/benchmarks runs the harness",
    "paijob login prod --url https://pai.example.com": "needs a real OpenPAI cluster",
    "paijob submit ddp -f examples/ddp-4x8.values.yaml --set instances=2": "needs a real OpenPAI cluster",
    "paijob submit tour/ddp-4x8.yaml --unique-suffix --wait": "needs a real OpenPAI cluster",
    "paijob status alice~cifar10-ddp-4x8": "needs a real OpenPAI cluster",
    "paijob list --state running --limit 10": "needs a real OpenPAI cluster",
    "paijob logs cifar10-ddp-4x8 -f": "needs a real OpenPAI cluster",
    "paijob stop cifar10-ddp-4x8 --wait": "needs a real OpenPAI cluster",
    "paijob-runtime train --nproc-per-node 4 --recipe imagenet --arch resnet50 --data /mnt/imagenet --precision O2":
        "needs torchvision and an ImageNet folder",
    "PYTHON=python3 BUDGET=480 benchmarks/gpu_check.sh": "needs a CUDA GPU (a lent one); tests/benchmarks runs the "
        "harness on a CPU",
    ".venv/bin/python .ci/mutation/mutate.py": "every module, about 18 minutes on 2 cores: .ci/run's mutation stage "
        "runs exactly this command; the tour runs the one-module, --changed-since and --list lines",
}
EXIT_CODES = {"paijob validate examples/broken.yaml": 2}
# What the tour still leaves in TMPDIR, each with the work that removes it; a pattern the tour no longer
# leaves fails the test, so this list only shrinks.
KNOWN_TMP_LEFTOVERS: dict[str, str] = {}

pytestmark = [
    pytest.mark.skipif(sys.prefix == sys.base_prefix or not (BIN / "paijob").exists(),
                       reason="needs the venv with the paijob console scripts (the README's install command)"),
]


def tour_pages(root: Path) -> list[Path]:
    """The documentation's pages in mkdocs.yml's nav order (the generated reference pages are not in docs/)."""
    nav = (root / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    pages = [root / "docs" / name for name in re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)\s*$", nav, flags=re.MULTILINE)]
    return [page for page in pages if page.exists()]


def tour_steps(root: Path) -> list[tuple[str, str, list[str]]]:
    """(kind, command, expected output lines) of the tour, in order; kind is bash or python."""
    steps: list[tuple[str, str, list[str]]] = []
    for page in tour_pages(root):
        steps.extend(page_steps(page.read_text(encoding="utf-8")))
    return steps


def page_steps(text: str) -> list[tuple[str, str, list[str]]]:
    steps: list[tuple[str, str, list[str]]] = []
    for lang, body in re.findall(r"^```(\w+)\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
        if lang == "python":
            steps.append(("python", body, []))
        elif lang == "bash":
            for line in body.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    steps.append(("bash", line, []))
        elif lang == "text":  # `$ ` lines are commands, the lines after one what it prints; others are shown only
            command: tuple[str, str, list[str]] | None = None
            for line in body.splitlines():
                if line.startswith("$ "):
                    command = ("bash", line[2:], [])
                    steps.append(command)
                elif command and line.strip():
                    command[2].append(line)
    return steps


def command_of(line: str) -> str:
    """The command without its trailing comment (`  # ...`)."""
    return re.split(r"\s{2,}#\s", line, maxsplit=1)[0].strip()


def test_the_skip_list_names_commands_that_are_in_the_tour() -> None:
    commands = {command_of(cmd) for kind, cmd, _ in tour_steps(REPO) if kind == "bash"}
    assert set(SKIPPED) <= commands, set(SKIPPED) - commands


def test_every_page_of_the_guide_is_in_the_tour() -> None:
    """A page left out of mkdocs.yml's nav would keep commands that no test runs."""
    pages = {page.relative_to(REPO / "docs") for page in tour_pages(REPO)}
    on_disk = {page.relative_to(REPO / "docs") for page in (REPO / "docs").rglob("*.md")}
    assert on_disk - pages <= {Path("pypi.md")}, f"add to mkdocs.yml's nav: {sorted(map(str, on_disk - pages))}"


def test_every_readme_command_is_a_tour_command() -> None:
    """The README shows a few of the guide's commands; each must be one the tour runs (or skips, saying why)."""
    tour = {command_of(cmd) for kind, cmd, _ in tour_steps(REPO) if kind == "bash"}
    readme = {command_of(cmd) for kind, cmd, _ in page_steps((REPO / "README.md").read_text()) if kind == "bash"}
    assert readme <= tour, f"README commands that no docs page shows: {sorted(readme - tour)}"


@pytest.mark.timeout(1700)  # bounds a stuck tour; its full mutation run is CI's own stage, not repeated here
@pytest.mark.slow  # several minutes of jobs on the local cluster: run by .ci/run's slow stage (`pytest -m slow`)
def test_every_tour_command_runs_as_written(tmp_path: Path) -> None:
    copy = tmp_path / "paijob"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (REPO / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, copy / name)
    (copy / ".venv").symlink_to(sys.prefix)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=copy, check=True)
    (copy / ".git" / "info" / "exclude").write_text(".venv\n")
    subprocess.run([*git, "add", "-A"], cwd=copy, check=True)
    subprocess.run([*git, "commit", "-qm", "clone"], cwd=copy, check=True)

    steps = tour_steps(copy)
    script = ["exec 2>&1"]
    for number, (kind, command, _) in enumerate(steps):
        script.append(f"echo '::step {number}::'")
        if kind == "python":
            script.append(f"python - <<'PAIJOB_TOUR_PY'\n{command}PAIJOB_TOUR_PY")
        elif command_of(command) in SKIPPED:
            script.append("true")
        else:
            script.append(command)
        script.append(f"echo \"::rc {number} $?::\"")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAI_", "PAIJOB_", "XDG_", "VIRTUAL_ENV"))}
    env.update(HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"), PAIJOB_LOCAL_STOP_GRACE="2",
               PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != str(BIN)))
    (tmp_path / "home").mkdir()
    (tmp_path / "tmp").mkdir()
    profiles_before = cluster_list(env)
    try:
        done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=copy, env=env, capture_output=True,
                              text=True, timeout=1600)
        left = leftovers(env, profiles_before)
    finally:
        subprocess.run([str(BIN / "paijob"), "local", "down"], env=env, capture_output=True, timeout=60)
        for pid in processes_of(env["HOME"]):  # only processes this test's tour started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    output = done.stdout
    failures = []
    for number, (_, command, expected) in enumerate(steps):
        match = re.search(rf"::step {number}::\n(.*?)::rc {number} (\d+)::", output, flags=re.DOTALL)
        if not match:
            failures.append(f"step {number} never finished: {command}")
            continue
        text, code = match.group(1), int(match.group(2))
        want = EXIT_CODES.get(command_of(command), 0)
        if code != want:
            failures.append(f"exit {code} (want {want}): {command}\n{text[-3000:]}")
        lines = text.splitlines()
        for line in expected:
            if line.endswith("..."):
                ok = any(got.startswith(line[:-3]) for got in lines)
            else:
                ok = line in lines
            if not ok:
                failures.append(f"the docs show {line!r} for {command!r}, the command printed:\n{text[-2000:]}")
    assert not failures, "\n\n".join(failures)
    status = subprocess.run(["git", "status", "--porcelain"], cwd=copy, capture_output=True, text=True, check=True)
    assert status.stdout == "", f"the tour left files behind:\n{status.stdout}"
    assert not left, "the tour left this behind:\n" + "\n".join(left)


def cluster_list(env: dict[str, str]) -> str:
    return subprocess.run([str(BIN / "paijob"), "cluster", "list", "-o", "json"], env=env, capture_output=True,
                          text=True, check=True, timeout=60).stdout


def processes_of(home: str) -> list[int]:
    """Live processes whose environment has ``HOME=home``: what the tour started (this test runs elsewhere)."""
    marker = f"HOME={home}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"\0" + marker in b"\0" + environ and state != "Z":
            found.append(int(entry.name))
    return found


def leftovers(env: dict[str, str], profiles_before: str) -> list[str]:
    """What the tour left that a newcomer would trip over: profiles, processes, temporary files."""
    left = []
    profiles_after = cluster_list(env)
    if profiles_after != profiles_before:
        left.append(f"`paijob cluster list` was {profiles_before.strip()}, now {profiles_after.strip()}")
    for pid in processes_of(env["HOME"]):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        left.append(f"process {pid} still runs: {command[:300]}")
    found = sorted(os.listdir(env["TMPDIR"]))
    left.extend(f"{name} in TMPDIR" for name in found
                if not any(fnmatch.fnmatch(name, pattern) for pattern in KNOWN_TMP_LEFTOVERS))
    left.extend(f"KNOWN_TMP_LEFTOVERS lists {pattern!r}, which the tour no longer leaves: remove it"
                for pattern in KNOWN_TMP_LEFTOVERS if not fnmatch.filter(found, pattern))
    return left
