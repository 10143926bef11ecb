"""Built-in trainers sharing one training engine."""
