"""Job YAML is read as the OpenPAI rest-server reads it (js-yaml 3, YAML 1.2 core
schema) and hostile YAML is refused at once with a one-line error (exit 2).

The expected readings were checked against js-yaml 3.14.1 under node (the
version range the rest-server's package.json pins); see tests/conformance."""

from __future__ import annotations

import datetime
import math
import time
from pathlib import Path

import pytest
from suite_helpers import paijob

from paijob.errors import PaijobError
from paijob.openpai.jsyaml import (
    YamlError,
    js_number,
    js_string,
    load_job,
    load_values,
)
from paijob.openpai.yamlscalars import yaml11_difference


def one(text: str) -> object:
    value = load_job(f"v: {text}\n", "job.yaml").value
    assert isinstance(value, dict)
    return value["v"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("no", "no"),
        ("off", "off"),
        ("yes", "yes"),
        ("On", "On"),
        ("y", "y"),
        ("True", True),
        ("FALSE", False),
        ("1e3", 1000),
        ("1.0", 1),
        ("1.5e+3", 1500),
        (".5", 0.5),
        ("0o17", "0o17"),  # js-yaml 3: not an integer
        ("017", 15),  # legacy octal
        ("0x1f", 31),
        ("0b101", 5),
        ("1_000", 1000),
        ("1:30", 90),  # base 60
        ("~", None),
        ("", None),
        ("Null", None),
        ("9007199254740993", 9007199254740992),  # a JavaScript double
        ("12e", "12e"),
    ],
)
def test_plain_scalars_read_as_js_yaml_reads_them(text: str, expected: object) -> None:
    value = one(text)
    assert value == expected and type(value) is type(expected)


def test_dates_are_not_strings_and_infinities_are_numbers() -> None:
    assert one("2001-12-14") == datetime.date(2001, 12, 14)
    assert one("2001-02-30") == datetime.date(2001, 3, 2)  # JavaScript's Date.UTC rolls over
    utc = datetime.timezone.utc
    assert one("2001-12-14t21:59:43.10-05:00") == datetime.datetime(2001, 12, 15, 2, 59, 43, 100000, utc)
    assert one(".inf") == math.inf and one("-.INF") == -math.inf
    assert math.isnan(one(".nan"))  # type: ignore[arg-type]


def test_keys_are_strings_and_repeats_are_errors_like_js_yaml() -> None:
    assert load_job("1: a\ntrue: b\n1e3: c\n", "j").value == {"1": "a", "true": "b", "1000": "c"}
    with pytest.raises(YamlError, match=r"j:2: invalid YAML: duplicate key '1'"):
        load_job("1: a\n'1': b\n", "j")


def test_merge_keys_may_be_overridden_but_explicit_keys_not_repeated() -> None:
    text = "base: &b {cpu: 1, gpu: 2}\nrole:\n  <<: *b\n  cpu: 4\n"
    assert load_job(text, "j").value["role"] == {"cpu": 4, "gpu": 2}
    assert load_job("a: 1\n<<: {a: 2, b: 3}\n", "j").value == {"a": 1, "b": 3}


def test_explicit_tags_follow_js_yaml() -> None:
    assert load_job("- !!str 12\n- ! 12\n- !!float '1'\n", "j").value == ["12", "12", 1]
    with pytest.raises(YamlError, match="cannot read '1.5' as !!int"):
        load_job("a: !!int 1.5\n", "j")
    with pytest.raises(YamlError, match="unknown tag"):
        load_job("a: !python/object 1\n", "j")


def test_yaml11_and_yaml12_differences_are_noted_with_their_line() -> None:
    notes = load_job("a: 1\nb: no\nc: [1e3, 'on']\n", "j").lines.notes
    assert [(n.path, n.line, n.text) for n in notes] == [(("b",), 2, "no"), (("c", 0), 3, "1e3")]
    assert "the string 'no'" in notes[0].message() and "false" in notes[0].message()
    assert yaml11_difference("1") is None and yaml11_difference("1.0") is None
    assert yaml11_difference("off") == ("off", False)


def test_values_files_keep_yaml11_typing_with_the_same_bounds() -> None:
    assert load_values("enabled: no\nlr: 1e-3\n", "v").value == {"enabled": False, "lr": "1e-3"}
    assert load_values("a: 1\na: 2\n", "v").lines.duplicates == [(("a",), 2)]
    with pytest.raises(YamlError, match="recursive alias"):
        load_values("a: &a [*a]\n", "v")


