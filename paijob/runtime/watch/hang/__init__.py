"""The hang doctor: the thread that reads the look and, on node 0, judges; its verdict as pure functions."""
