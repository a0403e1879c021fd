"""The model catalog: the built-in ``models.yaml`` and the loader for a deployment's own."""
