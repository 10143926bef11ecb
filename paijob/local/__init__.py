"""The embedded OpenPAI-compatible local cluster: REST server, task runner, job store."""
