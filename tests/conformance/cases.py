"""Edge-case jobs with the OpenPAI server's verdict, written down from its source.

Each case cites the rule that decides it. "rest-server" paths are in
microsoft/pai at a95d9420e (copies of the two protocol.js files are in
../shared/reference/openpai/upstream). Every verdict was also obtained by
running those files under node with the versions the rest-server's
package.json pins (ajv 6.12.6, ajv-merge-patch 4.1.0, js-yaml 3.14.1; see
server_verdict.js in this folder, which the test can re-run).

``differs`` marks a case where paijob deliberately gives another verdict
than the server's first answer, with the reason.

Known differences that no case here can show (each deliberate):

* non-UTF-8 bytes: body-parser decodes them to U+FFFD and the server may
  accept the mangled job; paijob refuses it (say so, do not guess);
* a document over 4 MiB, nesting deeper than 256, or more than 200,000 values
  after alias expansion: js-yaml shares aliased objects and recurses until
  node's stack ends, so the server may take some of these; paijob refuses
  them at once (issue 11: a 367-byte file took 25 s and 3.1 GB);
* U+0085 / U+2028 / U+2029 inside plain scalars: js-yaml and libyaml fold
  them differently;
* what depends on the cluster: hived SKU types and quota, virtual-cluster
  access, storage names, a job name already used (409).

Besides these cases, test_every_historical_pai_job_gets_the_servers_verdict
runs every distinct job YAML in microsoft/pai's history (383 at a95d9420e)
through both: all agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ACCEPT = "accept"
REJECT = "reject"

SCHEMA = "config/v2/protocol.js"
MIDDLEWARE = "middlewares/v2/protocol.js"
HIVED = "middlewares/v2/hived.js + config/v2/hived.js"
K8S = "models/v2/job/k8s.js"
YAML = "js-yaml 3 safeLoad (middlewares/v2/protocol.js)"

BASE = """\
protocolVersion: 2
name: conformance
type: job
prerequisites:
  - type: dockerimage
    name: image
    uri: repo/image:tag
taskRoles:
  worker:
    instances: 2
    dockerImage: image
    resourcePerInstance:
      cpu: 4
      memoryMB: 8192
      gpu: 1
      ports:
        SynPort: 1
    commands:
      - paijob-runtime train --port-label SynPort train.py
