"""``load --update`` counts the store (the fingerprint naming its label index) only when an index may be there to
carry: an on-disk store whose cache folder holds none is updated without that whole-store count."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg.cli.main import main
from mirage_kg.releases import update


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("with_index", [False, True])
def test_fingerprint_only_when_an_index_may_be_carried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       with_index: bool) -> None:
    old, new, store = tmp_path / "v1.tsv", tmp_path / "v2.tsv", tmp_path / "store"
    old.write_text("Flu\thas_symptom\tFever\nFlu\thas_symptom\tCough\n", encoding="utf-8")
    new.write_text("Flu\thas_symptom\tFever\nFlu\thas_symptom\tChills\n", encoding="utf-8")
    _run("load", str(old), "--store", str(store), "--no-index")
    if with_index:
        _run("index", "--store", str(store), "--no-embeddings")
    counted: list[int] = []
    plain = update.store_fingerprint
    monkeypatch.setattr(update, "store_fingerprint", lambda s, *a: (counted.append(1), plain(s, *a))[1])
    output = _run("load", "--update", str(new), "--store", str(store), "--no-index")
    assert "facts" in output or "triples" in output
    if with_index:
        assert list((store / ".mirage-cache").glob("labels-*.sqlite")) and len(counted) == 2  # before and after
        assert "label index: carried over" in output
    else:
        assert not list((store / ".mirage-cache").glob("labels-*.sqlite")) and counted == []
