"""One module per strategy; each module docstring is a lesson. See ``registry.py``."""
