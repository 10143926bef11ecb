"""The OpenPAI job exit spec as data: exit codes, their retry class, and the runtime's log patterns.

Source: pai ``src/k8s-job-exit-spec/config/k8s-job-exit-spec.yaml`` (copy in
``shared/reference/openpai/upstream``), every entry's ``code``, ``phrase``, ``type``,
``behavior``, ``reaction``, ``reason`` and ``pattern.runtimeContainerPatterns``.
How the pieces are used, from the same sources:

* openpai-runtime ``go/pkg/aggregator/error_aggregator.go``: when the user
  command exits non-zero, the runtime walks the spec **in order** and the first
  entry with a runtime pattern that matches (``exitCode`` equal when given,
  ``userLogRegex`` found in the last 10 MiB of the task's combined log,
  ``platformLogRegex`` in the runtime's log) gives the container exit code; when
  none matches the container exits **255** (``defaultExitCode``). So ``exit 1``
  is reported as 255, ``ImportError: ...`` in the log as 232, ``exit 143`` as 143.
* frameworkcontroller's fancy retry policy (rest-server ``models/v2/job/k8s.js``
  sets ``fancyRetryPolicy: true``, ``maxRetryCount: jobRetryCount``) reads the
  ``reaction``: ``ALWAYS_RETRY`` / ``ALWAYS_BACKOFF_RETRY`` (transient) are retried
  without limit and without counting against ``jobRetryCount``; ``NEVER_RETRY``
  (permanent) never; ``RETRY_TO_MAX`` (unknown) up to ``jobRetryCount``.
* rest-server ``generateExitSpec``: a code the spec lacks is described by the
  256 entry (positive) or the -8000 entry (negative).

Pure data and functions; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

# openpai-runtime's ErrorAggregator: exit code when no pattern matches, and how much log it searches.
DEFAULT_RUNTIME_EXIT_CODE = 255
MAX_SEARCH_LOG_BYTES = 10 * 1024 * 1024
# rest-server k8s.js: spec entries standing in for codes the spec does not list.
POSITIVE_FALLBACK_CODE = 256
NEGATIVE_FALLBACK_CODE = -8000
# frameworkcontroller completion codes for tasks / attempts ended from outside.
STOP_REQUESTED_CODE = -210  # the user stopped the job
ATTEMPT_COMPLETION_CODE = -220  # the attempt completed, so its remaining tasks were stopped

ALWAYS_RETRY = "ALWAYS_RETRY"
ALWAYS_BACKOFF_RETRY = "ALWAYS_BACKOFF_RETRY"
RETRY_TO_MAX = "RETRY_TO_MAX"
NEVER_RETRY = "NEVER_RETRY"


@dataclass(frozen=True)
class RuntimePattern:
    """One ``runtimeContainerPatterns`` entry: every given field must match."""

    exit_code: int | None
    user_log_regex: str | None
    platform_log_regex: str | None
    needs_gpu_ecc_error: bool = False  # matched on nvidia-smi's double-ECC count, which no local task has


@dataclass(frozen=True)
class ExitSpec:
    code: int
    phrase: str
    issuer: str | None
    causer: str | None
    type: str
    stage: str | None
    behavior: str
    reaction: str
    reason: str
    patterns: tuple[RuntimePattern, ...]

    @property
    def retried_without_limit(self) -> bool:
        """Transient: frameworkcontroller retries it whatever ``jobRetryCount`` says."""
        return self.reaction in (ALWAYS_RETRY, ALWAYS_BACKOFF_RETRY)

    @property
    def never_retried(self) -> bool:
        return self.reaction == NEVER_RETRY

    def as_json(self) -> dict[str, object]:
        """The ``appExitSpec`` / ``containerExitSpec`` object of the REST API (no patterns)."""
        return {"code": self.code, "phrase": self.phrase, "issuer": self.issuer, "causer": self.causer,
                "type": self.type, "stage": self.stage, "behavior": self.behavior, "reaction": self.reaction, "reason": self.reason,
                "repro": []}


def _E(code: int, phrase: str, issuer: str | None, causer: str | None, type_: str, stage: str | None,
       behavior: str, reaction: str, reason: str,
       patterns: tuple[tuple[int | None, str | None, str | None, bool], ...]) -> ExitSpec:
    return ExitSpec(code, phrase, issuer, causer, type_, stage, behavior, reaction, reason,
                    tuple(RuntimePattern(*p) for p in patterns))


# In the yaml's order, which is the order the runtime tries the patterns in.
SPEC: tuple[ExitSpec, ...] = (
    _E(0, 'Succeeded', 'USER_CONTAINER', 'USER_CONTAINER', 'USER_SUCCESS', 'COMPLETING',
       'UNKNOWN', 'NEVER_RETRY', '',
       ()),
    _E(-100, 'ConfigMapExternalDeleted', 'PAI_FC', 'PAI_UNKNOWN', 'PLATFORM_FAILURE', 'UNKNOWN',
       'TRANSIENT', 'ALWAYS_RETRY', 'The ConfigMap of this job attempt is deleted by external unexpectedly',
       ()),
    _E(-101, 'PodExternalDeleted', 'PAI_FC', 'PAI_UNKNOWN', 'PLATFORM_FAILURE', 'UNKNOWN',
       'TRANSIENT', 'ALWAYS_RETRY', 'Pod is deleted by external unexpectedly',
       ()),
    _E(-110, 'ConfigMapLocalCacheCreationTimeout', 'PAI_FC', 'PAI_UNKNOWN', 'PLATFORM_FAILURE', 'LAUNCHING',
       'TRANSIENT', 'ALWAYS_RETRY', 'The ConfigMap of this job attempt does not appear in local cache within timeout, maybe K8S ApiServer is down',
       ()),
    _E(-111, 'PodLocalCacheCreationTimeout', 'PAI_FC', 'PAI_UNKNOWN', 'PLATFORM_FAILURE', 'LAUNCHING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Pod does not appear in local cache within timeout, maybe K8S ApiServer is down',
       ()),
    _E(-120, 'PodCreationTransientError', 'PAI_FC', 'PAI_UNKNOWN', 'PLATFORM_FAILURE', 'LAUNCHING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Failed to create Pod due to transient error',
       ()),
    _E(-200, 'PodCreationPermanentError', 'PAI_FC', 'USER_SUBMISSION', 'USER_FAILURE', 'SUBMITTING',
       'PERMANENT', 'NEVER_RETRY', 'Failed to create Pod due to permanent error, maybe the Pod spec is invalid',
       ()),
    _E(-210, 'StopFrameworkRequested', 'PAI_FC', 'USER_STOP', 'USER_STOP', 'UNKNOWN',
       'PERMANENT', 'NEVER_RETRY', 'User has requested to stop the job',
       ()),
    _E(-220, 'FrameworkAttemptCompletion', 'PAI_FC', 'USER_STOP', 'USER_STOP', 'UNKNOWN',
       'PERMANENT', 'NEVER_RETRY', 'Stop to complete current job attempt',
       ()),
    _E(-230, 'DeleteTaskRequested', 'PAI_FC', 'USER_SCALEDOWN', 'USER_STOP', 'UNKNOWN',
       'PERMANENT', 'NEVER_RETRY', 'User has requested to delete the Task by Job ScaleDown',
       ()),
    _E(-300, 'PodFailedWithoutFailedContainer', 'PAI_FC', 'UNKNOWN', 'UNKNOWN_FAILURE', 'LAUNCHING',
       'UNKNOWN', 'RETRY_TO_MAX', 'Pod failed but without any failed container, may be stopped by K8S',
       ()),
    _E(-310, 'PodCreationUnknownError', 'PAI_FC', 'UNKNOWN', 'UNKNOWN_FAILURE', 'LAUNCHING',
       'UNKNOWN', 'RETRY_TO_MAX', 'Failed to create Pod due to unknown error',
       ()),
    _E(-1000, 'PodEvicted', 'PAI_K8S', 'PAI_K8S', 'PLATFORM_FAILURE', 'RUNNING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Pod is evicted by K8S, maybe its node is out of resource',
       ()),
    _E(-1001, 'PodNodeLost', 'PAI_K8S', 'PAI_K8S', 'PLATFORM_FAILURE', 'RUNNING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Pod lost due to node lost, maybe its kubelet is down for a long time',
       ()),
    _E(-1002, 'PodScheduledToInsufficientResourceNode', 'PAI_K8S', 'PAI_K8S', 'PLATFORM_FAILURE', 'LAUNCHING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Pod is rejected by the kubelet of its node, because it is wrongly scheduled to a node with insufficient required resource',
       ()),
    _E(-1003, 'PodPreemptedForCriticalPod', 'PAI_K8S', 'PAI_K8S', 'PLATFORM_FAILURE', 'RUNNING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Pod is preempted by the kubelet of its node for the admission of other more critical platform Pod',
       ()),
    _E(-1004, 'PodDeadlineExceeded', 'PAI_K8S', 'USER_STOP', 'USER_STOP', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Pod is stopped by the kubelet of its node, because its specified deadline exceeded',
       ()),
    _E(-1005, 'PodNodeAdmissionForbidden', 'PAI_K8S', 'USER_SUBMISSION', 'USER_FAILURE', 'LAUNCHING',
       'PERMANENT', 'NEVER_RETRY', 'Pod is forbidden by the kubelet of its node, maybe it is invalid',
       ()),
    _E(-1006, 'PodNodeAdmissionUnexpectedError', 'PAI_K8S', 'PAI_K8S', 'PLATFORM_FAILURE', 'LAUNCHING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Pod is rejected by the kubelet due to unexpected error',
       ()),
    _E(-1100, 'CreateFrameworkPermanentFailed', 'PAI_DB_CONTROLLER', 'USER_SUBMISSION', 'USER_FAILURE', 'SUBMITTING',
       'PERMANENT', 'NEVER_RETRY', 'Job is submitted to database, but cannot be created in ApiServer due to permanent failures',
       ()),
    _E(-1300, 'InitContainerDockerOOMKilled', 'PAI_DOCKER', 'PAI_RUNTIME', 'PLATFORM_FAILURE', 'LAUNCHING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Init Container killed by docker due to it exceeded the request memory',
       ()),
    _E(-1200, 'UserContainerDockerOOMKilled', 'PAI_DOCKER', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'User Container killed by docker due to it exceeded the request memory',
       ()),
    _E(-1201, 'ContainerDockerCreationError', 'PAI_DOCKER', 'UNKNOWN', 'UNKNOWN_FAILURE', 'LAUNCHING',
       'UNKNOWN', 'RETRY_TO_MAX', 'Failed to create docker container',
       ()),
    _E(-1202, 'ContainerDockerStartCmdPermissionDenied', 'PAI_DOCKER', 'PAI_RUNTIME', 'PLATFORM_FAILURE', 'LAUNCHING',
       'PERMANENT', 'NEVER_RETRY', 'Failed to start docker container due to permission denied',
       ()),
    _E(-1203, 'ContainerDockerStartCmdNotFound', 'PAI_DOCKER', 'PAI_RUNTIME', 'PLATFORM_FAILURE', 'LAUNCHING',
       'PERMANENT', 'NEVER_RETRY', 'Failed to start docker container due to cmd not found',
       ()),
    _E(-1204, 'ContainerDockerStartUnknownError', 'PAI_DOCKER', 'UNKNOWN', 'UNKNOWN_FAILURE', 'LAUNCHING',
       'UNKNOWN', 'RETRY_TO_MAX', 'Failed to start docker container due to unknown error',
       ()),
    _E(-1205, 'ContainerGpuDeviceNotFoundError', 'PAI_DOCKER', 'PAI_HW', 'PLATFORM_FAILURE', 'LAUNCHING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Container failed due to the allocated GPU device is not found on node',
       ()),
    _E(128, 'ContainerMayFailDueToGpuDeviceEccError', 'USER_CONTAINER', 'PAI_HW', 'PLATFORM_FAILURE', 'RUNNING',
       'UNKNOWN', 'RETRY_TO_MAX', 'Container failed may due to GPU ecc error',
       ((None, None, None, True),)),
    _E(130, 'ContainerSigIntReceived', 'PAI_OS', 'PAI_OS', 'PLATFORM_FAILURE', 'RUNNING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Container killed by OS Signal: SIGINT',
       ((130, None, None, False),)),
    _E(131, 'ContainerSigQuitReceived', 'PAI_OS', 'PAI_OS', 'PLATFORM_FAILURE', 'RUNNING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Container killed by OS Signal: SIGQUIT',
       ((131, None, None, False),)),
    _E(132, 'ContainerSigIllReceived', 'USER_CONTAINER', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container killed by OS Signal: SIGILL',
       ((132, None, None, False),)),
    _E(134, 'ContainerSigAbrtReceived', 'USER_CONTAINER', 'UNKNOWN', 'UNKNOWN_FAILURE', 'RUNNING',
       'UNKNOWN', 'RETRY_TO_MAX', 'Container killed by OS Signal: SIGABRT',
       ((134, None, None, False),)),
    _E(135, 'ContainerSigBusReceived', 'USER_CONTAINER', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container killed by OS Signal: SIGBUS',
       ((135, None, None, False),)),
    _E(136, 'ContainerSigFpeReceived', 'USER_CONTAINER', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container killed by OS Signal: SIGFPE',
       ((136, None, None, False),)),
    _E(137, 'ContainerSigKillReceived', 'PAI_OS', 'PAI_OS', 'PLATFORM_FAILURE', 'RUNNING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Container killed by OS Signal: SIGKILL',
       ((137, None, None, False),)),
    _E(139, 'ContainerSigSegvReceived', 'USER_CONTAINER', 'UNKNOWN', 'UNKNOWN_FAILURE', 'RUNNING',
       'UNKNOWN', 'RETRY_TO_MAX', 'Container killed by OS Signal: SIGSEGV',
       ((139, None, None, False),)),
    _E(141, 'ContainerSigPipeReceived', 'USER_CONTAINER', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container killed by OS Signal: SIGPIPE',
       ((141, None, None, False),)),
    _E(143, 'ContainerSigTermReceived', 'PAI_OS', 'PAI_OS', 'PLATFORM_FAILURE', 'RUNNING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Container killed by OS Signal: SIGTERM',
       ((143, None, None, False),)),
    _E(220, 'UserCommandExitWithError', 'USER_CONTAINER', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'User command is invalid',
       ((127, '(?i)command not found', None, False),)),
    _E(221, 'ContainerTensorflowOOMKilled', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Tensorflow failed due to out of memory',
       ((None, '(?mi)tensorflow.*ResourceExhaustedError.*OOM.*', None, False), (None, '(?i)ran out of memory trying to allocate', None, False))),
    _E(222, 'ContainerMPISegvFault', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'MPI failed due to memory segmentation fault',
       ((None, '(?mi)Signal code: Address not mapped.*', None, False),)),
    _E(223, 'ContainerCudaUncorrectableECCError', 'PAI_RUNTIME', 'PAI_HW', 'PLATFORM_FAILURE', 'RUNNING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Container failed due to GPU uncorrectable ECC error',
       ((None, '(?mi)CUDA_ERROR_ECC_UNCORRECTABLE.*', None, False),)),
    _E(224, 'ContainerCudaVersionMismatch', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container failed due to cude version mismatch',
       ((None, '(?i)cuda driver version is insufficient for cuda runtime version', None, False),)),
    _E(225, 'ContainerCudaDnnVersionMismatch', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container failed due to cuda dnn version mismatch',
       ((None, '(?i)dropout supported only in cudnn v', None, False),)),
    _E(226, 'ContainerCudaOOMKilled', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container failed due to out of gpu memory',
       ((None, '(?i)cuda runtime error (2) : out of memory', None, False),)),
    _E(228, 'ContainerIncorrectParameterError', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container failed due to incorrect parameter',
       ((None, '(?i)unknown option', None, False), (None, '(?i)typeerror: dynamic_rnn() got multiple values for keyword argument', None, False), (None, '(?mi)bad argument #2 to .*', None, False), (None, '(?i)invalid argument:', None, False), (None, '(?i)option -start_symbol has no default value', None, False))),
    _E(229, 'ContainerIncorrectDataModelError', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container failed due to incorrect data model',
       ((None, '(?i)perhaps your file is in a different file format', None, False), (None, '(?i)bash: bd5/bd5_bar-train.ids', None, False), (None, '(?i)exception occurred: error opening file', None, False), (None, '(?i)filenotfounderror: [errno 2] no such file or directory', None, False), (None, '(?i)unicodeencodeerror:', None, False), (None, '(?i)unicodedecodeerror', None, False), (None, '(?i)exception: unknown text header name', None, False), (None, '(?i)exception: unknown label header name', None, False), (None, '(?i)eoferror: ran out of input', None, False), (None, '(?mi)utils.lua:.*input/output error', None, False), (None, '(?mi)tensorflow.python.framework.errors.unknownerror:.*input/output error', None, False), (None, '(?mi)cp: failed to close.*input/output error', None, False), (None, '(?mi)exception occurred:.* Input/output error', None, False))),
    _E(230, 'ContainerInvalidSavePath', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container failed due to invalid save path',
       ((None, '(?i)ValueError: Restore called with invalid save path', None, False),)),
    _E(231, 'ContainerSyntaxError', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container failed due to syntax error',
       ((None, '(?i)syntaxerror: invalid syntax', None, False), (None, '(?i)unpicklingerror', None, False), (None, '(?i)assign requires shapes of both tensors to match', None, False), (None, '(?mi)torch/install/share/lua.*c.* exception', None, False), (None, '(?mi)attributeerror:.*has no attribute', None, False), (None, '(?mi)nameerror: name.* is not defined', None, False))),
    _E(232, 'ContainerImportError', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container failed due to error import',
       ((None, '(?mi)importerror:.*', None, False),)),
    _E(233, 'ContainerIndexOutOfRange', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'User code access element which out of range',
       ((None, '(?mi)indexerror:.*index out of range', None, False),)),
    _E(234, 'ContainerSigvFault', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container failed due to segmentation fault',
       ((None, '(?i)segmentation fault', None, False),)),
    _E(235, 'ContainerEngineCoreDump', 'PAI_RUNTIME', 'USER_CONTAINER', 'USER_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'Container failed due to engine core dump',
       ((None, '(?i)core dumped', None, False),)),
    _E(249, 'PAIRuntimeSSHBarrierTimeout', 'PAI_RUNTIME', 'PAI_RUNTIME', 'PLATFORM_FAILURE', 'RUNNING',
       'PERMANENT', 'NEVER_RETRY', 'SSH barrier reaches max retry count',
       ((10, None, 'SSH barrier reaches max retry count', False),)),
    _E(250, 'FrameworkBarrierTransientFailed', 'PAI_RUNTIME', 'PAI_RUNTIME', 'PLATFORM_FAILURE', 'LAUNCHING',
       'TRANSIENT', 'ALWAYS_RETRY', 'The FrameworkBarrier failed due to transient error',
       ()),
    _E(251, 'JobGangAllocationTimeout', 'PAI_RUNTIME', 'RESOURCE_ALLOCATION_TIMEOUT', 'RESOURCE_ALLOCATION_TIMEOUT', 'ALLOCATING',
       'TRANSIENT_CONFLICT', 'ALWAYS_BACKOFF_RETRY', 'All requested resources of all tasks in the job cannot be satisfied in time',
       ()),
    _E(252, 'FrameworkBarrierPermanentFailed', 'PAI_RUNTIME', 'PAI_RUNTIME', 'PLATFORM_FAILURE', 'LAUNCHING',
       'PERMANENT', 'NEVER_RETRY', 'The FrameworkBarrier failed due to permanent error',
       ()),
    _E(253, 'ContainerPortConflict', 'PAI_RUNTIME', 'PAI_RUNTIME', 'PLATFORM_FAILURE', 'LAUNCHING',
       'TRANSIENT', 'ALWAYS_RETRY', 'Can not alloc request ports due to ports is occupied',
       ()),
    _E(254, 'ContainerImageNotExists', 'PAI_RUNTIME', 'PAI_RUNTIME', 'USER_FAILURE', 'LAUNCHING',
       'PERMANENT', 'NEVER_RETRY', 'Pull access denied, repository does not exist or may require authentication',
       ()),
    _E(255, 'PAIRuntimeUnknownFailed', 'PAI_RUNTIME', 'UNKNOWN', 'UNKNOWN_FAILURE', 'UNKNOWN',
       'UNKNOWN', 'RETRY_TO_MAX', 'User command failed but the failure cannot be recognized by PAI Runtime',
       ()),
    _E(-8000, 'ContainerUndefinedNegativeExitCode', 'UNKNOWN', 'UNKNOWN', 'UNKNOWN_FAILURE', 'UNKNOWN',
       'UNKNOWN', 'RETRY_TO_MAX', 'Container exited with undefined negative exitcode',
       ()),
    _E(256, 'PAIRuntimeExitAbnormally', 'PAI_RUNTIME', 'PAI_RUNTIME', 'PLATFORM_FAILURE', 'UNKNOWN',
       'UNKNOWN', 'RETRY_TO_MAX', 'PAI Runtime exit abnormally with undefined exitcode, it may have bugs',
       ()),
)

_BY_CODE = {entry.code: entry for entry in SPEC}


def spec_for(code: int) -> ExitSpec:
    """The spec entry describing ``code``, with the rest-server's fallbacks for unlisted codes."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    fallback = _BY_CODE[POSITIVE_FALLBACK_CODE if code > 0 else NEGATIVE_FALLBACK_CODE]
    return ExitSpec(code, fallback.phrase, fallback.issuer, fallback.causer, fallback.type, fallback.stage,
                    fallback.behavior, fallback.reaction, fallback.reason, ())


