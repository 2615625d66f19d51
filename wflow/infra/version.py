"""The package version (one definition: :data:`wflow.__version__` reads it)."""

__version__ = "0.1.0"
