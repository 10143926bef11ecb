"""Talking to an OpenPAI cluster: the REST v2 client and the cluster profiles."""
