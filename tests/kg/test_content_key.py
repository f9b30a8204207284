"""The key the caches of an on-disk store are filed under (``mirage_kg.store.content_key``): read from a listing
of the store's files and the record its last writer left, never from a count of its quads. Reused while nothing
changed (also across a writer that ends without ``close()``); new after every kind of write (ours, and a raw
pyoxigraph one behind our back, which is said once)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyoxigraph as ox
import pytest
from click.testing import CliRunner

from mirage_kg.index import degree as degree_index
from mirage_kg.graph import limits as graph_module
from mirage_kg.index.caching import store_fingerprint
from mirage_kg.cli.main import main
from mirage_kg.errors import InputError, StoreStateWarning
from mirage_kg.graph.core import Graph
from mirage_kg.store import OxigraphStore, content_key

GRAPH = "https://w3id.org/mirage-kg/graph/test/key"
P = "https://w3id.org/mirage-kg/schema#related_to"


def lines(start: int, stop: int, fail_at: int | None = None) -> Iterator[str]:
    for i in range(start, stop):
        if i == fail_at:
            raise InputError("bad row", "generated.nt", i)
        yield f"<urn:e:{i}> <{P}> <urn:e:{i + 1}> .\n"


def make(folder: Path, stop: int = 50) -> None:
    store = OxigraphStore(folder)
    store.load(lines(0, stop), media_type="application/n-triples", graph=GRAPH, source="first")
    store.close()


def key_of_reader(folder: Path) -> tuple[str, list[str]]:
    """The fingerprint a new read-only process would use, and what it was told."""
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
    from mirage_kg.index import caching

    monkeypatch.setattr(caching, "_told", set())  # each test's stores say their notes again


@pytest.fixture()
def no_count(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: OxigraphStore, graph: str | None = None) -> int:
        if graph is None:
            raise AssertionError("the whole store was counted")
        return OxigraphStore.__mro__[1].triple_count(self, graph)  # type: ignore[attr-defined]

    monkeypatch.setattr(OxigraphStore, "triple_count", refuse)


def test_the_key_is_reused_while_nothing_changes_and_no_quad_is_counted(tmp_path: Path, no_count: None) -> None:
    folder = tmp_path / "kg"
    make(folder)
    first, told = key_of_reader(folder)
    assert told == [] and first.startswith("w")  # the writer's own key, recorded at its close
    assert key_of_reader(folder) == (first, [])  # readers change no file
    writer = OxigraphStore(folder)  # a writer that writes nothing: its open changes files, not the content
    assert store_fingerprint(writer) == first
    writer.close()
    assert key_of_reader(folder) == (first, [])


@pytest.mark.parametrize("write", ["merge", "new graph", "replace", "update", "failed load"])
def test_every_write_of_ours_gives_a_new_key(tmp_path: Path, no_count: None, write: str) -> None:
    folder = tmp_path / "kg"
    make(folder)
    before, _ = key_of_reader(folder)
    store = OxigraphStore(folder)
    if write == "merge":
        store.load(lines(40, 60), media_type="application/n-triples", graph=GRAPH, source="second")
    elif write == "new graph":
        store.load(lines(0, 5), media_type="application/n-triples", graph=GRAPH + "/2", source="other")
    elif write == "replace":
        with store.replacing(GRAPH):
            store.load(lines(0, 10), media_type="application/n-triples", graph=GRAPH, source="again")
    elif write == "update":
        store.update(f"INSERT DATA {{ GRAPH <{GRAPH}> {{ <urn:e:1> <{P}> <urn:e:9> }} }}")
    else:
        with pytest.raises(InputError):
            store.load(lines(100, 200, fail_at=150), media_type="application/n-triples", graph=GRAPH, source="x")
    in_writer = store_fingerprint(store)
    store.close()
    after, told = key_of_reader(folder)
    assert told == [] and after == in_writer  # what the writer keyed its own caches by is what readers find
    if write != "failed load":
        assert after != before
    # (a rolled-back load may keep or renew the key: its content is the one before, either is right)


def test_a_raw_write_behind_our_back_is_seen_said_once_and_keys_the_store_anew(tmp_path: Path,
                                                                              no_count: None) -> None:
    folder = tmp_path / "kg"
    make(folder)
    before, _ = key_of_reader(folder)
    raw = ox.Store(str(folder))  # another program: it keeps the same quad count (one out, one in)
    raw.remove(ox.Quad(ox.NamedNode("urn:e:0"), ox.NamedNode(P), ox.NamedNode("urn:e:1"), ox.NamedNode(GRAPH)))
    raw.add(ox.Quad(ox.NamedNode("urn:e:0"), ox.NamedNode(P), ox.NamedNode("urn:e:7"), ox.NamedNode(GRAPH)))
    del raw
    after, told = key_of_reader(folder)
    assert after != before and after.startswith("f")
    assert len(told) == 1 and "changed since mirage-kg last wrote it" in told[0] and str(folder) in told[0]
    assert key_of_reader(folder) == (after, [])  # said once: the store is keyed by these files from now on
    raw = ox.Store(str(folder))  # and again: a new key each time, never one an earlier content had
    raw.remove(ox.Quad(ox.NamedNode("urn:e:0"), ox.NamedNode(P), ox.NamedNode("urn:e:7"), ox.NamedNode(GRAPH)))
    del raw
    again, told = key_of_reader(folder)
    assert again not in (before, after)  # (told once per store and process: this one was told above)


def test_a_store_without_a_record_is_keyed_by_its_files_and_says_so(tmp_path: Path, no_count: None) -> None:
    folder = tmp_path / "kg"
    make(folder)
    content_key.record_file(folder).unlink()  # as an older mirage-kg left it
    key, told = key_of_reader(folder)
    assert key.startswith("f") and len(told) == 1 and "older mirage-kg or another tool" in told[0]
    assert key_of_reader(folder) == (key, [])


def test_a_store_being_written_while_it_opens_is_counted_and_says_why(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "kg"
    make(folder)
    ticks = iter(range(1_000))
    monkeypatch.setattr("mirage_kg.store.content_key.files_key", lambda path: f"changing {next(ticks)}")
    counted: list[int] = []
    plain = OxigraphStore.triple_count
    monkeypatch.setattr(OxigraphStore, "triple_count",
                        lambda self, graph=None: (counted.append(1), plain(self, graph))[1])
    key, told = key_of_reader(folder)
    assert counted and len(key) == 20
    assert len(told) == 1 and "being written while it opened" in told[0] and "count" in told[0]


def test_the_degree_index_built_by_the_writer_is_found_by_a_reader_and_rebuilt_after_a_raw_write(
        tmp_path: Path, no_count: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_module, "DEGREE_INDEX_ON_DISK", 10)  # a file even for this small store
    folder = tmp_path / "kg"
    writer = OxigraphStore(folder)
    writer.load(lines(0, 50), media_type="application/n-triples", graph=GRAPH, source="first")
    assert Graph(writer)._degree_table()["urn:e:3"] == 2
    writer.close()
    built: list[int] = []
    plain = degree_index.build_on_disk
    monkeypatch.setattr(degree_index, "build_on_disk", lambda *a, **k: (built.append(1), plain(*a, **k))[1])
    reader = OxigraphStore(folder, read_only=True)
    assert Graph(reader)._degree_table()["urn:e:3"] == 2 and built == []  # the writer's file, reused
    reader.close()
    raw = ox.Store(str(folder))
    raw.add(ox.Quad(ox.NamedNode("urn:e:3"), ox.NamedNode(P), ox.NamedNode("urn:e:30"), ox.NamedNode(GRAPH)))
    del raw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreStateWarning)
        reader = OxigraphStore(folder, read_only=True)
        assert Graph(reader)._degree_table()["urn:e:3"] == 3 and built == [1]  # never the stale file
        reader.close()


def test_the_cli_says_in_one_line_why_the_caches_are_rebuilt(tmp_path: Path) -> None:
    folder = tmp_path / "kg"
    make(folder)
    raw = ox.Store(str(folder))
    raw.add(ox.Quad(ox.NamedNode("urn:e:3"), ox.NamedNode(P), ox.NamedNode("urn:e:30"), ox.NamedNode(GRAPH)))
    del raw
    result = CliRunner().invoke(main, ["query", "anchor", "urn:e:3", "--store", str(folder), "--rank", "degree"])
    assert result.exit_code == 0, result.output
    assert f"warning: store {folder} changed since mirage-kg last wrote it" in result.output
    assert "urn:e:30" in result.output or "e:30" in result.output


def test_a_raw_write_through_our_own_writer_handle_also_gives_a_new_key(tmp_path: Path, no_count: None) -> None:
    folder = tmp_path / "kg"
    make(folder)
    before, _ = key_of_reader(folder)
    store = OxigraphStore(folder)
    assert store_fingerprint(store) == before
    store.raw.add(ox.Quad(ox.NamedNode("urn:e:3"), ox.NamedNode(P), ox.NamedNode("urn:e:30"), ox.NamedNode(GRAPH)))
    in_writer = store_fingerprint(store)
    store.close()
    assert in_writer != before and key_of_reader(folder) == (in_writer, [])


# --- a writer that never closes (a script, a notebook, a killed worker) ---

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
        from mirage_kg.index.caching import store_fingerprint
        from mirage_kg.store import OxigraphStore
        store = OxigraphStore(sys.argv[1])
        print(store_fingerprint(store), flush=True)
        list(store.raw.quads_for_pattern(None, None, None))
        {ending}
    """)
    done = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


