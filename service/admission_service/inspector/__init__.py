"""The operator inspector: a read-only web view of a tenant's sessions (PAS_INSPECTOR_LISTEN).

Server-rendered HTML (Jinja2 templates with autoescaping, no scripts, no external assets) on a
listener of its own, authenticated by the same bearer tokens as the API and scoped to the
token's tenant. ``views`` turns the use cases' results into what the pages show; ``pages``
decides which use cases a URL reads and which template renders them (``Pages.render``, the one
call the HTTP layer makes); ``http`` serves them.
"""
