"""paijob's model of the OpenPAI platform: plain, torch-free facts with no side effects.

Every OpenPAI fact paijob relies on is written once here and read by
``paijob validate``, the local cluster, the REST client and
``paijob-runtime`` alike (the role TorchX's ``specs/`` package plays for its
schedulers). Each module holds one kind of fact and names, in its docstring,
the OpenPAI source it was checked against (``../shared/reference/openpai/upstream``
holds copies of the rest-server and openpai-runtime files cited):

* ``names``    job/role/port-label names, role-name conversion, default port label
* ``jsyaml``   job YAML read as the rest-server's js-yaml reads it (YAML 1.2), bounded
* ``model``    the job parsed once into typed dataclasses
* ``exitspec`` the job exit spec (codes, retry classes, log patterns) as data
* ``markers``  how ``<% $parameters.x %>`` and friends are rendered into commands
* ``taskenv``  every ``PAI_*`` / ``FC_*`` variable a task sees, and its format
* ``jobstate`` the job states, and which are final (``is_terminal``)
* ``schemaeval`` JSON-schema evaluation as ajv sees JavaScript values (and, for values schemas, Python's)
* ``rest``     REST v2 paths, list limits, secret masking and the job id format
"""
