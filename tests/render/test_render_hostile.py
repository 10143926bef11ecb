"""`paijob render` given hostile or careless values (issue 11): nothing a value
holds becomes a shell command, values are type-checked against the template's
schema, what is printed passes `paijob validate`, and every mistake is one
error and exit 2 — never a traceback, never a hang."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from render_helpers import ROOT, run_cli

from paijob.errors import PaijobError
from paijob.render.filters import shell_quote, yaml_scalar
from paijob.render.templates import builtin_names, find_template
from paijob.render.templating import render_template
from paijob.validate.report import validate_text

TEMPLATES = ROOT / "templates"


def worker_commands(text: str) -> list[str]:
    return yaml.safe_load(text)["taskRoles"]["worker"]["commands"]


def run_under_bash(commands: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the commands as OpenPAI does (bash, errexit nounset pipefail), with a
    stand-in `paijob-runtime` that writes its argv, NUL-separated, to ./argv."""
    stub = "paijob-runtime() { printf '%s\\0' \"$@\" > argv; }\n"
    script = "set -o errexit -o nounset -o pipefail\n" + stub + "\n".join(commands) + "\n"
    return subprocess.run(
        ["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=30
    )


def read_argv(folder: Path) -> list[str]:
    return (folder / "argv").read_text().split("\0")[:-1]


# --------------------------------------------------------------------------- item 3: no shell injection

PAYLOADS = [
    "x; touch {marker}",
    "x && touch {marker}",
    "$(touch {marker})",
    "`touch {marker}`",
    "x' ; touch {marker} ; echo '",
    "x\ntouch {marker}",
    "x | touch {marker}",
    "<% $(touch {marker}) %>",
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_value_never_runs_as_a_command(payload: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    value = payload.format(marker=marker)
    result = render_template(
        "ddp",
        ordered_sets=[
            ("set-string", f"script={value}"),
            ("set", f"args=[--note, {yaml_scalar(value)}]"),
            ("set-string", f"env.NOTE={value}"),
        ],
    )
    done = run_under_bash(worker_commands(result.text), tmp_path)
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), f"{value!r} ran as a command"
    assert read_argv(tmp_path)[-3:] == [value, "--note", value]


def test_values_in_the_runtime_command_are_quoted(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = f"x; touch {marker}"
    result = render_template(
        "ddp",
        sets=["script=train.py"],
        set_strings=[f"env.NOTE={payload}", f"recipe={payload}", f"recipeArgs.out={payload}"],
    )
    done = run_under_bash(worker_commands(result.text), tmp_path)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    argv = read_argv(tmp_path)
    assert argv[0] == "train" and argv[-1] == "train.py"


def test_recipe_options_keep_hostile_text_in_one_argument(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = f"a b; touch {marker}"
    result = render_template(  # check=False: no recipe has that name, which validation says (test_recipe_args)
        "ddp", ordered_sets=[("set-string", f"recipeArgs.output-dir={payload}"), ("set-string", f"recipe={payload}")],
        check=False,
    )
    done = run_under_bash(worker_commands(result.text), tmp_path)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    argv = read_argv(tmp_path)
    assert argv[argv.index("--recipe") + 1] == payload
    assert argv[argv.index("--output-dir") + 1] == payload


def test_a_list_value_with_spaces_keeps_its_items(tmp_path: Path) -> None:
    result = render_template("ddp", sets=["script=train.py", 'args=["a b", c, "it\'s", "$HOME/x"]'])
    done = run_under_bash(worker_commands(result.text), tmp_path)
    assert done.returncode == 0, done.stderr
    argv = read_argv(tmp_path)
    home = subprocess.run(["bash", "-c", "echo $HOME"], capture_output=True, text=True).stdout.strip()
    assert argv[-5:] == ["train.py", "a b", "c", "it's", f"{home}/x"]


def test_openpai_references_and_shell_variables_keep_working() -> None:
    assert shell_quote("<% $parameters.lr %>") == "<% $parameters.lr %>"
    # a secret is single-quoted: its value, HTML-escaped by OpenPAI's runtime, stays one word
    assert shell_quote("<% $secrets.token %>") == "'<% $secrets.token %>'"
    assert shell_quote("--token=<% $secrets.token %>") == "--token='<% $secrets.token %>'"
    assert shell_quote("$HOME") == "$HOME" and shell_quote("${PAI_JOB_NAME}") == "${PAI_JOB_NAME}"
    assert shell_quote("--lr=<% $parameters.lr %>") == "--lr=<% $parameters.lr %>"
    assert shell_quote("--data=$DATA/x y") == "--data=\"$DATA\"'/x y'"
    # anything looser than an OpenPAI reference is quoted: `<%` alone is a redirection
    assert shell_quote("<% $(touch x) %>") == "'<% $(touch x) %>'"
    assert shell_quote("<% $nosuch.x %>") == "'<% $nosuch.x %>'"  # not an OpenPAI namespace
    # a reference OpenPAI would not resolve is not left unquoted: $(...) stays text
    done = subprocess.run(
        ["bash", "-c", "parameters=P; printf %s " + shell_quote("<% $parameters.$(echo ran) %>")],
        capture_output=True, text=True, timeout=10,
    )
    assert done.stdout == "<% P.$(echo ran) %>"


def test_environment_variable_names_are_shell_names(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "env.A;touch x=1")
    assert (code, out) == (2, "")
    assert "value 'env' has a key 'A;touch x' that is not a shell variable name" in err


def test_an_environment_value_of_null_leaves_the_variable_out() -> None:
    text = render_template("horovod", sets=["env.NCCL_DEBUG=null"]).text
    master = yaml.safe_load(text)["taskRoles"]["master"]["commands"]
    assert not any("NCCL_DEBUG" in command for command in master)
    assert "export NCCL_SOCKET_IFNAME=eth0" in master and "-x NCCL_SOCKET_IFNAME" in master[-1]


def test_a_nul_character_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "render", "ddp", "--set-string", "env.A=x\0y")
    assert code == 2 and "NUL character" in err


# --------------------------------------------------------------------------- items 9, 10: type-checked values


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["processesPerNode=abc"], "value 'processesPerNode' must be an integer or null, given the string 'abc'"),
        (["loaderWorkers=abc"], "value 'loaderWorkers' must be an integer, given the string 'abc'"),
        (["shmMB=abc"], "value 'shmMB' must be an integer or null, given the string 'abc'"),
        (["processesPerNode=.nan"], "value 'processesPerNode' must be an integer or null, given the number nan"),
        (["shmMB=.inf"], "value 'shmMB' must be an integer or null, given the number inf"),
        (["gpu={a: 1}"], "value 'gpu' must be an integer, given a mapping"),
        (["recipeArgs=[a]"], "value 'recipeArgs' must be a mapping, given a list"),
        (["setup=null"], "value 'setup' must be a list, given null"),
        (["setup=notalist"], "value 'setup' must be a list, given the string 'notalist'"),
        (["setup=[a, {b: 1}]"], "value 'setup[1]' must be a string, given a mapping"),
        (["secrets=x"], "value 'secrets' must be a mapping, given the string 'x'"),
        (["tensorboard.enable=true"], "value 'tensorboard' has unknown key(s) enable (known: enabled, logDir, port)"),
        (["backend=mpi"], "value 'backend' must be one of auto, nccl, gloo, given the string 'mpi'"),
        (["instances=0"], "value 'instances' must be at least 1, given the number 0"),
        (["precision=bf16; touch x"], "value 'precision' must be null, fp32, fp16, bf16"),
    ],
)
def test_values_are_checked_against_the_template_schema(
    sets: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["render", "ddp"] + [w for s in sets for w in ("--set", s)]
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (2, ""), err
    assert err.startswith("paijob: error: " + message), err
    assert err.count("\n") == 1 and "see 'paijob templates show ddp'" in err


def test_several_schema_problems_are_reported_together(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "render", "ddp", "--set", "gpu=x", "--set", "cpu=y")
    assert code == 2 and "value 'gpu' must be" in err and "value 'cpu' must be" in err


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_has_a_schema_its_defaults_pass(name: str) -> None:
    ref = find_template(name)
    schema_path = ref.schema_path()
    assert schema_path is not None and schema_path.name == f"{name}.values.schema.json"
    schema = json.loads(schema_path.read_text())
    defaults_text = ref.values_text()
    assert defaults_text is not None
    defaults = yaml.safe_load(defaults_text[0])
    assert set(defaults) <= set(schema["properties"]), set(defaults) - set(schema["properties"])
    render_template(name)  # the defaults pass the schema (it is checked on every render)


def test_the_schemas_agree_with_jsonschema(tmp_path: Path) -> None:
    """paijob evaluates the schemas with values_schema's small evaluator; the
    real jsonschema must say the same (valid or not) on good and bad values."""
    jsonschema = pytest.importorskip("jsonschema")
    from paijob.render.values_schema import iter_errors

    samples = [
        {}, {"gpu": "x"}, {"setup": "notalist"}, {"env": {"A;B": 1}}, {"env": {"A": None}},
        {"precision": "BF16"}, {"precision": "apex:o2"}, {"precision": "fp8"},
        {"tensorboard": {"enable": True}}, {"processesPerNode": 1.5}, {"recipeArgs": {"a": [1, "b"]}},
        {"gpu": 2**60}, {"gpu": 4.0}, {"instances": 0}, {"backend": "nccl"}, {"setup": [1]},
        {"args": ["a", 1, True]}, {"shmMB": None}, {"tensorboard": {"port": 70000}},
    ]
    for name in builtin_names():
        schema = json.loads((TEMPLATES / f"{name}.values.schema.json").read_text())
        jsonschema.Draft7Validator.check_schema(schema)
        validator = jsonschema.Draft7Validator(schema)
        for sample in samples:
            ours = not list(iter_errors(sample, schema))
            assert ours == validator.is_valid(sample), (name, sample)


def test_a_user_template_with_a_schema_is_checked_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.yaml.j2").write_text((ROOT / "tests/render/golden/ddp-1x1.yaml").read_text())
    (tmp_path / "t.values.schema.json").write_text(
        json.dumps({"type": "object", "properties": {"lr": {"type": "number"}}})
    )
    code, _, err = run_cli(capsys, "render", str(tmp_path / "t.yaml.j2"), "--set", "lr=fast")
    assert code == 2 and "value 'lr' must be a number, given the string 'fast'" in err


# --------------------------------------------------------------------------- item 9: hostile YAML


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &a [*a]\n", "recursive alias"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nesting deeper than"),
        ("gpu: " + "9" * 5000 + "\n", "value 'gpu' must be an integer, given the number inf"),
        ("cpu: " + "9" * 200 + "\n", "value 'cpu' must be at most 9007199254740991"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
            "expands to more than",
        ),
    ],
    ids=["recursive-alias", "deep", "5000-digits", "200-digits", "alias-bomb"],
)
def test_hostile_yaml_is_refused_at_once(
    text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "v.yaml"
    values.write_text(text)
    code, out, err = run_cli(capsys, "render", "ddp", "-f", str(values))
    assert (code, out) == (2, "") and message in err and err.count("\n") == 1, err
    if "\n" not in text.strip():  # one-line documents also reach --set
        key, value = text.strip().split(": ", 1)
        code, out, err = run_cli(capsys, "render", "ddp", "--set", f"{key}={value}")
        assert (code, out) == (2, "") and message in err, err


def test_non_utf8_values_file_and_template(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    values = tmp_path / "v.yaml"
    values.write_bytes(b"name: caf\xe9\n")
    code, _, err = run_cli(capsys, "render", "ddp", "-f", str(values))
    assert code == 2 and f"values file {values} is not UTF-8 text (byte 9)" in err
    template = tmp_path / "t.yaml.j2"
    template.write_bytes(b"name: caf\xe9\n")
    code, _, err = run_cli(capsys, "render", str(template))
    assert code == 2 and "is not UTF-8 text" in err and "Traceback" not in err
    # with a value the template does not know, render looks for the names it uses first
    code, _, err = run_cli(capsys, "render", str(template), "--set", "nosuch=1")
    assert code == 2 and "is not UTF-8 text" in err and "Traceback" not in err
    (tmp_path / "u.values.yaml").write_bytes(b"a: \xff\n")
    (tmp_path / "u.yaml.j2").write_text("x: 1\n")
    code, _, err = run_cli(capsys, "render", str(tmp_path / "u.yaml.j2"))
    assert code == 2 and "default values file" in err and "is not UTF-8 text" in err


def test_a_template_that_extends_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "loop.yaml.j2").write_text('{% extends "loop.yaml.j2" %}\n')
    code, _, err = run_cli(capsys, "render", str(tmp_path / "loop.yaml.j2"))
    assert code == 2 and "extends, includes or calls itself" in err and err.count("\n") == 1
    (tmp_path / "inc.yaml.j2").write_text('{% include "inc.yaml.j2" %}\n')
    code, _, err = run_cli(capsys, "render", str(tmp_path / "inc.yaml.j2"))
    assert code == 2 and "extends, includes or calls itself" in err


def test_a_name_with_a_newline_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "render", "ddp", "--set-string", "name=a\nb")
    assert (code, out) == (2, "") and "is not a valid name" in err


