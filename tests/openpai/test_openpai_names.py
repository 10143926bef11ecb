"""OpenPAI's names (paijob.openpai.names): role names in variable names, framework object names, name patterns.

Each row is what OpenPAI itself does with a name (rest-server ``name.js``, ``protocol.js``, openpai-runtime
``framework_parser.py``), so a job that paijob accepts is a job OpenPAI accepts and names alike.
"""

from __future__ import annotations

import pytest

from paijob.openpai.names import (
    IDENTIFIER_PATTERN,
    NAME_PATTERN,
    PAI_TAG_PATTERN,
    before_init_role_lookup,
    framework_object_name,
    init_role_failure,
    js_match,
    role_name_breaks_init,
    role_name_fix,
    runtime_role_name,
)


@pytest.mark.parametrize(("pattern", "text", "matches"), [
    (NAME_PATTERN, "job-1_a", True),
    (NAME_PATTERN, "job 1", False),
    (NAME_PATTERN, "job1\n", False),  # JavaScript's $ is the end, not "before a final newline"
    (NAME_PATTERN, "", False),
    (IDENTIFIER_PATTERN, "worker_2", True),
    (IDENTIFIER_PATTERN, "_w", True),
    (IDENTIFIER_PATTERN, "2worker", False),
    (IDENTIFIER_PATTERN, "worker\n", False),
    (PAI_TAG_PATTERN, "python train.py --lr <% $parameters.lr %>", True),  # unanchored: found anywhere
    (PAI_TAG_PATTERN, "python train.py", False),
])
def test_name_patterns_match_as_javascript_matches(pattern, text, matches):
    assert js_match(pattern, text) is matches


@pytest.mark.parametrize(("role", "runtime"), [
    ("worker", "worker"),
    ("Worker_A", "workera"),
    ("ps_Server-1", "psserver1"),
    ("___", ""),
])
def test_the_runtime_writes_role_names_lowercased_and_alphanumeric(role, runtime):
    assert runtime_role_name(role) == runtime


@pytest.mark.parametrize(("job_id", "name"), [
    ("alice~job1", "676d8cb383f3ce50f9d1603cd181eed5"),  # md5 of the job id (encodeName)
    ("Some_Job", "somejob"),  # not a job id: convertName
    ("unknownFoo_1", "foo1"),  # a leading "unknown" goes
    ("unknown~job", "job"),  # even with a "~"
])
def test_the_framework_object_name_is_rest_servers_encode_name(job_id, name):
    assert framework_object_name(job_id) == name


@pytest.mark.parametrize(("role", "breaks"), [("worker", False), ("w2", False), ("Worker", True),
                                              ("ps_server", True)])
def test_roles_that_openpai_1_6_init_cannot_find_are_those_the_conversion_changes(role, breaks):
    assert role_name_breaks_init(role) is breaks


@pytest.mark.parametrize(("role", "fix"), [
    ("Worker_A", "rename the role to 'workera' (lowercase letters and digits only), or, for a cluster older "
                 "than OpenPAI v1.6, set PAIJOB_OPENPAI_BEFORE_1_6=1 (or pass --openpai-before-1.6)"),
    ("___", "rename the role (lowercase letters and digits only), or, for a cluster older than OpenPAI v1.6, "
            "set PAIJOB_OPENPAI_BEFORE_1_6=1 (or pass --openpai-before-1.6)"),
])
def test_the_fix_for_such_a_role_names_the_new_name_and_the_setting(role, fix):
    assert role_name_fix(role, "PAIJOB_OPENPAI_BEFORE_1_6") == fix


def test_the_init_failure_says_what_openpai_looks_up():
    assert init_role_failure("Worker") == (
        "role 'Worker' is looked up as 'worker' by the init container of OpenPAI v1.6.0 (openpai-runtime "
        "v0.1.10) and later (KeyError in initializer.py: the job config names it 'Worker'), so the task "
        "exits 1 before its commands run")


@pytest.mark.parametrize(("version", "older"), [
    ("v1.5.0", True), ("v1.5.3", True), ("v0.14.0", True), ("1.2", True), ("  v1.5.9", True), ("v0.99", True),
    ("v1.6.0", False), ("v1.6", False), ("v1.7.0", False), ("v1.8.1", False), ("v2.0.0", False), ("v2.5", False),
    ("1.10.0", False),
    ("paijob", None), ("", None), ("v1", None), (None, None), (1.5, None),
])
def test_the_rest_server_version_says_whether_the_cluster_is_older_than_1_6(version, older):
    """GET /api/v2/info's version decides the role-name rule: v1.6.0 is the first whose init container
    looks role names up converted; a version that says nothing readable leaves the rule to the user."""
    assert before_init_role_lookup(version) is older