def test_values_files_read_plain_scalars_as_pyyaml_does() -> None:
    # resolve_yaml11 reads nulls, booleans and decimal integers without PyYAML's constructor
    import yaml

    from paijob.openpai.yamlscalars import resolve_yaml11

    texts = ["", "~", "null", "Null", "NULL", "yes", "No", "ON", "off", "True", "FALSE", "y", "0", "7", "123",
             "0123", "00", "08", "1_000", "0x1F", "0b101", "+5", "-5", "1:30", "1.5", ".inf", "12e3", "٣",
             "2024-01-02", "x"]
    for text in texts:
        expected = yaml.safe_load(text)
        assert (resolve_yaml11(text), type(resolve_yaml11(text))) == (expected, type(expected)), text


@pytest.mark.parametrize(
    ("number", "text"),
    [(1000, "1000"), (1e-05, "0.00001"), (1e-7, "1e-7"), (1e21, "1e+21"), (0.1, "0.1"),
     (-2.5, "-2.5"), (123456.789, "123456.789"), (math.inf, "Infinity"), (2**60, "1152921504606847000")],
)
def test_numbers_print_as_javascript_prints_them(number: float, text: str) -> None:
    assert js_number(number) == text


def test_values_print_as_javascript_prints_them() -> None:
    value = load_job("a: [true, null, 1e-7, 2001-12-14]\nb: {c: 1}\n", "j").value
    assert js_string(value["a"]) == "true,,1e-7,Fri Dec 14 2001 00:00:00 GMT+0000 (Coordinated Universal Time)"
    assert js_string(value["b"]) == "[object Object]"


# --------------------------------------------------------------------------- bounds


def billion_laughs(levels: int, fan: int) -> str:
    lines = [f"a0: &a0 [{','.join(['lol'] * fan)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * fan)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("size", [367, 413])
def test_alias_bombs_are_refused_at_once(size: int) -> None:
    text = billion_laughs(9, 9)
    text = text + "#" * (size - len(text) - 1) + "\n" if len(text) < size else text
    assert len(text) <= 440
    start = time.process_time()  # this process's CPU: a busy machine's wait is not the parser's
    with pytest.raises(YamlError, match="expands to more than"):
        load_job(text, "bomb.yaml")
    assert time.process_time() - start < 1.0


def test_recursive_alias_deep_nesting_and_non_utf8_are_errors() -> None:
    with pytest.raises(YamlError, match=r"j:1:8: .*recursive alias \*a"):
        load_job("a: &a [*a]\n", "j")
    with pytest.raises(YamlError, match="nesting deeper than"):
        load_job("[" * 100_000 + "]" * 100_000, "j")
    with pytest.raises(YamlError, match=r"j:2: invalid YAML: not UTF-8 text \(byte 0xff"):
        load_job(b"a: 1\nb: \xff\n", "j")


def test_huge_integers_read_as_javascript_doubles_quickly() -> None:
    start = time.process_time()  # this process's CPU: a busy machine's wait is not the parser's
    assert load_job("a: " + "7" * 5000 + "\n", "j").value == {"a": math.inf}
    assert load_job("a: -" + "7" * 400 + "\n", "j").value == {"a": -math.inf}
    assert time.process_time() - start < 1.0


def test_yaml_errors_are_paijob_errors_with_file_line_column() -> None:
    with pytest.raises(PaijobError, match=r"^j:1:6: invalid YAML: .*quoted scalar"):
        load_job("a: 'x", "j")


@pytest.mark.parametrize(
    "content",
    [
        billion_laughs(9, 9).encode(),
        b"a: &a [*a]\n",
        b"[" * 50_000,
        b"cpu: " + b"9" * 5000 + b"\n",
        b"\xff\xfe\x00garbage",
    ],
)
def test_validate_cli_refuses_hostile_yaml_with_one_line_and_exit_2(
    content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_bytes(content)
    start = time.process_time()  # this process's CPU: a busy machine's wait is not the parser's
    code, out, err = paijob(capsys, "validate", str(job))
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    assert time.process_time() - start < 2.0
