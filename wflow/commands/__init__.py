"""Subcommands of the ``wflow`` CLI: one module each, exposing ``register(subparsers)``."""
