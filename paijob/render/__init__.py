"""``paijob render``: templates, values layering, the values schema and its docs.

Pure text in, text out: nothing here talks to a cluster.
"""
