"""Files ``paijob init`` copies into a new project (read with importlib.resources, never imported)."""