# --------------------------------------------------------------------------- items 11, 16: what is printed is valid


def test_a_newline_in_a_value_cannot_add_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "render", "ddp", "--set-string", "jobRetryCount=0\ndefaults: {virtualCluster: evil}"
    )
    assert (code, out) == (2, "") and "value 'jobRetryCount' must be an integer" in err
    # where a string is allowed, the newline is escaped and stays inside the value
    code, out, err = run_cli(
        capsys, "render", "ddp", "--set-string", "description=x\ndefaults: {virtualCluster: evil}"
    )
    assert code == 0, err
    job = yaml.safe_load(out)
    assert job["defaults"] == {"virtualCluster": "default"}
    assert job["description"] == "x\ndefaults: {virtualCluster: evil}"


def test_render_checks_the_printed_text_as_validate_does(tmp_path: Path) -> None:
    # A user template that prints a duplicate key: the values are fine, the text is not.
    golden = (ROOT / "tests/render/golden/ddp-1x1.yaml").read_text()
    (tmp_path / "dup.yaml.j2").write_text(golden.replace("type: job\n", "type: job\njobRetryCount: 1\n"))
    with pytest.raises(PaijobError, match="duplicate key"):
        render_template(str(tmp_path / "dup.yaml.j2"))
    assert not validate_text(golden.replace("type: job\n", "type: job\njobRetryCount: 1\n"), "x").ok


