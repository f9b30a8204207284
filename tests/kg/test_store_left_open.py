"""A process that opens an on-disk store for writing and ends without ``close()`` (a script, a notebook, a killed
worker) must not cost the next process a rebuild of every cache: the content key it used is recorded for the
files it leaves. A write before the end still gives a new key."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from mirage_kg.caching import store_fingerprint
from mirage_kg.errors import StoreStateWarning
from mirage_kg.store import OxigraphStore

GRAPH = "https://w3id.org/mirage-kg/graph/test/open"
P = "https://w3id.org/mirage-kg/schema#related_to"


def make(folder: Path) -> None:
    store = OxigraphStore(folder)
    store.load((f"<urn:e:{i}> <{P}> <urn:e:{i + 1}> .\n" for i in range(40)),
               media_type="application/n-triples", graph=GRAPH, source="first")
    store.close()


def writer_process(folder: Path, then: str) -> str:
    """The key a writer in a child process used; it then ends as ``then`` says, never calling ``close()``."""
    ending = {
        "exit": "",
        "killed": "os._exit(0)",
        "write-then-killed": "store.raw.add(ox.Quad(ox.NamedNode('urn:x'), ox.NamedNode('urn:p'), "
                             "ox.NamedNode('urn:y'), ox.NamedNode('urn:g'))); os._exit(0)",
    }[then]
    script = textwrap.dedent(f"""
        import os, sys, pyoxigraph as ox
        from mirage_kg.caching import store_fingerprint
        from mirage_kg.store import OxigraphStore
        store = OxigraphStore(sys.argv[1])
        print(store_fingerprint(store), flush=True)
        list(store.raw.quads_for_pattern(None, None, None))
        {ending}
    """)
    done = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


def reader_key(folder: Path) -> tuple[str, list[str]]:
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        store = OxigraphStore(folder, read_only=True)
        try:
            key = store_fingerprint(store)
        finally:
            store.close()
    return key, [str(w.message) for w in told if issubclass(w.category, StoreStateWarning)]


@pytest.fixture(autouse=True)
def _told_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    from mirage_kg import caching

    monkeypatch.setattr(caching, "_told", set())


@pytest.mark.parametrize("then", ["exit", "killed"])
def test_a_writer_that_never_closes_leaves_its_key_to_the_next_process(tmp_path: Path, then: str) -> None:
    make(tmp_path / "kg")
    first = writer_process(tmp_path / "kg", then)
    again = writer_process(tmp_path / "kg", then)  # and the one after it, too
    key, told = reader_key(tmp_path / "kg")
    assert first == again == key
    assert told == []


def test_a_writer_that_writes_and_is_killed_gives_a_new_key_and_says_so(tmp_path: Path) -> None:
    make(tmp_path / "kg")
    before, _ = reader_key(tmp_path / "kg")
    used = writer_process(tmp_path / "kg", "write-then-killed")
    key, told = reader_key(tmp_path / "kg")
    assert used == before  # the writer had written nothing when it asked
    assert key != before
    assert told and "changed since mirage-kg last wrote it" in told[0]