@cache
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex)


@dataclass(frozen=True)
class ContainerExit:
    """What the runtime makes of a finished user command."""

    code: int  # the container exit code OpenPAI reports
    user_exit_code: int  # what the command itself returned
    matched: str | None  # the log text a pattern matched, if any

    @property
    def spec(self) -> ExitSpec:
        return spec_for(self.code)


def container_exit(user_exit_code: int, user_log: str = "", platform_log: str = "") -> ContainerExit:
    """The container exit code openpai-runtime reports for a user command's exit code and its log.

    ``user_log`` is the tail of the task's combined stdout+stderr (the runtime
    reads the last ``MAX_SEARCH_LOG_BYTES``). First matching spec entry wins;
    no match gives ``DEFAULT_RUNTIME_EXIT_CODE``.
    """
    if user_exit_code == 0:
        return ContainerExit(0, 0, None)
    for entry in SPEC:
        for pattern in entry.patterns:
            matched = _match(pattern, user_exit_code, user_log, platform_log)
            if matched is not None:
                return ContainerExit(entry.code, user_exit_code, matched or None)
    return ContainerExit(DEFAULT_RUNTIME_EXIT_CODE, user_exit_code, None)


def _match(pattern: RuntimePattern, code: int, user_log: str, platform_log: str) -> str | None:
    """The matched log text ("" when only the exit code matched), or None."""
    if pattern.needs_gpu_ecc_error:
        return None
    if pattern.exit_code is not None and pattern.exit_code != code:
        return None
    found = ""
    for regex, text in ((pattern.platform_log_regex, platform_log), (pattern.user_log_regex, user_log)):
        if regex is None:
            continue
        hit = _compiled(regex).search(text)
        if hit is None:
            return None
        found = found or hit.group(0)
    return found


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    counted: bool  # counts against jobRetryCount / taskRetryCount (RETRY_TO_MAX); transient ones do not
    unlimited: bool  # OpenPAI would go on retrying this forever


def retry_decision(code: int, accountable_retries: int, max_retry_count: int) -> RetryDecision:
    """frameworkcontroller's fancy retry policy for an attempt (or task) that ended with ``code``.

    ``accountable_retries`` is how many counted retries happened already;
    ``max_retry_count`` is ``jobRetryCount`` (or ``taskRetryCount``), -1 meaning no limit.
    """
    if code == 0:
        return RetryDecision(False, False, False)
    entry = spec_for(code)
    if entry.retried_without_limit:
        return RetryDecision(True, False, True)
    if entry.never_retried:
        return RetryDecision(False, False, False)
    if max_retry_count < 0:
        return RetryDecision(True, True, True)
    return RetryDecision(accountable_retries < max_retry_count, True, False)
