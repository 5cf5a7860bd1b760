"""Tessera's version: the one place it is written (pyproject.toml reads it from here, the package
exports it as `tessera.__version__`, the emitted files and `tesserac --version` print it)."""

VERSION = "0.1.0"
