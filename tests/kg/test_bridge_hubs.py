"""Bridge through a hub (a node past ``PATH_HUB_DEGREE`` fact edges): the same paths as a plain enumeration
(networkx) and as the endpoints' SPARQL patterns, and where a cap does cut the search, the answer says so and
how to lift it instead of claiming "no path"."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.kg import KnowledgeGraph
from mirage_kg.model.namespaces import ENTITY
from mirage_kg.store import OxigraphStore, Store, ensure_schema

from tests.kg.test_graph import as_raw, fact_multigraph, reference_paths

GRAPH = "https://w3id.org/mirage-kg/graph/test"
PREFIXES = "@prefix KG: <https://w3id.org/mirage-kg/entity/> . @prefix ex: <http://example.org/rel/> .\n"


def hub_turtle(leaves: int = 6000) -> str:
    """A hub with ``leaves`` leaves (past the default ``PATH_HUB_DEGREE`` of 5,000), two nodes on its far side
    (A, C: one edge each) and every tenth leaf one edge on to C, so 2- and 3-edge paths run through the hub."""
    lines = [PREFIXES, "KG:A ex:b KG:Hub .", "KG:Hub ex:c KG:C ."]
    lines += [f"KG:Hub ex:a KG:Leaf{i} ." for i in range(leaves)]
    lines += [f"KG:Leaf{i} ex:d KG:C ." for i in range(0, leaves, 10)]
    return "\n".join(lines) + "\n"


def loaded(text: str) -> OxigraphStore:
    store = OxigraphStore()
    ensure_schema(store)
    store.load(io.BytesIO(text.encode("utf-8")), media_type="text/turtle", graph=GRAPH, source="test")
    return store


def uncapped_leaves(kg: KnowledgeGraph, count: int) -> list[str]:
    """Leaves whose edge to the hub is not among the hub's capped edges (the ones a capped walk would take)."""
    from mirage_kg.graph.limits import PATH_HUB_EDGES

    capped = {n.node for n in kg._hub_neighbours(ENTITY + "Hub", None, PATH_HUB_EDGES)}
    leaves = [f"{ENTITY}Leaf{i}" for i in range(0, 6000, 10) if f"{ENTITY}Leaf{i}" not in capped]
    assert len(leaves) >= count
    return leaves[:count]


@pytest.fixture(scope="module")
def hub_store() -> Store:
    return loaded(hub_turtle())


def test_bridge_through_a_hub_is_every_path(hub_store: Store) -> None:
    """A to a leaf through the hub (2 edges), and on to C (3 edges): every path networkx enumerates, for leaves
    whose hub edge is past the hub's first ``PATH_HUB_EDGES``. The embedded store used to drop them all ("no
    path") where Oxigraph server, Virtuoso and networkx found them."""
    kg = KnowledgeGraph(hub_store, embedding_model="none")
    graph = fact_multigraph(hub_store)
    assert kg.degrees([ENTITY + "Hub"])[ENTITY + "Hub"] > 5000
    for leaf in uncapped_leaves(kg, 4):
        for a, b in ((ENTITY + "A", leaf), (leaf, ENTITY + "A"), (ENTITY + "A", ENTITY + "C")):
            for hops in (1, 2, 3):
                expected = reference_paths(graph, a, b, hops)
                found = kg.bridge(a, b, max_hops=hops, max_paths=10**6, rank="degree")
                assert as_raw(found) == expected, (a, b, hops)
                assert found.capped == ()  # nothing was cut, and the answer says so
        assert reference_paths(graph, ENTITY + "A", leaf, 2)  # a real 2-edge path through the hub


