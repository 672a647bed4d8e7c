"""The version, in the one place pyproject.toml and the package read it from."""

__version__ = "0.1.0"
