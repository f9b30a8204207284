"""Package-level promises: importing is light, the public API is what it should be."""

from __future__ import annotations

import subprocess
import sys

import mirage_kg


def test_import_pulls_in_no_llm_stack() -> None:
    code = ("import sys, mirage_kg, mirage_kg.cli, mirage_kg.store, mirage_kg.loaders; "
            "heavy = [m for m in ('torch', 'transformers', 'sentence_transformers', 'mirage_reason') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_public_api() -> None:
    for name in mirage_kg.__all__:
        assert getattr(mirage_kg, name) is not None, name
    assert {"Store", "OxigraphStore", "SparqlStore", "KnowledgeGraph", "MirageError", "open_store"} <= set(mirage_kg.__all__)
