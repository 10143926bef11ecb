"""How a node knows it is healthy: node liveness, the hang watch, the worker's progress sampler,
ports, the store link between nodes, spawn children, and the root cause of a failure.

The rest of ``paijob.runtime`` is how a node starts; this folder imports nothing from it
(launch, agent, cli, worker), an import-linter contract in setup.cfg keeps it so.
"""
