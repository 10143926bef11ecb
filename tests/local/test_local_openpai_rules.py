"""paijob's model of OpenPAI's exit spec and command rendering, checked case by case.

The exit spec's data is compared field by field with OpenPAI's own ``k8s-job-exit-spec.yaml`` in
tests/openpai/test_openpai_exitspec.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from paijob.openpai import exitspec
from paijob.openpai.markers import (
    TemplateError,
    js_number,
    js_string,
    render_runtime,
    render_server,
    role_entrypoint,
)

# --------------------------------------------------------------------------- exit spec


@pytest.mark.parametrize(("user_code", "log", "reported"), [
    (0, "ImportError: x", 0),
    (1, "", 255),  # no pattern: the runtime's default
    (2, "some output", 255),
    (143, "", 143), (137, "", 137), (130, "", 130), (131, "", 131),
    (132, "", 132), (135, "", 135), (136, "", 136), (141, "", 141),
    (139, "", 139), (134, "", 134),
    (1, "Traceback (most recent call last):\nImportError: No module named foo\n", 232),
    (1, "ModuleNotFoundError... importerror: lower case too", 232),
    (127, "bash: nosuchcmd: command not found", 220),
    (1, "bash: nosuchcmd: command not found", 255),  # 220's pattern needs exit code 127 too
    (1, "Segmentation fault (core dumped)", 234),  # first matching entry wins: 234 before 235
    (137, "ImportError: x", 137),  # exit-code entries come first in the spec
    (129, "", 255),  # a signal the spec does not list
])
def test_the_runtime_reports_the_spec_code(user_code: int, log: str, reported: int) -> None:
    assert exitspec.container_exit(user_code, log).code == reported


@pytest.mark.parametrize(("code", "retry", "counted", "unlimited"), [
    (130, True, False, True), (131, True, False, True), (137, True, False, True), (143, True, False, True),
    (253, True, False, True),  # port conflict
    (132, False, False, False), (135, False, False, False), (136, False, False, False), (141, False, False, False),
    (232, False, False, False), (220, False, False, False),
    (255, False, True, False),  # RETRY_TO_MAX with jobRetryCount 0
    (139, False, True, False),  # SIGSEGV is RETRY_TO_MAX, not "never"
])
def test_retry_classes_with_job_retry_count_0(code: int, retry: bool, counted: bool, unlimited: bool) -> None:
    assert exitspec.retry_decision(code, 0, 0) == exitspec.RetryDecision(retry, counted, unlimited)


def test_retry_to_max_counts_against_job_retry_count() -> None:
    assert exitspec.retry_decision(255, 0, 2).retry and exitspec.retry_decision(255, 1, 2).retry
    assert not exitspec.retry_decision(255, 2, 2).retry
    assert exitspec.retry_decision(139, 0, 1) == exitspec.RetryDecision(True, True, False)


def test_codes_missing_from_the_spec_use_the_rest_server_fallbacks() -> None:
    assert exitspec.spec_for(77).phrase == "PAIRuntimeExitAbnormally" and exitspec.spec_for(77).code == 77
    assert exitspec.spec_for(-5).phrase == "ContainerUndefinedNegativeExitCode"
    assert exitspec.spec_for(-210).type == "USER_STOP"


# --------------------------------------------------------------------------- rendering


@pytest.mark.parametrize(("value", "text"), [
    (True, "true"), (False, "false"), (0.00001, "0.00001"), (1e-7, "1e-7"), (1e21, "1e+21"), (1.0, "1"),
    (2.5, "2.5"), (123, "123"), (["a", "b"], "a,b"), ([1, None, True], "1,,true"), ({"a": 1}, "[object Object]"),
    ("text", "text"), (float("inf"), "Infinity"), (None, "null"),
])
def test_values_are_written_as_javascript_writes_them(value: Any, text: str) -> None:
    assert js_string(value) == text


def test_js_number_switches_to_exponent_form_where_javascript_does() -> None:
    assert [js_number(x) for x in (1e-6, 1e-7, 1e20, 123456789012345680000.0, -0.5)] == [
        "0.000001", "1e-7", "100000000000000000000", "123456789012345680000", "-0.5"]


CONTEXT = {"$parameters": {"a": True, "lr": 0.00001, "l": ["x", "y"], "n": None, "d": {"k": "v"}}}


@pytest.mark.parametrize(("template", "rendered"), [
    ("--a <% $parameters.a %> --lr <%$parameters.lr%>", "--a true --lr 0.00001"),
    ("<% $parameters.l %> <% $parameters.l[0] %> <% $parameters.l.length %>", "x,y x 2"),
    ("<% $parameters.d.k %> <% $parameters.d %>", "v [object Object]"),
    ("<% $parameters.n %>|<% $parameters.missing[1] %>|<% $secrets.s %>",
     "<% $parameters.n %>|<% $parameters.missing.1 %>|<% $secrets.s %>"),
    ("a <%! a comment %>b", "a b"),
    ("keep\n  <% #x %>\n  dropped <% $parameters.a %>\n  <% /x %>\nend", "keep\nend"),
    ("  ${#x} and {{ jinja }}  ", "${#x} and {{ jinja }}"),
])
def test_the_rest_server_renders_parameters_and_writes_back_what_it_cannot(template: str, rendered: str) -> None:
    assert render_server(template, CONTEXT) == rendered


def test_an_unclosed_tag_is_an_error_as_in_mustache() -> None:
    with pytest.raises(TemplateError, match="Unclosed tag"):
        render_server("echo <% oops", CONTEXT)


def test_the_runtime_renders_secrets_html_escaped_and_blanks_unknown_tags() -> None:
    command = "login <% $secrets.pw %> <% $secrets.list[1] %> <% $parameters.unknown %> <% $secrets.none %>|"
    assert render_runtime(command, {"pw": "a<b>&'\"", "list": ["p", "q"]}) == "login a&lt;b&gt;&amp;&#x27;&quot; q  |"


def test_without_secrets_the_runtime_leaves_the_command_alone() -> None:
    command = "run <% $parameters.unknown %> <% $secrets.x %>"
    assert render_runtime(command, None) == command
    assert render_runtime(command, {}) == command


def test_script_data_output_are_the_named_prerequisites() -> None:
    job = {
        "prerequisites": [{"type": "script", "name": "s", "uri": "https://x/s.git"},
                          {"type": "data", "name": "d", "uri": ["/data/a", "/data/b"]},
                          {"type": "output", "name": "o", "uri": "/out"}],
        "taskRoles": {"w": {"script": "s", "data": "d", "output": "o",
                            "commands": ["git clone <% $script.uri %>", "ls <% $data.uri %> <% $data.uri[1] %>",
                                         "cp x <% $output.uri %>"]}},
    }
    assert role_entrypoint(job, "w") == "git clone https://x/s.git\nls /data/a,/data/b /data/b\ncp x /out"


def test_deployments_wrap_only_the_roles_they_name() -> None:
    job = {
        "defaults": {"deployment": "dep"},
        "deployments": [{"name": "dep", "taskRoles": {"a": {"preCommands": ["pre"], "postCommands": ["post"]}}}],
        "taskRoles": {"a": {"commands": ["main"]}, "b": {"commands": ["other"]}},
    }
    assert role_entrypoint(job, "a") == "pre\nmain\npost"
    assert role_entrypoint(job, "b") == "other"
    del job["defaults"]
    assert role_entrypoint(job, "a") == "main"
