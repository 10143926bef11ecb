"""The slow-rank doctor: its node's share of the evidence and, on node 0, the verdict (pure) and when to say it."""
