"""Jinja templates for the emitted CUDA C and the static device header; data only."""