def cut_turtle() -> str:
    """With ``PATH_HUB_DEGREE`` 40 and ``PATH_HUB_EDGES`` 3: A's only edge leads to the hub H (60 leaves), and B
    has 100 edges of its own, so the search extends past H (along its capped edges) rather than read B's whole
    neighbourhood: a leaf's path A-H-leaf-B is found only with the cap lifted."""
    lines = [PREFIXES, "KG:A ex:b KG:H ."]
    lines += [f"KG:H ex:a KG:L{i} ." for i in range(60)]
    lines += [f"KG:B ex:e KG:Far{i} ." for i in range(100)]
    lines += [f"KG:L{i} ex:d KG:B ." for i in range(60)]
    return "\n".join(lines) + "\n"


def test_a_capped_search_says_so_and_lifting_the_cap_finds_every_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import mirage_kg.graph.limits as graph_module

    monkeypatch.setattr(graph_module, "PATH_HUB_DEGREE", 40)
    monkeypatch.setattr(graph_module, "PATH_HUB_EDGES", 3)
    store = loaded(cut_turtle())
    kg = KnowledgeGraph(store, embedding_model="none")
    a, b = ENTITY + "A", ENTITY + "B"
    expected = reference_paths(fact_multigraph(store), a, b, 3)
    assert len(expected) == 60
    capped = kg.bridge(a, b, max_hops=3, max_paths=10**6, rank="degree")
    assert [hub for hub, _ in capped.capped] == [ENTITY + "H"] and capped.capped[0][1] == 61
    assert len(capped) < len(expected) and set(as_raw(capped)) <= set(expected)
    whole = kg.bridge(a, b, max_hops=3, max_paths=10**6, rank="degree", hub_edges=0)
    assert as_raw(whole) == expected and whole.capped == ()


def test_bridge_command_never_says_no_path_when_a_cap_cut_the_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's "no path" message is only for a search that was not cut; a cut search names the hub, its
    edge count and ``--hub-edges 0``; ``--json`` carries the same in ``capped``."""
    import mirage_kg.graph.limits as graph_module

    monkeypatch.setattr(graph_module, "PATH_HUB_DEGREE", 40)
    monkeypatch.setattr(graph_module, "PATH_HUB_EDGES", 3)
    lines = [PREFIXES, "KG:A ex:b KG:H ."]  # only one leaf reaches B, past H's capped edges
    lines += [f"KG:H ex:a KG:L{i} ." for i in range(60)]
    lines += [f"KG:B ex:e KG:Far{i} ." for i in range(100)]
    source = tmp_path / "cut.ttl"
    store = tmp_path / "store"
    runner = CliRunner()
    kg_probe = KnowledgeGraph(loaded("\n".join(lines) + "\n"), embedding_model="none")
    capped = {n.node for n in kg_probe._hub_neighbours(ENTITY + "H", None, 3)}
    leaf = next(f"L{i}" for i in range(60) if f"{ENTITY}L{i}" not in capped)
    source.write_text("\n".join([*lines, f"KG:{leaf} ex:d KG:B ."]) + "\n", encoding="utf-8")
    done = runner.invoke(main, ["load", str(source), "--store", str(store), "--no-index"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    where = ["--store", str(store), "--embedding-model", "none"]
    out = runner.invoke(main, ["query", "bridge", "KG:A", "KG:B", "--max-hops", "3", *where])
    assert out.exit_code == 0, out.output
    assert "no path of at most 3 edges between" not in out.output  # the claim the old code made
    assert "KG:H, 61 edges" in out.output and "--hub-edges 0" in out.output
    data = runner.invoke(main, ["query", "bridge", "KG:A", "KG:B", "--max-hops", "3", "--json", *where])
    parsed: Any = json.loads(data.output)
    assert parsed["paths"] == [] and parsed["capped"] == [{"id": "KG:H", "label": "KG:H", "edges": 61}]
    lifted = runner.invoke(main, ["query", "bridge", "KG:A", "KG:B", "--max-hops", "3", "--hub-edges", "0", *where])
    assert lifted.exit_code == 0 and "1 path(s)" in lifted.output and leaf in lifted.output, lifted.output
