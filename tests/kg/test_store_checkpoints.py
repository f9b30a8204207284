"""Rollback checkpoints of the on-disk store: every load (new graph, merge, replace) goes in place under a
RocksDB checkpoint, so a merge costs a fresh load's time, and a failed, interrupted or killed load is put back
from the checkpoint instead of being deleted quad by quad. Each way a process can die midway is reproduced."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirage_kg.errors import InputError
from mirage_kg.store.base import MANIFEST_GRAPH
from mirage_kg.store import OxigraphStore, checkpoints

GRAPH = "https://w3id.org/mirage-kg/graph/test/checkpoint"
OTHER = "https://w3id.org/mirage-kg/graph/test/other"


def lines(start: int, stop: int, fail_at: int | None = None, predicate: str = "urn:p") -> Iterator[str]:
    for i in range(start, stop):
        if i == fail_at:
            raise InputError("bad row", "generated.nt", i)
        yield f"<urn:e:{i}> <{predicate}> <urn:e:{i + 1}> .\n"


def content(store: OxigraphStore, graph: str = GRAPH) -> set[tuple[str, str, str]]:
    return {(q.subject.value, q.predicate.value, q.object.value) for q in store.quads(graph=graph)}


def expected(start: int, stop: int, predicate: str = "urn:p") -> set[tuple[str, str, str]]:
    return {(f"urn:e:{i}", predicate, f"urn:e:{i + 1}") for i in range(start, stop)}


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(("rollback-", "staging-", "bulk-")))


@pytest.fixture()
def filled(tmp_path: Path) -> Iterator[OxigraphStore]:
    store = OxigraphStore(tmp_path / "kg")
    store.load(lines(0, 100), media_type="application/n-triples", graph=GRAPH, source="first")
    yield store
    store.close()


def never(*args: object, **kwargs: object) -> None:
    raise AssertionError("not the path an on-disk load takes any more")


def test_a_merge_goes_in_place_and_leaves_nothing_behind(filled: OxigraphStore,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(OxigraphStore, "_copy_graph", never)  # no scratch store, no second parse
    receipt = filled.load(lines(50, 150), media_type="application/n-triples", graph=GRAPH, source="second")
    assert receipt.added == 50 and content(filled) == expected(0, 150)
    assert filled.loaded_graphs()[GRAPH] == "second"
    assert leftovers(filled.path) == []  # type: ignore[arg-type]


def test_a_failed_load_is_put_back_not_deleted(filled: OxigraphStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rolling back used to delete what was loaded, quad by quad (a minute for a few million); now the
    checkpoint's files are put back, whatever was loaded. Merge, new graph and replace alike."""
    monkeypatch.setattr(OxigraphStore, "_clear_graph", never)
    with pytest.raises(InputError):
        filled.load(lines(200, 300, fail_at=250), media_type="application/n-triples", graph=GRAPH, source="x")
    with pytest.raises(InputError):
        filled.load(lines(200, 300, fail_at=250), media_type="application/n-triples", graph=OTHER, source="x")
    assert content(filled) == expected(0, 100) and content(filled, OTHER) == set()
    assert OTHER not in filled.graphs() and filled.loaded_graphs()[GRAPH] == "first"
    assert leftovers(filled.path) == []  # type: ignore[arg-type]
    receipt = filled.load(lines(100, 120), media_type="application/n-triples", graph=GRAPH, source="again")
    assert receipt.added == 20  # the store is fully usable after a put-back


