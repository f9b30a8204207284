"""Loads that change a graph already holding data, on the embedded store: a merge (a load into a filled graph)
and a replace (``build-default --force``). On disk they load in place under a rollback checkpoint (see
tests/kg/test_store_checkpoints.py); in memory they are loaded aside and swapped in by a streaming roll-forward.
Either way a failed, killed or interrupted reload keeps the old graph, and a swap cut short is finished by the
next writer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirage_kg.errors import InputError
from mirage_kg.build import default_kg
from mirage_kg.store import OxigraphStore, ensure_schema
from mirage_kg.store.base import MANIFEST_GRAPH
from mirage_kg.store.oxigraph_write import COMMIT_INTO

GRAPH = "https://w3id.org/mirage-kg/graph/test/swap"


def lines(start: int, stop: int, fail_at: int | None = None) -> Iterator[str]:
    for i in range(start, stop):
        if i == fail_at:
            raise InputError("bad row", "generated.nt", i)
        yield f"<urn:e:{i}> <urn:p> <urn:e:{i + 1}> .\n"


def content(store: OxigraphStore, graph: str = GRAPH) -> set[str]:
    return {str(q.triple) for q in store.raw.quads_for_pattern(None, None, None, store_node(graph))}


def store_node(graph: str) -> object:
    import pyoxigraph as ox

    return ox.NamedNode(graph)


def data_graphs(store: OxigraphStore) -> list[str]:
    return [g for g in store.graphs() if g != MANIFEST_GRAPH and "schema" not in g]


@pytest.fixture()
def filled(tmp_path: Path) -> OxigraphStore:
    store = OxigraphStore(tmp_path / "kg")
    store.load(lines(0, 100), media_type="application/n-triples", graph=GRAPH, source="first")
    return store


def test_a_merge_adds_to_the_graph_and_leaves_no_staging(filled: OxigraphStore) -> None:
    receipt = filled.load(lines(50, 150), media_type="application/n-triples", graph=GRAPH, source="second")
    assert receipt.added == 50
    assert len(content(filled)) == 150
    assert data_graphs(filled) == [GRAPH]
    assert not list(filled.raw.quads_for_pattern(None, store_node(COMMIT_INTO), None, None))


def test_a_replace_swaps_the_content_in_one_step(filled: OxigraphStore) -> None:
    with filled.replacing(GRAPH):
        filled.load(lines(200, 260), media_type="application/n-triples", graph=GRAPH, source="new release")
    assert content(filled) == {str(t) for t in _triples(200, 260)}
    assert filled.loaded_graphs()[GRAPH] == "new release"
    assert data_graphs(filled) == [GRAPH]


def test_a_failed_replace_or_merge_keeps_the_old_graph(filled: OxigraphStore) -> None:
    before = content(filled)
    with pytest.raises(InputError), filled.replacing(GRAPH):
        filled.load(lines(200, 300, fail_at=250), media_type="application/n-triples", graph=GRAPH, source="x")
    with pytest.raises(InputError):
        filled.load(lines(200, 300, fail_at=250), media_type="application/n-triples", graph=GRAPH, source="x")
    assert content(filled) == before and data_graphs(filled) == [GRAPH]
    assert filled.loaded_graphs()[GRAPH] == "first"


def test_a_swap_cut_short_is_finished_by_the_next_writer(filled: OxigraphStore, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A swap staged in a scratch store (how a store in memory merges, and how an on-disk store did before
    rollback checkpoints), killed after the commit point (the intent is written) and midway through the copy: the
    next open rolls the swap forward, so the new release is there whole and the staging graph is gone."""
    real_clear = OxigraphStore._clear_graph
    monkeypatch.setattr(OxigraphStore, "_take_checkpoint", lambda self, graph: None)

    def crash_after_emptying(self: OxigraphStore, graph: str, chunk: int = 7) -> None:
        real_clear(self, graph, chunk)
        raise KeyboardInterrupt  # stands for the kill, after the old content went and before the new came in

    monkeypatch.setattr(OxigraphStore, "_clear_graph", crash_after_emptying)
    with pytest.raises(KeyboardInterrupt), filled.replacing(GRAPH):
        filled.load(lines(200, 260), media_type="application/n-triples", graph=GRAPH, source="new release")
    monkeypatch.undo()
    filled.close()
    del filled
    reopened = OxigraphStore(tmp_path / "kg")
    assert content(reopened) == {str(t) for t in _triples(200, 260)}
    assert data_graphs(reopened) == [GRAPH]
    assert reopened.loaded_graphs()[GRAPH] == "new release"


def test_build_default_force_that_fails_keeps_the_old_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``build-default --force`` used to drop the graph before loading the new version: killed or failed, the
    source was gone. Now the reload fails and the old graph is still there, whole."""
    store = OxigraphStore(tmp_path / "bd")
    ensure_schema(store)
    graph = "https://w3id.org/mirage-kg/graph/icd10cm/test"
    monkeypatch.setattr(default_kg, "_available", lambda source: True)
    monkeypatch.setattr(default_kg, "_graph_of", lambda source: graph)

    def load_source(target: OxigraphStore, source: str, name: str, report: object, fail: bool = False) -> object:
        return target.load(lines(0, 500, fail_at=400 if fail else None), media_type="application/n-triples",
                           graph=name, source="icd10cm")

    monkeypatch.setattr(default_kg, "_load_source", load_source)
    default_kg.build_default_kg(store, ["icd10cm"])
    before = content(store, graph)
    assert len(before) == 500
    monkeypatch.setattr(default_kg, "_load_source", lambda *a: load_source(*a, fail=True))
    with pytest.raises(InputError):
        default_kg.build_default_kg(store, ["icd10cm"], force=True)
    assert content(store, graph) == before and graph in store.loaded_graphs()


def _triples(start: int, stop: int) -> list[object]:
    import pyoxigraph as ox

    return [ox.Triple(ox.NamedNode(f"urn:e:{i}"), ox.NamedNode("urn:p"), ox.NamedNode(f"urn:e:{i + 1}"))
            for i in range(start, stop)]


@pytest.mark.slow
def test_ctrl_c_stops_a_load_and_rolls_it_back(tmp_path: Path) -> None:
    """SIGINT while the native bulk loader runs used to wait for it (Python only acts on a signal between
    bytecodes) and could let the load commit; now it stops at the next segment and the load is rolled back."""
    folder = tmp_path / "kg"
    env = {**os.environ, "MIRAGE_KG_PROGRESS": "0"}
    small = Path(__file__).resolve().parent.parent / "fixtures" / "core" / "small.tsv"
    cli = [sys.executable, "-m", "mirage_kg.cli"]
    subprocess.run([*cli, "load", str(small), "--store", str(folder)], env=env, check=True, capture_output=True)
    big = tmp_path / "big.tsv"
    with open(big, "w") as handle:
        for i in range(0, 3_000_000, 1000):
            handle.write("".join(f"E{j}\tr{j % 7}\tE{(j * 7919) % 400_000}\n" for j in range(i, i + 1000)))
    proc = subprocess.Popen([*cli, "load", str(big), "--store", str(folder)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "interrupted" in err, err
    stats = subprocess.run([*cli, "stats", "--store", str(folder), "--json"], env=env, capture_output=True,
                           text=True, check=True)
    assert '"facts": 3' in stats.stdout
