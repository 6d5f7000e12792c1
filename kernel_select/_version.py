"""The package version (one place: pyproject reads it, the CLI prints it, cache keys carry it)."""

__version__ = "1.1.0"
