"""kvlab's version, in one place: read by pyproject.toml (setuptools, statically) and by `kvlab --version`."""

__version__ = "0.1.0"
