"""This node's plumbing: liveness, the failure account, the store link, notices, the port watch, its eyes on its workers."""
