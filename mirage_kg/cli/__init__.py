"""The one command line, ``mirage-kg``: a thin click layer over ``mirage_kg`` and ``mirage_reason``."""

from mirage_kg.cli.main import main

__all__ = ["main"]
