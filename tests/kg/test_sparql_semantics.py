"""What ``query sparql`` answers on every store: the projected variables even when no row binds them, and the
dataset a query without GRAPH sees (the union of the named graphs' quads: a triple held in two graphs matches
once per graph on the embedded store, Oxigraph server and Virtuoso alike; ``stats`` counts distinct triples)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.store import Store

from tests.conftest import STORE_KINDS, open_kind

GRAPH = "https://w3id.org/mirage-kg/graph/"
TWO_GRAPHS = [("one", b"<urn:x:a> <urn:x:p> <urn:x:b> .\n<urn:x:a> <urn:x:q> <urn:x:one> .\n"),
              ("two", b"<urn:x:a> <urn:x:p> <urn:x:b> .\n<urn:x:a> <urn:x:q> <urn:x:two> .\n")]


def fill(store: Store) -> None:
    for name, data in TWO_GRAPHS:
        store.load(io.BytesIO(data), media_type="application/n-triples", graph=GRAPH + name, source=name)


@pytest.fixture(params=STORE_KINDS)
def two_graph_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    store = open_kind(request, request.param, tmp_path)
    fill(store)
    yield store
    store.close()


@pytest.mark.parametrize("query, names", [
    ("SELECT ?x ?y WHERE { ?x <urn:nothing> ?y }", ["x", "y"]),
    ("SELECT * WHERE { ?x <urn:nothing> ?y }", ["x", "y"]),
    ("SELECT ?s ?missing WHERE { ?s <urn:x:q> <urn:x:one> OPTIONAL { ?s <urn:nothing> ?missing } }",
     ["s", "missing"]),
    ("SELECT (COUNT(*) AS ?n) ?s WHERE { ?s <urn:nothing> ?o } GROUP BY ?s", ["n", "s"]),
])
def test_select_gives_its_projected_variables_even_unbound(two_graph_store: Store, query: str,
                                                           names: list[str]) -> None:
    """``vars`` used to be read off the rows: ``[]`` for an empty answer, and a variable no row bound was
    missing."""
    assert two_graph_store.query(query)["vars"] == names


def test_a_triple_in_two_graphs_matches_once_per_graph_on_every_store(two_graph_store: Store) -> None:
    """The dataset union of quads: the same on every engine, so documented rather than rewritten."""
    count = "SELECT (COUNT(*) AS ?n) WHERE { ?s ?p ?o FILTER(STRSTARTS(STR(?s), 'urn:x:')) }"
    assert two_graph_store.query(count)["rows"][0]["n"].value == "4"
    distinct = "SELECT (COUNT(*) AS ?n) WHERE { SELECT DISTINCT ?s ?p ?o WHERE { ?s ?p ?o " \
               "FILTER(STRSTARTS(STR(?s), 'urn:x:')) } }"
    assert two_graph_store.query(distinct)["rows"][0]["n"].value == "3"
    rows = two_graph_store.query("SELECT ?o WHERE { <urn:x:a> <urn:x:p> ?o }")["rows"]
    assert [r["o"].value for r in rows] == ["urn:x:b", "urn:x:b"]


def test_cli_json_of_an_empty_select_and_the_documented_semantics(tmp_path: Path) -> None:
    runner = CliRunner()
    data = tmp_path / "one.nt"
    data.write_bytes(TWO_GRAPHS[0][1])
    store = ["--store", str(tmp_path / "store")]
    assert runner.invoke(main, ["load", str(data), "--no-index", *store]).exit_code == 0
    out = runner.invoke(main, ["query", "sparql", "SELECT ?x ?y WHERE { ?x <urn:nothing> ?y }", "--json", *store])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {"head": {"vars": ["x", "y"]}, "results": {"bindings": []}}
    plain = runner.invoke(main, ["query", "sparql", "SELECT ?x ?y WHERE { ?x <urn:nothing> ?y }", *store])
    assert plain.output.splitlines() == ["x\ty"]
    helptext = runner.invoke(main, ["query", "sparql", "--help"]).output
    assert "once per graph" in helptext and "DISTINCT" in helptext
