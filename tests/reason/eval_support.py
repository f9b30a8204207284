"""Paths and small helpers shared by the evaluation tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TINY = FIXTURES / "eval" / "tiny.jsonl"
SHARED_DATA = Path(os.environ.get("MIRAGE_KG_SHARED_DATA", ROOT.parent / "shared" / "data"))


def shared_file(*parts: str) -> Path:
    """A file of ../shared/data, or a skip naming what is missing."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"public data not available: {path} (see ../shared/data/README.md)")
    return path
