"""The local cluster's settings from the environment, checked once when the server starts.

A value read for the first time in the middle of a job (``PAIJOB_LOCAL_STOP_GRACE=abc``
at the first stop) would crash the job's runner and leave its tasks running. So
``check()`` reads every setting when the server (and ``paijob local up``) starts and
names the first bad one in one line; afterwards the readers below cannot fail.
"""

from __future__ import annotations

import getpass
import math
import os
import re

from paijob.common import contract, ports
from paijob.errors import PaijobError

STOP_GRACE = contract.LOCAL_STOP_GRACE
RETRY_CAP = contract.LOCAL_UNLIMITED_RETRY_CAP
CGROUP = contract.LOCAL_CGROUP
MAX_STOP_GRACE = 3600.0
MAX_RETRY_CAP = 1000
# a user name is a path component (logs/, work/, outputs/ <user>~<job>) and half of every job id
_USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


class LocalSettingError(PaijobError):
    """A local-cluster setting in the environment has a value it cannot use."""


def stop_grace() -> float:
    """Seconds between SIGTERM and SIGKILL when tasks are stopped (default 5)."""
    raw = os.environ.get(STOP_GRACE, "5").strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (0 <= value <= MAX_STOP_GRACE):  # also NaN
        raise LocalSettingError(f"{STOP_GRACE}={raw!r} is not a number of seconds from 0 to {MAX_STOP_GRACE:g} "
                                f"(e.g. {STOP_GRACE}=5); unset it for the default, 5")
    return value


def unlimited_retry_cap() -> int:
    """How many retries the local cluster allows where OpenPAI's would retry without limit (default 3)."""
    raw = os.environ.get(RETRY_CAP, "3").strip()
    if not raw.isdigit() or int(raw) > MAX_RETRY_CAP:
        raise LocalSettingError(f"{RETRY_CAP}={raw!r} is not a whole number from 0 to {MAX_RETRY_CAP}; "
                                "unset it for the default, 3")
    return int(raw)


def cgroup_wanted() -> bool:
    """False when ``PAIJOB_LOCAL_CGROUP=0`` turns the cgroup per task off (default 1: use one where possible)."""
    raw = os.environ.get(CGROUP, "1").strip()
    if raw not in ("0", "1"):
        raise LocalSettingError(f"{CGROUP}={raw!r} must be 0 (no cgroup per task) or 1 (a cgroup per task "
                                "where the system allows it, the default)")
    return raw == "1"


def openpai_before_1_6() -> bool:
    """``PAIJOB_OPENPAI_BEFORE_1_6=1``: run role names that OpenPAI v1.6+'s init container cannot find (default 0)."""
    raw = os.environ.get(contract.OPENPAI_BEFORE_1_6, "0").strip()
    if raw not in ("0", "1"):
        raise LocalSettingError(f"{contract.OPENPAI_BEFORE_1_6}={raw!r} must be 0 (the local cluster behaves as OpenPAI "
                                "v1.6+, the default) or 1 (as an older OpenPAI)")
    return raw == "1"


def openpai_version() -> str:
    """The OpenPAI version the local cluster's ``GET /api/v2/info`` answers, the one it behaves as: a client that
    asks (``paijob submit``) then judges role names as this cluster runs them."""
    return "v1.5.0" if openpai_before_1_6() else "v1.8.0"


def user_name() -> str:
    """The user the local cluster runs jobs as: the login name (``USER``, ``LOGNAME``, else the account's)."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        return "local"
    if not _USER_NAME.fullmatch(name):
        raise LocalSettingError(
            f"the user name {name[:80]!r} (from USER / LOGNAME) cannot name the local cluster's user: it becomes "
            "part of job ids and folder names, so it takes letters, digits, '_', '.' and '-' (at most 64, not "
            "starting with '.' or '-'); set USER to your login name")
    return name


_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def passed_env() -> frozenset[str]:
    """``PAIJOB_LOCAL_PASS_ENV``: variables the tasks get although they look like credentials (default none)."""
    raw = os.environ.get(contract.LOCAL_PASS_ENV, "")
    names = [name for name in re.split(r"[\s,]+", raw) if name]
    bad = [name for name in names if not _VARIABLE.fullmatch(name)]
    if bad:  # never repeated: a value here may be the credential itself, given where its name belongs
        raise LocalSettingError(f"{contract.LOCAL_PASS_ENV} takes names of environment variables (letters, digits "
                                f"and _, separated by commas or spaces, e.g. {contract.LOCAL_PASS_ENV}=DATABASE_URL,"
                                f"KAGGLE_KEY); {len(bad)} of its words are not (not shown here)")
    return frozenset(names)


def check() -> None:
    """Read every setting once; ``LocalSettingError`` names the first bad one."""
    stop_grace()
    unlimited_retry_cap()
    cgroup_wanted()
    openpai_before_1_6()
    passed_env()
    user_name()
    try:
        ports.candidates()  # PAIJOB_PORT_RANGE: where task ports come from, outside the kernel's ephemeral range
    except ports.PortRangeError as problem:
        raise LocalSettingError(str(problem)) from None
