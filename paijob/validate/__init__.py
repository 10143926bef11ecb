"""``paijob validate``: OpenPAI protocol-v2 checks, as the rest-server makes them.

``report`` is the entry (text or file in, a ``ValidationReport`` out); ``schema`` evaluates the
server's JSON schema, ``rules`` holds the server's other checks and paijob's
warnings as small named rules, ``runtime_plan`` reads what paijob-runtime and
mpirun will make of each role.
"""
