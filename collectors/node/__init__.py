"""One module per node collector: a declared command and a pure parser (see collectors/registry.py)."""
