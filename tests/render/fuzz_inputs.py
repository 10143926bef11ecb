"""Random `paijob render` inputs shared by the property tests (hypothesis) and
the by-hand fuzz (``python tests/render/fuzz_render.py``): keys are the
built-in templates' value names plus junk, values are the YAML and shell text
that broke render before (issue 11) plus random text."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"


def value_names() -> list[str]:
    """Every value name of the built-in schemas, nested ones dotted (tensorboard.port)."""
    names: set[str] = set()
    for path in TEMPLATES.glob("*.values.schema.json"):
        for key, schema in json.loads(path.read_text())["properties"].items():
            names.add(key)
            for child in schema.get("properties", {}):
                names.add(f"{key}.{child}")
    names |= {"env.NCCL_DEBUG", "env.A", "recipeArgs.epochs", "recipeArgs.output-dir", "parameters.lr", "secrets.token"}
    return sorted(names)


JUNK_KEYS = [
    "instance", "a", "a.b.c", "env.A;B", "env.1X", "x" * 300, "é", "__class__", "items",
    "tensorboard.enable", "recipeArgs.a b", r"env.a\.b", "args.0", "0", "-", "name.x",
]

VALUES = [
    # numbers and YAML scalars
    "abc", "1", "0", "-1", "4.0", "1.5", "1e3", ".nan", ".inf", "-.inf", "null", "~", "true", "no",
    "0x1F", "0o17", "017", "1:30", "2024-01-02", "9" * 30, "9" * 5000, "-" + "9" * 200,
    # collections
    "[]", "{}", "[a]", "[a, b c]", "{a: 1}", "{enabled: true}", "{a: {b: {c: 1}}}", "[1, [2, [3]]]",
    "{A: 1, A: 2}", "[a, {b: 1}]", "{'x y': 1}", "{NCCL: null}",
    # hostile YAML
    "&a [*a]", "&a {x: *a}", "[" * 300 + "]" * 300, "[" * 5000, "*nope", "!!python/object:os.system x",
    "{a: &b [1,1,1,1,1,1,1,1], c: [*b,*b,*b,*b,*b,*b,*b,*b]}", "|\n  block", ">-\n x", "--- a\n--- b",
    "'unterminated", '"\\x"', "a: b", "- a", "? a", "%YAML 1.1\n--- a",
    # shell
    "bf16; touch /tmp/paijob-fuzz-pwned", "$(touch /tmp/paijob-fuzz-pwned)", "`id`", "a'b", 'a"b',
    "<% $parameters.lr %>", "<% $(id) %>", "$HOME", "${PAI_JOB_NAME}", "${#PAI_JOB_NAME}",
    "{{ 7 * 7 }}", "{% raw %}", "{## x ##}", "x\ny", "x\r\ny", "0\ndefaults: {virtualCluster: evil}",
    "...", "---", "#", " ", "\t", "é", "\u2028", "\x00", "\x1b[31m", "\udcff",
]


def yaml_values_files() -> list[str]:
    """Whole values files that broke render before, beside the random ones."""
    return [
        "a: &a [*a]\n",
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
        "x: " + "[" * 10000 + "]" * 10000 + "\n",
        "gpu: " + "9" * 5000 + "\n",
        "setup: notalist\n",
        "tensorboard: {enabled: true}\n",
        "secrets: x\n",
        "env: {'A B': 1}\n",
        "- a\n- b\n",
        "gpu: 1\ngpu: 2\n",
        "",
        "# only a comment\n",
        "name: caf\xe9\n",
    ]
