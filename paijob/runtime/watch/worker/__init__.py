"""What runs inside a worker: the progress sampler and the ``mp.spawn`` wrapper."""
