"""No option of `paijob`, `paijob-runtime` or the recipes answers to a prefix of its name.

argparse takes an unambiguous prefix for the whole option by default: `paijob cluster add --token X` was
taken as `--token-env X`, `--pass` as `--password-stdin`, `paijob-runtime train --nproc 2` as
`--nproc-per-node 2`. A typo or a prefix is an error (with "did you mean" where the parser offers it).
Every parser is walked, sub-commands and their own sub-commands included.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from paijob import cli
from paijob.common import options, recipe_options
from paijob.runtime import cli as runtime_cli


def _parsers(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:  # noqa: SLF001 - argparse has no public walk
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def _taken_as(parser: argparse.ArgumentParser, word: str) -> argparse.Action | None:
    """The option argparse reads ``word`` as (None: an unknown argument)."""
    try:
        found = parser._parse_optional(word)  # noqa: SLF001 - a tuple, or (Python >= 3.12.7) a list of them
    except SystemExit:  # an ambiguous prefix: refused
        return None
    if isinstance(found, list):
        found = found[0] if len(found) == 1 else None
    return None if found is None else found[0]


ROOTS = {
    "paijob": cli.build_parser,
    "paijob-runtime": lambda: options.build_parsers()[0],
    "paijob-runtime train (as validate reads it)": options.build_train_parser,
    "python -m paijob.runtime.recipes": recipe_options.build_parser,
}


@pytest.mark.parametrize("root", list(ROOTS))
def test_no_parser_takes_a_prefix_of_a_long_option_for_it(root: str) -> None:
    walked = list(_parsers(ROOTS[root](), root))
    assert len(walked) >= (1 if root.startswith("paijob-runtime train") else 3)  # the walk reached sub-commands
    taken = []
    for path, parser in walked:
        known = parser._option_string_actions  # noqa: SLF001
        for option in [o for o in known if o.startswith("--") and len(o) > 3]:
            for prefix in (option[:-1], option[:3]):
                if prefix not in known and _taken_as(parser, prefix) is not None:
                    taken.append(f"{path}: {prefix} -> {option}")
                if prefix not in known and _taken_as(parser, f"{prefix}=x") is not None:
                    taken.append(f"{path}: {prefix}=x -> {option}")
    assert taken == []


def test_a_prefix_on_the_command_line_is_an_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(["cluster", "add", "prod", "--url", "https://pai.example.com", "--token-e", "PAI_TOKEN"])
    assert ended.value.code == 2
    assert "unrecognized arguments: --token-e PAI_TOKEN" in capsys.readouterr().err
    with pytest.raises(SystemExit) as ended:
        runtime_cli.main(["train", "--nproc", "1", "train.py"])
    assert ended.value.code == 2
    assert "unrecognized arguments: --nproc" in capsys.readouterr().err
    problem = recipe_options.recipe_arguments_error("cifar10", ["--epoch", "3"])
    assert problem is not None and "unrecognized arguments: --epoch 3" in problem and "did you mean --epochs?" in problem
