"""One module per group of RPCs, each use case a plain handler; ``app/handlers.py`` lists them."""
