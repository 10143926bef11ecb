"""Exit codes of ``paijob-runtime train``, chosen for OpenPAI's retry policy.

OpenPAI classifies a task container's exit code with its job exit spec
(microsoft/pai ``src/k8s-job-exit-spec/config/k8s-job-exit-spec.yaml``; the
runtime's matcher is microsoft/openpai-runtime
``go/pkg/aggregator/error_aggregator.go``). Only a few codes are recognised
by the exit code alone:

* 130 (SIGINT), 131 (SIGQUIT), 137 (SIGKILL), 143 (SIGTERM): ``PLATFORM_FAILURE``,
  ``TRANSIENT`` → ``ALWAYS_RETRY``;
* 132 (SIGILL), 135 (SIGBUS), 136 (SIGFPE), 141 (SIGPIPE):
  ``USER_FAILURE``, ``PERMANENT`` → ``NEVER_RETRY``; 134 (SIGABRT) and 139 (SIGSEGV):
  unknown → ``RETRY_TO_MAX``;
* anything else that no log pattern matches becomes 255
  ``PAIRuntimeUnknownFailed`` → ``RETRY_TO_MAX``: retried only up to the job's
  ``jobRetryCount`` (default 0, i.e. never).

So an infrastructure failure (the master never came up, the rendezvous
store or a peer node vanished) exits 143, the one code OpenPAI always
retries without implying a user bug; a user-code failure passes the failing
worker's own status through (an exception is 1 → never retried unless the
job asks for retries; a worker killed by signal N is 128+N, classified as
above); a configuration error is 2.

``RUNTIME_EXIT_CODES`` below is the table; the documentation's exit-code page is generated from it.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from paijob.errors import EXIT_INTERRUPTED, PaijobError
from paijob.openpai import exitspec

OK = 0
USER_FAILURE = 1  # fallback when a worker's own code is unknown
CONFIG_ERROR = 2
INFRA_FAILURE = 143  # = 128 + SIGTERM: OpenPAI's transient, always-retried class
INTERRUPTED = EXIT_INTERRUPTED  # 130, as the paijob command
HANG = 124  # the hang watch ended the job (coreutils' timeout uses 124 for "timed out")
DIVERGED = 136  # a built-in recipe's training went non-finite: 128 + SIGFPE, which OpenPAI never retries
# The image cannot run the command (no torch): the shell's "command not found", with those words in the line,
# which OpenPAI's exit spec reports as 220 UserCommandExitWithError, PERMANENT / NEVER_RETRY, as it does for the
# templates' install step that cannot install paijob. Any other code for it falls to 255, RETRY_TO_MAX: a retry
# into the same image, which fails the same way.
NOT_RUNNABLE = 127
NOT_RUNNABLE_WORDS = "command not found"


@dataclass(frozen=True)
class ExitCodeMeaning:
    """One row of the exit-code table: the codes, what they mean, and codes to ask OpenPAI's exit spec about."""

    codes: str
    meaning: str
    examples: tuple[int, ...]
    log: str = ""  # the line the runtime prints with these codes, where OpenPAI's exit spec reads it


RUNTIME_EXIT_CODES = (
    ExitCodeMeaning("0", "every worker on every node succeeded", (OK,)),
    ExitCodeMeaning("1–127", "a worker failed: the root-cause worker's own exit code (a Python exception is 1); "
                    "a node whose peer failed this way exits with the same code", (USER_FAILURE, 3)),
    ExitCodeMeaning("2", "configuration error: missing or inconsistent `PAI_*` variables, bad options, script or "
                    "module not found, a `per-node` script that sets its own `MASTER_ADDR`/`MASTER_PORT`, "
                    "`--mode horovod` outside MPI; fix the job YAML", (CONFIG_ERROR,)),
    ExitCodeMeaning("127", "the image cannot run `train`: torch is not importable; the one line says "
                    f"`{NOT_RUNNABLE_WORDS}` so that OpenPAI never retries the task into the same image",
                    (NOT_RUNNABLE,), log=NOT_RUNNABLE_WORDS),
    ExitCodeMeaning("128+N", "a worker was killed by signal N", (134, 135, 137, 139)),
    ExitCodeMeaning("143", "infrastructure failure: master unreachable within `--master-timeout`, rendezvous "
                    "failed or port taken, peer node or store lost; also SIGTERM received (job stopped)",
                    (INFRA_FAILURE,)),
    ExitCodeMeaning("130", "interrupted (SIGINT)", (INTERRUPTED,)),
    ExitCodeMeaning("124", "hang: no rank made progress for `--hang-timeout`, or a busy straggler kept the "
                    "others waiting past `--hang-hard-limit` times it (coreutils' `timeout` code); a hang can "
                    "be the script's own bug, which a retry repeats", (HANG,)),
    ExitCodeMeaning("136", "a built-in recipe diverged: its loss was non-finite for `--max-nonfinite-steps` "
                    "consecutive steps, its fp16 loss scale collapsed, or its weights went non-finite; "
                    "one line names the step, the precision and what to try (128 + SIGFPE: a retry "
                    "would diverge again; a worker killed by SIGFPE exits 136 too)", (DIVERGED,)),
)


def openpai_verdict(code: int, log: str = "") -> tuple[int, str]:
    """(the code OpenPAI reports, its retry reaction) for a task that exited ``code`` with ``log``."""
    if code == OK:
        return OK, "—"
    reported = exitspec.container_exit(code, log)
    return reported.code, reported.spec.reaction


def from_worker_status(returncode: int) -> int:
    """Container exit code for a worker's ``Popen.returncode`` (negative = killed by signal)."""
    if returncode < 0:
        return 128 + (-returncode)
    if returncode == 0:
        return OK
    return min(returncode, 255)


def from_signal(signum: int) -> int:
    return 128 + int(signum)


def describe_status(returncode: int) -> str:
    """``exit code 3`` / ``signal SIGSEGV`` for a ``Popen.returncode``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"signal {name}"
    return f"exit code {returncode}"


class InfrastructureError(PaijobError):
    """Not the user's code and not the job's configuration: the cluster (retryable, exit 143)."""

    exit_code = INFRA_FAILURE
