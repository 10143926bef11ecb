"""One module per ``paijob`` verb; each exposes ``register(subparsers)``."""
