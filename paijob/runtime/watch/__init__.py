"""How a node knows it is healthy: four wings (``worker/`` inside each worker, the two doctors ``hang/`` and
``slow/``, the node's plumbing ``node/``) that know nothing of each other, the door the launchers hold
(``health``), and at the root what the wings share (the file and store protocols, the rank state, the lifecycle).

The rest of ``paijob.runtime`` is how a node starts; this folder imports nothing from it (launch, agent, cli,
worker): import-linter contracts in setup.cfg keep that, and the wings apart. docs/contributing.md has the map.
"""
