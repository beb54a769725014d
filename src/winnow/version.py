"""Winnow's version, in a module of its own so that any layer may record it (index manifests,
training outputs, the HTTP schema) without importing the package facade."""

__version__ = "0.1.0"