"""


@dataclass(frozen=True)
class Case:
    id: str
    verdict: str  # the server's
    rule: str  # where in the server's source the verdict comes from
    text: str
    differs: str | None = None  # why paijob deliberately answers otherwise


def edit(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def add(extra: str) -> str:
    return BASE + extra


def role(extra: str) -> str:
    """Add lines to the worker role (after instances)."""
    return edit("    instances: 2\n", "    instances: 2\n" + extra)


def plain(text: str) -> str:
    """The job with a command that is not paijob-runtime (whose own needs are not the server's)."""
    return edit("paijob-runtime train --port-label SynPort train.py", "python train.py", text)


CASES: list[Case] = [
    Case("base", ACCEPT, SCHEMA, BASE),
    # --- issue 10's false rejects: the server takes them
    Case("port-count-0", ACCEPT, f"{SCHEMA}: ports values are only type integer", edit("SynPort: 1", "SynPort: 0")),
    Case("min-failed-0", ACCEPT, f"{SCHEMA}: integer|null; {K8S}: 0 || 1", role("    completion: {minFailedInstances: 0}\n")),
    Case("min-failed-minus-2", ACCEPT, f"{SCHEMA}: integer|null, no minimum", role("    completion: {minFailedInstances: -2}\n")),
    Case("min-failed-null", ACCEPT, f"{SCHEMA}: integer|null", role("    completion: {minFailedInstances: null}\n")),
    Case("min-succeeded-minus-1", ACCEPT, f"{SCHEMA}: integer|null", role("    completion: {minSucceededInstances: -1}\n")),
    Case("task-retry-minus-1", ACCEPT, f"{SCHEMA}: taskRetryCount is only type integer", role("    taskRetryCount: -1\n")),
    Case("cpu-0", ACCEPT, f"{SCHEMA}: cpu is only type integer", edit("cpu: 4", "cpu: 0")),
    Case("memory-0", ACCEPT, f"{SCHEMA}: memoryMB is only type integer", edit("memoryMB: 8192", "memoryMB: 0")),
    Case("gpu-minus-1", ACCEPT, f"{SCHEMA}: gpu is only type integer", plain(edit("gpu: 1", "gpu: -1"))),
    Case("shm-0", ACCEPT, f"{SCHEMA}: shmMB is only type integer", role("    extraContainerOptions: {shmMB: 0}\n")),
    Case("extra-container-option-unknown-key", ACCEPT, f"{SCHEMA}: additionalProperties sits inside properties", role("    extraContainerOptions: {foo: 1}\n")),
    Case("infiniband-any-type", ACCEPT, f"{SCHEMA}: infiniband has no schema", role("    extraContainerOptions: {infiniband: 'yes'}\n")),
    Case("defaults-extra-key", ACCEPT, f"{SCHEMA}: defaults has no additionalProperties", add("defaults: {virtualCluster: vc, queue: q}\n")),
    Case("virtual-cluster-number", ACCEPT, f"{SCHEMA}: defaults.virtualCluster has no schema", add("defaults: {virtualCluster: 5}\n")),
    Case("auth-extra-key", ACCEPT, f"{SCHEMA}: auth has properties but no additionalProperties", edit("uri: repo/image:tag", "uri: repo/image:tag\n    auth: {username: u, password: p, email: e}")),
    Case("empty-uri", ACCEPT, f"{SCHEMA}: uri is only type string", edit("uri: repo/image:tag", "uri: ''")),
    Case("same-name-other-type", ACCEPT, f"{MIDDLEWARE}: duplicates are per type", edit("taskRoles:", "  - {type: data, name: image, uri: [a]}\ntaskRoles:")),
    Case("deployment-unknown-role", ACCEPT, f"{MIDDLEWARE}: render uses only roles the job has", add("deployments:\n  - name: d\n    taskRoles:\n      ps: {preCommands: [echo]}\ndefaults: {deployment: d}\n")),
    Case("ports-list", ACCEPT, f"{SCHEMA}: ports has no type; {K8S}: 'ssh' in [] works", plain(edit("      ports:\n        SynPort: 1\n", "      ports: []\n"))),
    Case("ports-null", ACCEPT, f"{K8S}: ports || {{}}", plain(edit("      ports:\n        SynPort: 1\n", "      ports: null\n"))),
    Case("cpu-1.0", ACCEPT, f"{SCHEMA}: a JavaScript number 1.0 is an integer", edit("cpu: 4", "cpu: 4.0")),
    Case("memory-1e3", ACCEPT, f"{YAML}: 1e3 is the number 1000", edit("memoryMB: 8192", "memoryMB: 1e3")),
    Case("instances-2.0", ACCEPT, f"{SCHEMA}: 2.0 is an integer to ajv", edit("instances: 2", "instances: 2.0")),
    Case("version-number", ACCEPT, f"{SCHEMA}: version string|number", add("version: 1.5\n")),
    Case("protocol-version-string", ACCEPT, f"{SCHEMA}: enum ['2', 2]", edit("protocolVersion: 2", "protocolVersion: '2'")),
    Case("name-255", ACCEPT, f"{SCHEMA}: maxLength 255", edit("name: conformance", "name: " + "n" * 255)),
    Case("name-no-is-a-string", ACCEPT, f"{YAML}: no is a string in YAML 1.2", edit("name: conformance", "name: no")),
    Case("name-0o17-is-a-string", ACCEPT, f"{YAML}: js-yaml 3 has no 0o octal", edit("name: conformance", "name: 0o17")),
    Case("gang-allocation-no-is-a-string", ACCEPT, f"{SCHEMA}: extras is any object; {K8S}: 'no' !== false", add("extras: {gangAllocation: no}\n")),
    Case("gang-allocation-false-multi-node", ACCEPT, f"{K8S}: gang off is a retry policy, not a check", add("extras: {gangAllocation: false}\n")),
    Case("extras-any-keys", ACCEPT, f"{SCHEMA}: extras is type object only", add("extras: {anything: [1, 2], submitFrom: cli}\n")),
    Case("script-prerequisite-plugin-require", ACCEPT, f"{SCHEMA}: script/output take plugin and require", edit("taskRoles:", "  - {type: script, name: s, plugin: git, require: [image], uri: 'https://x'}\ntaskRoles:")),
    Case("script-prerequisite-extra-key", ACCEPT, f"{SCHEMA}: script/output additionalProperties true", edit("taskRoles:", "  - {type: output, name: o, anything: 1}\ntaskRoles:")),
    Case("data-uri-list-and-role-ref", ACCEPT, f"{MIDDLEWARE}: data names a data prerequisite", edit("taskRoles:", "  - {type: data, name: d, uri: [a, b]}\ntaskRoles:", role("    data: d\n"))),
    Case("role-protocol-version", ACCEPT, f"{SCHEMA}: roles take protocolVersion", role("    protocolVersion: 2\n")),
    Case("hived-known-role", ACCEPT, HIVED, add("extras:\n  hivedScheduler:\n    jobPriorityClass: test\n    taskRoles:\n      worker: {skuType: DT}\n")),
    Case("deployments-and-default", ACCEPT, MIDDLEWARE, add("deployments:\n  - name: d\n    taskRoles:\n      worker: {preCommands: [echo a], postCommands: [echo b]}\ndefaults: {deployment: d}\n")),
    Case("undefined-parameter-tag", ACCEPT, f"{MIDDLEWARE}: unknown tags stay as text", edit("train.py", "train.py --lr <% $parameters.lr %>")),
    Case("secrets-mapping", ACCEPT, SCHEMA, add("secrets: {token: abc}\nparameters: {lr: 0.1}\n")),
    Case("cpu-infinity", ACCEPT, f"{SCHEMA}: ajv 6 counts Infinity as an integer", edit("cpu: 4", "cpu: .inf")),
    # --- issue 10's false accepts: the server refuses them
    Case("ports-empty", REJECT, f"{SCHEMA}: ports minProperties 1", edit("      ports:\n        SynPort: 1\n", "      ports: {}\n")),
    Case("secrets-string", REJECT, f"{SCHEMA}: secrets type object", add("secrets: token\n")),
    Case("dockerimage-plugin", REJECT, f"{SCHEMA}: dockerimage additionalProperties false", edit("uri: repo/image:tag", "uri: repo/image:tag\n    plugin: x")),
    Case("dockerimage-require", REJECT, f"{SCHEMA}: dockerimage additionalProperties false", edit("uri: repo/image:tag", "uri: repo/image:tag\n    require: [a]")),
    Case("deployments-empty", REJECT, f"{SCHEMA}: deployments minItems 1", add("deployments: []\n")),
    Case("deployment-no-task-roles", REJECT, f"{SCHEMA}: deployment requires name, taskRoles", add("deployments: [{name: d}]\n")),
    Case("deployment-empty-task-roles", REJECT, f"{SCHEMA}: deployment taskRoles minProperties 1", add("deployments: [{name: d, taskRoles: {}}]\n")),
    Case("deployment-empty-pre-commands", REJECT, f"{SCHEMA}: preCommands minItems 1", add("deployments: [{name: d, taskRoles: {worker: {preCommands: []}}}]\n")),
    Case("deployment-bad-name", REJECT, f"{SCHEMA}: deployment name pattern", add("deployments: [{name: 'a b', taskRoles: {worker: {preCommands: [x]}}}]\n")),
    Case("hived-unknown-role", REJECT, f"{HIVED}: Taskrole ${{taskRole}} does not exist", add("extras:\n  hivedScheduler:\n    taskRoles:\n      ps: {skuType: DT}\n")),
    Case("hived-sku-and-pinned", REJECT, f"{HIVED}: only one of skuType, pinnedCellId", add("extras:\n  hivedScheduler:\n    taskRoles:\n      worker: {skuType: DT, pinnedCellId: c}\n")),
    Case("hived-priority-class", REJECT, f"{HIVED}: jobPriorityClass enum", add("extras:\n  hivedScheduler: {jobPriorityClass: urgent}\n")),
    # --- schema
    Case("duplicate-key", REJECT, f"{YAML}: duplicated mapping key", edit("cpu: 4", "cpu: 4\n      cpu: 8")),
    Case("name-1e3-is-a-number", REJECT, f"{YAML} + {SCHEMA}: name type string", edit("name: conformance", "name: 1e3")),
    Case("name-017-is-a-number", REJECT, f"{YAML}: 017 is octal 15", edit("name: conformance", "name: 017")),
    Case("name-date", REJECT, f"{YAML}: a date is a Date, not a string", edit("name: conformance", "name: 2020-01-01")),
    Case("name-space", REJECT, f"{SCHEMA}: name pattern", edit("name: conformance", "name: a b")),
    Case("name-trailing-newline", REJECT, f"{SCHEMA}: JavaScript $ does not match before \\n", edit("name: conformance", 'name: "abc\\n"')),
    Case("name-256", REJECT, f"{SCHEMA}: maxLength 255", edit("name: conformance", "name: " + "n" * 256)),
    Case("protocol-version-3", REJECT, f"{SCHEMA}: enum ['2', 2]", edit("protocolVersion: 2", "protocolVersion: 3")),
    Case("type-jobs", REJECT, f"{SCHEMA}: type enum ['job']", edit("type: job", "type: jobs")),
    Case("unknown-top-level-key", REJECT, f"{SCHEMA}: additionalProperties false", add("comment: hi\n")),
    Case("instances-0", REJECT, f"{SCHEMA}: instances minimum 1", edit("instances: 2", "instances: 0")),
    Case("instances-1.5", REJECT, f"{SCHEMA}: instances integer", edit("instances: 2", "instances: 1.5")),
    Case("completion-unknown-key", REJECT, f"{SCHEMA}: completion additionalProperties false", role("    completion: {minFailed: 1}\n")),
    Case("min-failed-string", REJECT, f"{SCHEMA}: integer|null", role("    completion: {minFailedInstances: all}\n")),
    Case("missing-gpu", REJECT, f"{SCHEMA}: required cpu, memoryMB, gpu", edit("      gpu: 1\n", "")),
    Case("resource-extra-key", REJECT, f"{SCHEMA}: resourcePerInstance additionalProperties false", edit("gpu: 1", "gpu: 1\n      disk: 10")),
    Case("commands-empty", REJECT, f"{SCHEMA}: commands minItems 1", edit("    commands:\n      - paijob-runtime train --port-label SynPort train.py\n", "    commands: []\n")),
    Case("commands-number", REJECT, f"{SCHEMA}: commands items string", edit("      - paijob-runtime train --port-label SynPort train.py", "      - paijob-runtime train --port-label SynPort train.py\n      - 1")),
    Case("task-roles-empty", REJECT, f"{SCHEMA}: taskRoles minProperties 1", BASE[: BASE.index("taskRoles:")] + "taskRoles: {}\n"),
    Case("role-name-digit", REJECT, f"{SCHEMA}: taskRoles patternProperties, additionalProperties false", edit("  worker:", "  1worker:")),
    Case("port-label-dash", REJECT, f"{SCHEMA}: ports patternProperties, additionalProperties false", edit("SynPort: 1", "Syn-Port: 1")),
    Case("prerequisites-empty", REJECT, f"{SCHEMA}: prerequisites minItems 1", edit("  - type: dockerimage\n    name: image\n    uri: repo/image:tag\n", "  []\n")),
    Case("prerequisite-type-unknown", REJECT, f"{SCHEMA}: oneOf, no kind matches", edit("taskRoles:", "  - {type: model, name: m}\ntaskRoles:")),
    Case("prerequisite-without-type", REJECT, f"{SCHEMA}: oneOf, every kind requires type", edit("taskRoles:", "  - {name: m}\ntaskRoles:")),
    Case("data-uri-string", REJECT, f"{SCHEMA}: data uri is a list of strings", edit("taskRoles:", "  - {type: data, name: d, uri: one}\ntaskRoles:")),
    Case("dockerimage-without-uri", REJECT, f"{SCHEMA}: dockerimage requires uri", edit("    uri: repo/image:tag\n", "")),
    Case("job-retry-minus-1", REJECT, f"{SCHEMA}: jobRetryCount minimum 0", add("jobRetryCount: -1\n")),
    Case("extras-list", REJECT, f"{SCHEMA}: extras type object", add("extras: [a]\n")),
    Case("parameters-list", REJECT, f"{SCHEMA}: parameters type object", add("parameters: [a]\n")),
    Case("extra-container-options-additional-properties-key", REJECT, f"{SCHEMA}: the property named additionalProperties is the false schema", role("    extraContainerOptions: {additionalProperties: 1}\n")),
    Case("shm-string", REJECT, f"{SCHEMA}: shmMB integer", role("    extraContainerOptions: {shmMB: lots}\n")),
    Case("shm-null", REJECT, f"{SCHEMA}: shmMB integer (ajv: null is no integer)",
         role("    extraContainerOptions: {shmMB: null}\n")),
    # --- middleware cross checks
    Case("duplicate-dockerimage", REJECT, f"{MIDDLEWARE}: Duplicate dockerimage prerequisites", edit("taskRoles:", "  - {type: dockerimage, name: image, uri: other}\ntaskRoles:")),
    Case("duplicate-deployments", REJECT, f"{MIDDLEWARE}: Duplicate deployments", add("deployments:\n  - {name: d, taskRoles: {worker: {preCommands: [a]}}}\n  - {name: d, taskRoles: {worker: {preCommands: [b]}}}\n")),
    Case("default-deployment-missing", REJECT, f"{MIDDLEWARE}: Default deployment does not exist", add("defaults: {deployment: nope}\n")),
    Case("docker-image-missing", REJECT, f"{MIDDLEWARE}: Prerequisite does not exist", edit("dockerImage: image", "dockerImage: nope")),
    Case("docker-image-names-data", REJECT, f"{MIDDLEWARE}: dockerImage must be a dockerimage prerequisite", edit("taskRoles:", "  - {type: data, name: d, uri: [a]}\ntaskRoles:", edit("dockerImage: image", "dockerImage: d"))),
    Case("role-prerequisites-unknown", REJECT, f"{MIDDLEWARE}: Prerequisite does not exist", role("    prerequisites: [nope]\n")),
    # --- shapes the server's later steps cannot handle (HTTP 500, no job)
    Case("ports-number", REJECT, f"{K8S}: 'ssh' in 5 throws", edit("      ports:\n        SynPort: 1\n", "      ports: 5\n")),
    Case("runtime-plugins-number", REJECT, f"{K8S}: for...of over a number throws", add("extras: {com.microsoft.pai.runtimeplugin: 5}\n")),
    Case("runtime-plugins-null-item", REJECT, f"{K8S}: null.plugin throws", add("extras: {com.microsoft.pai.runtimeplugin: [null]}\n")),
    Case("task-roles-string", REJECT, f"{MIDDLEWARE}: 'prerequisites' in a string throws", BASE[: BASE.index("taskRoles:")] + "taskRoles: abc\n"),
    Case("recursive-alias", REJECT, f"{YAML} then JSON.stringify of a cycle throws", add("parameters: &p {self: *p}\n").replace("&p {self: *p}", "&p [*p]")),
    Case("auth-value-number", REJECT, f"{MIDDLEWARE}: protocolRender renders auth values; mustache fails on 5", edit("uri: repo/image:tag", "uri: repo/image:tag\n    auth: {username: u, email: 5}")),
    Case("auth-value-null", ACCEPT, f"{MIDDLEWARE}: mustache renders a falsy template as ''", edit("uri: repo/image:tag", "uri: repo/image:tag\n    auth: {username: u, email: null}")),
    Case("auth-secret-tag", ACCEPT, f"{MIDDLEWARE}: auth is rendered with $secrets", edit("uri: repo/image:tag", "uri: repo/image:tag\n    auth: {username: u, password: '<% $secrets.pw %>'}", add("secrets: {pw: x}\n"))),
    Case("command-unclosed-section", REJECT, f"{MIDDLEWARE}: mustache.js parse: Unclosed section", edit("train.py", "train.py <%#x%>")),
    Case("command-unclosed-tag", REJECT, f"{MIDDLEWARE}: mustache.js parse: Unclosed tag", edit("train.py", "train.py <% $parameters.x")),
    Case("pre-command-unclosed-tag", REJECT, f"{MIDDLEWARE}: preCommands of the default deployment are rendered too", add("deployments: [{name: d, taskRoles: {worker: {preCommands: ['echo <% x']}}}]\ndefaults: {deployment: d}\n")),
    Case("role-named-proto", REJECT, f"{YAML}: __proto__ sets the prototype, so taskRoles has no role", edit("  worker:", "  __proto__:")),
    Case("parameter-named-proto", ACCEPT, f"{YAML}: __proto__ is no own key", add("parameters: {__proto__: 1}\n")),
    # --- YAML and transport
    Case("two-documents", REJECT, f"{YAML}: expected a single document", BASE + "---\na: 1\n"),
    Case("body-over-100kb", REJECT, "config/express.js: bodyParser.text() default limit 100kb", add("description: " + "x" * 103_000 + "\n")),
    # --- deliberate differences
    Case(
        "task-roles-number",
        ACCEPT,
        f"{SCHEMA}: taskRoles has no type; Object.keys(5) is []",
        BASE[: BASE.index("taskRoles:")] + "taskRoles: 5\n",
        differs="a job without task roles: the server passes it on, frameworkcontroller gets none",
    ),
    # --- role names OpenPAI converts (convertName): the server accepts them, paijob refuses them (openpai-runtime
    # v0.1.10+, OpenPAI v1.6+, looks the role up by its converted name in init and exits 1 before any command runs)
    Case(
        "role-name-underscore-only",
        ACCEPT,
        f"{SCHEMA}: '_' matches the role pattern",
        edit("  worker:", "  _:", edit("--port-label SynPort", "--port-label SynPort --master-role _")),
        differs="OpenPAI v1.6+'s runtime cannot find role '_' (convertName makes it ''): the job dies in init",
    ),
    Case(
        "roles-colliding-after-convert-name",
        ACCEPT,
        f"{SCHEMA}: both names match; {K8S} convertName makes them equal later",
        plain(edit("taskRoles:\n", "taskRoles:\n  Worker:\n    dockerImage: image\n    resourcePerInstance: {cpu: 1, memoryMB: 1, gpu: 0}\n    commands: [x]\n")),
        differs="role 'Worker' is one OpenPAI v1.6+'s runtime cannot run (convertName changes it), and it collides with 'worker'",
    ),
]

EXAMPLES = sorted((Path(__file__).parent / "examples").glob("*.yaml"))
