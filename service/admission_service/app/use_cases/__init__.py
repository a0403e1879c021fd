"""One module per group of RPCs; ``app/service.py`` composes them into ``AdmissionApp``."""