@pytest.mark.parametrize("then", ["exit", "killed"])
def test_a_writer_that_never_closes_leaves_its_key_to_the_next_process(tmp_path: Path, then: str) -> None:
    make(tmp_path / "kg")
    first = writer_process(tmp_path / "kg", then)
    again = writer_process(tmp_path / "kg", then)  # and the one after it, too
    key, told = key_of_reader(tmp_path / "kg")
    assert first == again == key
    assert told == []


def test_a_writer_that_writes_and_is_killed_gives_a_new_key_and_says_so(tmp_path: Path) -> None:
    make(tmp_path / "kg")
    before, _ = key_of_reader(tmp_path / "kg")
    used = writer_process(tmp_path / "kg", "write-then-killed")
    key, told = key_of_reader(tmp_path / "kg")
    assert used == before  # the writer had written nothing when it asked
    assert key != before
    assert told and "changed since mirage-kg last wrote it" in told[0]


def test_a_file_removed_while_the_store_is_listed_is_left_out_not_an_error(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An open writer's compaction deletes table files at any moment: one that goes between the listing and its
    size is no longer the store's (CI once failed a `load --update` with "000052.sst: No such file")."""
    folder = tmp_path / "store"
    make(folder)
    (folder / "000999.sst").write_bytes(b"x" * 10)
    with_it = content_key.files_key(folder)
    real_scandir = content_key.os.scandir

    class CompactedMeanwhile:
        def __enter__(self) -> list[object]:
            with real_scandir(folder) as entries:
                listed = list(entries)
            (folder / "000999.sst").unlink()  # listed, then deleted before its size is read
            return listed

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(content_key.os, "scandir", lambda path: CompactedMeanwhile())
    without_it = content_key.files_key(folder)
    monkeypatch.undo()
    assert without_it == content_key.files_key(folder) != with_it