@pytest.mark.parametrize("template", ["ddp", "horovod"])
def test_a_scalar_secret_or_parameter_is_an_error_not_a_document_end(
    template: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in ("secrets", "parameters"):
        code, out, err = run_cli(capsys, "render", template, "--set", f"{key}=x")
        assert (code, out) == (2, "") and f"value '{key}' must be a mapping" in err


def test_yaml_block_never_ends_a_document() -> None:
    from paijob.render.filters import yaml_block

    assert yaml_block("x") == "x"
    assert yaml.safe_load(yaml_block(["a", "..."])) == ["a", "..."]


def test_dots_that_end_a_value_are_kept() -> None:
    # PyYAML's document end ("\n...") goes, the value's own dots stay
    for value in ("Training...", "a ...", "x.."):
        assert yaml_scalar(value) == value
    assert render_template("ddp", sets=["description=Training..."]).job["description"] == "Training..."


TRICKY = "a1 :#-.?'\"~y!%[,\t_"


def test_a_string_the_yaml_filter_keeps_as_it_is_is_one_pyyaml_writes_as_it_is() -> None:
    # yaml_scalar skips PyYAML's emitter for plain strings: every one it skips must be one PyYAML keeps
    import itertools

    from paijob.render.filters import _dumped, _is_plain

    words = ["".join(chars) for size in (1, 2, 3) for chars in itertools.product(TRICKY, repeat=size)]
    words += ["yes", "No", "null", "1.0", "0x1f", "1_000", "2024-01-02", "12:30", ".inf", "<<", "=", "a:b", "a: b",
              "a #b", "a#b", "--x", "- x", "...", "---", "x...", "a b", "pytorch/pytorch:2.5.1-cuda12.4", "é", "a\x85"]
    plain = [word for word in words if _is_plain(word)]
    assert [word for word in plain if _dumped(word) != word] == []
    assert {"a", "a1", "a b", "a:b", "a#b", "x...", "pytorch/pytorch:2.5.1-cuda12.4"} <= set(plain)
    assert not {"yes", "1.0", "~", "a: b", "a #b", "- x", "...", "a:", "a ", " a", "é"} & set(plain)



# --------------------------------------------------------------------------- item 17: sandbox


@pytest.mark.parametrize(
    "expression",
    [
        "cycler.__init__.__globals__.os",
        "''.__class__.__mro__[1].__subclasses__()",
        "lipsum.__globals__['os'].system('true')",
        "namespace.__init__.__globals__",
    ],
)
def test_a_template_cannot_reach_python_internals(
    expression: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "evil.yaml.j2"
    template.write_text("name: {{ " + expression + " }}\n")
    code, out, err = run_cli(capsys, "render", str(template))
    assert (code, out) == (2, ""), out
    assert "uses something templates may not" in err and "sandbox" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_sandbox_uses_its_own_bytecode_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Bytecode compiled outside the sandbox (older paijob) must never be loaded into it.
    from paijob.render.templating import _bytecode_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PAIJOB_NO_TEMPLATE_CACHE", raising=False)
    cache = _bytecode_cache()
    assert cache is not None
    assert (tmp_path / "paijob" / "templates-sandboxed").is_dir()
    assert not (tmp_path / "paijob" / "templates").exists()


def test_the_bytecode_cache_reads_back_what_jinja_wrote_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # paijob reads the cache files itself (from bytes: see _QuietBytecodeCache); Jinja writes them
    import jinja2

    from paijob.render.templating import _bytecode_cache

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("PAIJOB_NO_TEMPLATE_CACHE", raising=False)
    cache = _bytecode_cache()
    assert cache is not None
    env = jinja2.Environment()
    source = "{{ 6 * 7 }}"
    bucket = cache.get_bucket(env, "t.yaml.j2", None, source)
    assert bucket.code is None
    bucket.code = compile(env.compile(source, raw=True), "t.yaml.j2", "exec")
    cache.set_bucket(bucket)  # Jinja's own writing
    assert cache.get_bucket(env, "t.yaml.j2", None, source).code == bucket.code
    assert cache.get_bucket(env, "t.yaml.j2", None, "{{ 6 * 8 }}").code is None  # the source changed
    (file,) = (tmp_path / "paijob" / "templates-sandboxed").iterdir()
    whole = file.read_bytes()
    for broken in (b"", whole[:10], whole[:-40], whole[:-40] + b"\xff" * 40):
        file.write_bytes(broken)
        assert cache.get_bucket(env, "t.yaml.j2", None, source).code is None, broken


def test_shell_quote_roundtrips_through_bash() -> None:
    for text in ["plain", "a b", "it's", 'say "hi"', "a;b", "$(x)", "`x`", "line\nbreak", "", "*"]:
        done = subprocess.run(
            ["bash", "-c", "printf '%s' " + shell_quote(text)], capture_output=True, text=True, timeout=10
        )
        assert done.stdout == text, (text, shell_quote(text))
        assert shlex.split(shell_quote(text)) == [text]


def test_templates_help_and_show_say_what_a_template_may_do(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "templates", "--help")
    text = " ".join(out.split())
    assert code == 0 and "sandbox" in text and "cycler.__init__.__globals__ is an error" in text
    code, out, _ = run_cli(capsys, "templates", "show", "ddp")
    assert code == 0 and "# ---- values schema ddp.values.schema.json" in out


def test_a_value_that_is_not_utf8_is_one_error(capsys: pytest.CaptureFixture[str]) -> None:
    # what Python makes of a non-UTF-8 byte in argv (surrogateescape)
    value = b"args=\xff".decode("utf-8", "surrogateescape")
    for flag in ("--set", "--set-string"):
        code, out, err = run_cli(capsys, "render", "ddp", flag, value)
        assert (code, out) == (2, "") and "not UTF-8 text (byte 0xff at position 5)" in err


def test_json_output_of_a_job_with_a_date(capsys: pytest.CaptureFixture[str]) -> None:
    # OpenPAI (js-yaml) reads 2024-01-02 as a date object; -o json must still print
    code, out, err = run_cli(capsys, "render", "ddp", "--set", "parameters={day: 2024-01-02}", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["parameters"] == {"day": "2024-01-02"}


@pytest.mark.parametrize("name", ["a\nb", "a b", "x" * 256, "a:\n  b: c"])
def test_submit_name_is_checked_before_it_is_written_into_the_job(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the check runs before any cluster is contacted: no profile, no server needed
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    code, out, err = run_cli(capsys, "submit", "ddp", "--name", name)
    assert (code, out) == (2, "")
    assert err.startswith(f"paijob: error: --name {name!r} is not a valid OpenPAI job name")
    assert err.count("\n") == 1


@pytest.mark.parametrize("secret", ["a b", "x; touch pwned", "$(touch pwned)", "`touch pwned`", "a|b&c<d>e",
                                    "(x)", "it's", 'say "hi"', "back\\slash", "${HOME}"])
def test_a_secret_stays_one_word_through_openpai_runtime_rendering(tmp_path: Path, secret: str) -> None:
    """As OpenPAI runs it: the server's pass, then the runtime's (HTML-escaped values), then bash."""
    import html

    from paijob.openpai.markers import task_command

    sets = ["script=train.py", "args=[--token, '<% $secrets.token %>']", "env.TOKEN=<% $secrets.token %>",
            "runtimeInstall.enabled=false"]
    result = render_template("ddp", ordered_sets=[*(("set", s) for s in sets), ("set-string", f"secrets.token={secret}")])
    command = task_command(yaml.safe_load(result.text), "worker")
    done = run_under_bash(command.splitlines(), tmp_path)
    assert done.returncode == 0, done.stderr
    argv = read_argv(tmp_path)
    assert argv[-2:] == ["--token", html.escape(secret, quote=True)]  # what the script receives
    assert not (tmp_path / "pwned").exists()
