"""The documentation site: its generated reference pages come from the code, and it builds without a warning.

The reference pages are made by docs/hooks/reference.py when MkDocs builds the site (.ci/run runs
`mkdocs build --strict`). These tests call the same page functions without MkDocs, so a change to a
parser, a template's values or an exit code that the generator can no longer read fails here, in the
everyday test run, and they check that what the pages say is what the code defines.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "docs" / "hooks" / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cli_page_has_every_verb_and_option_of_paijob() -> None:
    from paijob.cli import COMMANDS, build_parser

    page = reference().cli_page()
    for verb in COMMANDS:
        assert f"\n### paijob {verb}\n" in page, verb
    parser = build_parser()
    run = next(a for a in parser._actions if a.dest == "command").choices["run"]  # noqa: SLF001
    for action in run._actions:  # noqa: SLF001
        for option in action.option_strings:
            assert option in page, option


def test_the_runtime_cli_page_has_train_and_env_with_their_options() -> None:
    page = reference().runtime_cli_page()
    assert "\n### paijob-runtime train\n" in page and "\n### paijob-runtime env\n" in page
    for option in ("--nproc-per-node", "--port-label", "--master-timeout", "--precision", "--recipe", "--json"):
        assert option in page, option


def test_the_values_page_lists_each_built_in_templates_values_with_their_defaults() -> None:
    from paijob import api

    page = reference().values_page()
    for name in api.template_names():
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for doc in api.template_values(name):
            assert re.search(rf"^\| `{re.escape(doc.name)}` \| ", section, flags=re.MULTILINE), (name, doc.name)


def test_the_exit_code_page_is_the_codes_the_code_defines() -> None:
    from paijob.common.exitcodes import RUNTIME_EXIT_CODES
    from paijob.errors import EXIT_CODES

    page = reference().exit_codes_page()
    for code in EXIT_CODES:
        assert re.search(rf"^\| {code} \| ", page, flags=re.MULTILINE), code
    for entry in RUNTIME_EXIT_CODES:
        assert f"| {entry.codes} | " in page, entry.codes
    assert "137 → 137 `ALWAYS_RETRY`" in page  # OpenPAI's exit spec, looked up, not written down
    assert "1 → 255 `RETRY_TO_MAX`" in page
    assert "| 127 | pip could not install paijob" in page and "127 → 220 `NEVER_RETRY`" in page  # the install step


def test_the_pages_do_not_depend_on_the_terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    wide = reference().cli_page()
    monkeypatch.setenv("COLUMNS", "40")
    assert reference().cli_page() == wide


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="needs the docs extra (pip install -e '.[docs]'); .ci/run installs it and builds the site")
def test_the_site_builds_without_a_warning(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, warnings
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


def test_the_performance_table_quotes_the_results_json() -> None:
    """Each row of docs/performance.md's table that benchmarks/table.py prints from the JSON the page names
    is that row, to the letter (rows measured apart, such as the start-up ratios, say so in their first cell)."""
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    (results,) = set(re.findall(r"benchmarks/results/(benchmarks-[\w-]+\.json)", page))
    assert f"![benchmark chart](benchmarks/{results.removesuffix('.json')}.png)" in page  # the run's own chart
    printed = subprocess.run([sys.executable, "table.py", f"results/{results}"], cwd=ROOT / "benchmarks",
                             capture_output=True, text=True, check=True, timeout=120).stdout
    rows = {line.split(" | ")[0]: line for line in printed.splitlines() if line.startswith("| ")}
    quoted = [line for line in page.splitlines() if line.split(" | ")[0] in rows and not line.startswith("| ---")]
    assert len(quoted) >= 6, "the page quotes too few of table.py's rows"
    for line in quoted:
        assert line == rows[line.split(" | ")[0]], f"stale row: run python benchmarks/table.py results/{results}"


def _slug(heading: str) -> str:
    """The anchor MkDocs' toc extension (and GitHub) gives a heading: lower case, words joined by '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return re.sub(r"[\s]+", "-", text)


def test_the_readmes_links_into_the_docs_resolve() -> None:
    """mkdocs --strict checks the site's own links; the README's (read on GitHub) are checked here."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((?!https?://)([^)#\s]+)(?:#([^)\s]+))?\)", readme)
    assert links
    for path, anchor in links:
        target = ROOT / path
        assert target.exists(), f"README links to {path}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(encoding="utf-8"), flags=re.MULTILINE)
            assert anchor in {_slug(h) for h in headings}, f"README links to {path}#{anchor}: no such heading"


def test_the_committed_reference_pages_are_what_the_code_generates() -> None:
    """Issue 45: links to reference/*.md were dead in the clone (the pages existed only in the built site).
    They are committed now; this fails when a parser, a value or an exit code changed without them."""
    assert reference().stale_pages() == [], "run `python docs/hooks/reference.py` and commit docs/reference/"


def test_every_relative_link_in_the_markdown_resolves_to_a_file_in_the_checkout() -> None:
    dead = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s\\]+)\)", page.read_text()):  # a table's `\|` is no link
            path = target.split("#", 1)[0]
            if not path or re.match(r"[a-z]+:", path):
                continue
            if not (page.parent / path).exists():
                dead.append(f"{page.relative_to(ROOT)} -> {target}")
    assert dead == []
