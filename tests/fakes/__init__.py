"""In-memory stand-ins for the app's ports (test-only: nothing in ``service/`` imports this)."""