def test_a_replace_rebuilds_or_deletes_by_what_costs_less(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = OxigraphStore(tmp_path / "kg")
    store.load(lines(0, 300), media_type="application/n-triples", graph=GRAPH, source="first")
    store.load(lines(0, 20, predicate="urn:q"), media_type="application/n-triples", graph=OTHER, source="other")
    with store.replacing(GRAPH):  # the other graphs are small: the store is rebuilt from them
        monkeypatch.setattr(OxigraphStore, "_clear_graph", never)
        store.load(lines(500, 600), media_type="application/n-triples", graph=GRAPH, source="second")
    monkeypatch.undo()
    assert content(store) == expected(500, 600) and content(store, OTHER) == expected(0, 20, "urn:q")
    assert store.loaded_graphs() == {**store.loaded_graphs(), GRAPH: "second", OTHER: "other"}
    with store.replacing(OTHER):  # the other graphs are large: deleting the few quads replaced costs less
        monkeypatch.setattr(OxigraphStore, "_rebuild_without", never)
        store.load(lines(0, 5, predicate="urn:r"), media_type="application/n-triples", graph=OTHER, source="o2")
    assert content(store, OTHER) == expected(0, 5, "urn:r") and content(store) == expected(500, 600)
    with pytest.raises(InputError), store.replacing(GRAPH):  # a failed rebuild-replace is put back too
        monkeypatch.undo()
        store.load(lines(700, 800, fail_at=750), media_type="application/n-triples", graph=GRAPH, source="x")
    assert content(store) == expected(500, 600) and store.loaded_graphs()[GRAPH] == "second"
    assert leftovers(tmp_path / "kg") == []
    store.close()


def test_a_put_back_cut_short_is_finished_by_the_next_open(filled: OxigraphStore,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    folder = filled.path
    real_link = os.link
    done: list[str] = []

    def link_then_die(source: object, target: object) -> None:
        if len(done) == 2:
            raise KeyboardInterrupt  # stands for the kill, with the store's files half swapped
        done.append(str(target))
        real_link(source, target)  # type: ignore[arg-type]

    monkeypatch.setattr(checkpoints.os, "link", link_then_die)
    with pytest.raises(KeyboardInterrupt):
        filled.load(lines(200, 300, fail_at=250), media_type="application/n-triples", graph=GRAPH, source="x")
    monkeypatch.undo()
    filled.close()
    assert any(name.endswith(checkpoints.RESTORING) for name in leftovers(folder))  # type: ignore[arg-type]
    reader = OxigraphStore(folder, read_only=True)  # a reader finishes it too (no writer holds the store)
    assert content(reader) == expected(0, 100)
    reader.close()
    reopened = OxigraphStore(folder)
    assert content(reopened) == expected(0, 100) and reopened.loaded_graphs()[GRAPH] == "first"
    assert leftovers(folder) == []  # type: ignore[arg-type]
    reopened.close()


def test_a_rebuild_cut_short_while_swapping_keeps_the_old_graph(filled: OxigraphStore,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    folder = filled.path
    real_restore = checkpoints.restore

    def die_while_swapping(store_folder: Path, checkpoint: checkpoints.Checkpoint) -> None:
        raise KeyboardInterrupt  # the rebuilt store is marked, not yet swapped in

    monkeypatch.setattr(checkpoints, "restore", die_while_swapping)
    with pytest.raises(KeyboardInterrupt), filled.replacing(GRAPH):
        filled.load(lines(200, 300), media_type="application/n-triples", graph=GRAPH, source="x")
    monkeypatch.setattr(checkpoints, "restore", real_restore)
    filled.close()
    reopened = OxigraphStore(folder)  # swaps the rebuilt store in, sees the load uncommitted, puts it back
    assert content(reopened) == expected(0, 100) and reopened.loaded_graphs()[GRAPH] == "first"
    assert leftovers(folder) == []  # type: ignore[arg-type]
    reopened.close()


def test_a_committed_load_killed_before_its_checkpoint_went_is_kept(filled: OxigraphStore,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    folder = filled.path

    def die(checkpoint: checkpoints.Checkpoint) -> None:
        raise KeyboardInterrupt  # after the commit, before the way back is given up

    monkeypatch.setattr(checkpoints, "drop", die)
    with pytest.raises(KeyboardInterrupt):
        filled.load(lines(100, 200), media_type="application/n-triples", graph=GRAPH, source="second")
    monkeypatch.undo()
    filled.close()
    reopened = OxigraphStore(folder)
    assert content(reopened) == expected(0, 200) and reopened.loaded_graphs()[GRAPH] == "second"
    assert leftovers(folder) == []  # type: ignore[arg-type]
    reopened.close()


def test_a_second_writer_is_refused_while_one_writes(filled: OxigraphStore) -> None:
    from mirage_kg.errors import StoreError

    with pytest.raises(StoreError, match="another mirage-kg process is writing"):
        OxigraphStore(filled.path)
    reader = OxigraphStore(filled.path, read_only=True)
    assert content(reader) == expected(0, 100)
    reader.close()


@pytest.mark.parametrize("replace", [False, True], ids=["merge", "replace"])
def test_a_killed_merge_or_replace_keeps_the_old_graph(tmp_path: Path, replace: bool) -> None:
    folder = tmp_path / "kg"
    store = OxigraphStore(folder)
    store.load(lines(0, 100), media_type="application/n-triples", graph=GRAPH, source="first")
    store.close()
    del store
    script = textwrap.dedent(f"""
        import contextlib
        from mirage_kg.store import OxigraphStore
        store = OxigraphStore({str(folder)!r})
        def lines():
            for i in range(10**8):
                yield f"<urn:e:{{i}}> <urn:q> <urn:e:{{i + 1}}> .\\n"
        with store.replacing({GRAPH!r}) if {replace!r} else contextlib.nullcontext():
            store.load(lines(), media_type="application/n-triples", graph={GRAPH!r}, source="x")
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "MIRAGE_KG_PROGRESS": "0"})
    time.sleep(4)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert any(name.startswith("rollback-") for name in leftovers(folder))  # killed under its checkpoint
    reopened = OxigraphStore(folder)
    assert content(reopened) == expected(0, 100) and reopened.loaded_graphs()[GRAPH] == "first"
    assert [g for g in reopened.graphs() if g != MANIFEST_GRAPH and "schema" not in g] == [GRAPH]
    assert leftovers(folder) == []
    reopened.close()


@pytest.mark.slow
def test_ctrl_c_reaches_the_loader_inside_one_native_call(tmp_path: Path) -> None:
    """Python runs a SIGINT handler only when the main thread is back in Python, which a native bulk load is not
    until it ends: Ctrl-C used to wait for the segment being indexed (45 s at 64 MB on a busy machine). The
    feeding thread now sees the signal through the wakeup pipe and cuts the parser off, so a load, which is one
    native call, stops reading its input and is put back."""
    folder = tmp_path / "kg"
    script = textwrap.dedent(f"""
        import sys
        import mirage_kg.store.oxigraph as oxigraph
        store = oxigraph.OxigraphStore({str(folder)!r})
        consumed = [0]
        def lines():
            for i in range(50_000_000):
                consumed[0] = i
                yield f"<urn:e:{{i}}> <urn:p> <urn:e:{{i + 1}}> .\\n"
        print("loading", flush=True)
        try:
            store.load(lines(), media_type="application/n-triples", graph={GRAPH!r}, source="x")
        except KeyboardInterrupt:
            print("consumed", consumed[0], "graphs", store.graphs(), flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "MIRAGE_KG_PROGRESS": "0"},
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "loading"
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=600)
    words = out.split()
    assert words[0] == "consumed", out
    assert int(words[1]) < 49_000_000  # stopped reading, not run to the end of the input
    assert GRAPH not in out and leftovers(folder) == []
