"""The Alembic migrations: the only way the schema is created. They live at the repository's top
level and ship in the wheel as ``admission_service.migrations`` (``pyproject.toml`` maps the
folder), so an installed service migrates as a checkout does. A package, not a bare folder, so
that an editable install finds it too."""
