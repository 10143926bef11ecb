"""OpenPAI's exit spec (paijob.openpai.exitspec): the data, the code the runtime reports, the retry decision.

The data is compared field by field with OpenPAI's own ``k8s-job-exit-spec.yaml`` (MIT, Microsoft; copied
unchanged beside this file from microsoft/pai a95d9420e, ``src/k8s-job-exit-spec/config/``): what a user sees
in the job's ``appExitSpec`` and how often a failed attempt is retried both come from it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from paijob.openpai import exitspec
from paijob.openpai.exitspec import ContainerExit, RetryDecision

UPSTREAM = yaml.safe_load((Path(__file__).parent / "k8s-job-exit-spec.yaml").read_text())["spec"]


def _pattern(theirs: dict) -> tuple[object, ...]:
    return (theirs.get("exitCode"), theirs.get("userLogRegex"), theirs.get("platformLogRegex"),
            bool((theirs.get("gpuInfo") or {}).get("nvidiaDoubleEccError")))


def test_the_spec_lists_openpais_codes_in_openpais_order():
    assert [entry["code"] for entry in UPSTREAM] == [entry.code for entry in exitspec.SPEC]


@pytest.mark.parametrize("theirs", UPSTREAM, ids=lambda entry: str(entry["code"]))
def test_each_entry_is_openpais_field_by_field(theirs):
    ours = exitspec.spec_for(theirs["code"])
    fields = ("phrase", "issuer", "causer", "type", "stage", "behavior", "reaction", "reason")
    assert {f: getattr(ours, f) for f in fields} == {f: theirs.get(f, "" if f == "reason" else None) for f in fields}
    patterns = (theirs.get("pattern") or {}).get("runtimeContainerPatterns") or []
    assert [_pattern(p) for p in patterns] == [
        (p.exit_code, p.user_log_regex, p.platform_log_regex, p.needs_gpu_ecc_error) for p in ours.patterns]


def test_every_reaction_in_the_spec_is_one_the_retry_decision_knows():
    assert {entry.reaction for entry in exitspec.SPEC} == {
        exitspec.ALWAYS_RETRY, exitspec.ALWAYS_BACKOFF_RETRY, exitspec.RETRY_TO_MAX, exitspec.NEVER_RETRY}


def test_the_rest_api_shows_an_entry_without_its_patterns():
    assert exitspec.spec_for(137).as_json() == {
        "code": 137, "phrase": "ContainerSigKillReceived", "issuer": "PAI_OS", "causer": "PAI_OS",
        "type": "PLATFORM_FAILURE", "stage": "RUNNING", "behavior": "TRANSIENT", "reaction": "ALWAYS_RETRY",
        "reason": "Container killed by OS Signal: SIGKILL", "repro": []}


@pytest.mark.parametrize(("code", "like"), [(77, 256), (1, 256), (257, 256), (-5, -8000), (-9000, -8000)])
def test_a_code_the_spec_lacks_is_described_by_the_rest_servers_fallback(code, like):
    fallback = exitspec.spec_for(like)
    assert exitspec.spec_for(code) == exitspec.ExitSpec(
        code, fallback.phrase, fallback.issuer, fallback.causer, fallback.type, fallback.stage, fallback.behavior,
        fallback.reaction, fallback.reason, ())


@pytest.mark.parametrize(("code", "phrase"), [
    (exitspec.STOP_REQUESTED_CODE, "StopFrameworkRequested"),
    (exitspec.ATTEMPT_COMPLETION_CODE, "FrameworkAttemptCompletion"),
    (exitspec.DEFAULT_RUNTIME_EXIT_CODE, "PAIRuntimeUnknownFailed"),
    (exitspec.POSITIVE_FALLBACK_CODE, "PAIRuntimeExitAbnormally"),
    (exitspec.NEGATIVE_FALLBACK_CODE, "ContainerUndefinedNegativeExitCode"),
])
def test_the_codes_paijob_reports_itself_are_the_specs(code, phrase):
    assert exitspec.spec_for(code).phrase == phrase and exitspec.spec_for(code).code == code


def test_the_runtime_searches_the_last_10_mib_of_the_log():
    assert exitspec.MAX_SEARCH_LOG_BYTES == 10 * 1024 * 1024  # openpai-runtime's error_aggregator.go


@pytest.mark.parametrize(("code", "log", "platform_log", "reported"), [
    (0, "Traceback\nImportError: No module named foo\n", "", ContainerExit(0, 0, None)),
    (1, "Traceback\nImportError: No module named foo\nmore\n", "", ContainerExit(232, 1, "ImportError: No module named foo")),
    (1, "bad argument #2 to 'load'\nnext", "", ContainerExit(228, 1, "bad argument #2 to 'load'")),
    (127, "sh: foo: command not found", "", ContainerExit(220, 127, "command not found")),
    (137, "", "", ContainerExit(137, 137, None)),  # the exit code alone matched: no text
    (10, "", "init: SSH barrier reaches max retry count (3)", ContainerExit(249, 10, "SSH barrier reaches max retry count")),
    (10, "SSH barrier reaches max retry count", "", ContainerExit(255, 10, None)),  # the platform's log, not the user's
    (11, "", "SSH barrier reaches max retry count", ContainerExit(255, 11, None)),  # and exit code 10 too
    (128, "", "", ContainerExit(255, 128, None)),  # 128 needs nvidia-smi's double-ECC count, never seen here
    (3, "all good", "", ContainerExit(255, 3, None)),
])
def test_the_code_the_runtime_reports_and_the_log_text_it_matched(code, log, platform_log, reported):
    found = exitspec.container_exit(code, log, platform_log)
    assert found == reported
    assert found.spec == exitspec.spec_for(reported.code)


@pytest.mark.parametrize(("code", "retries", "limit", "decision"), [
    (0, 0, 5, RetryDecision(False, False, False)),  # success is never retried
    (0, 0, -1, RetryDecision(False, False, False)),
    (137, 9, 0, RetryDecision(True, False, True)),  # ALWAYS_RETRY: whatever jobRetryCount says
    (251, 9, 0, RetryDecision(True, False, True)),  # ALWAYS_BACKOFF_RETRY (gang allocation timeout) too
    (232, 0, 5, RetryDecision(False, False, False)),  # NEVER_RETRY, whatever the limit
    (232, 0, -1, RetryDecision(False, False, False)),
    (255, 0, -1, RetryDecision(True, True, True)),  # RETRY_TO_MAX with jobRetryCount -1: no limit
    (255, 99, -1, RetryDecision(True, True, True)),
    (255, 0, 0, RetryDecision(False, True, False)),  # jobRetryCount 0 (the default): not retried
    (255, 0, 1, RetryDecision(True, True, False)),
    (255, 1, 1, RetryDecision(False, True, False)),  # the limit reached
    (255, 2, 1, RetryDecision(False, True, False)),
    (77, 0, 1, RetryDecision(True, True, False)),  # unlisted: described as 256, RETRY_TO_MAX
    (1, 0, 1, RetryDecision(True, True, False)),
    (-1, 0, 1, RetryDecision(True, True, False)),  # unlisted negative: -8000, RETRY_TO_MAX
    (-5, 1, 1, RetryDecision(False, True, False)),  # unlisted negative: -8000, RETRY_TO_MAX
    (-210, 0, 5, RetryDecision(False, False, False)),  # stopped by the user
])
def test_frameworkcontrollers_fancy_retry_decision(code, retries, limit, decision):
    assert exitspec.retry_decision(code, retries, limit) == decision
