"""The Store contract, run on every kind of store: the embedded Oxigraph store in memory and on disk, a live
Oxigraph server with and without ``--union-default-graph``, and a live Virtuoso (skipped when not installed)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from mirage_kg.errors import EndpointError, InputError, MirageError, QueryError, StoreError
from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
from mirage_kg.model.namespaces import ENTITY, SKOS_ALT, SKOS_PREF
from mirage_kg.graph.stats import compute_stats
from mirage_kg.releases.diff import parse_lines
from mirage_kg.store import OxigraphStore, SparqlStore, Store
from mirage_kg.store.oxigraph_terms import to_term
from mirage_kg.model.terms import Term

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "core"


@pytest.fixture
def store(any_store: Store) -> Store:
    """This module's contract runs on every kind of store, not only the two of the shared ``store`` fixture."""
    return any_store


def load_file(store: Store, name: str, fmt: str, **opts: object) -> None:
    get_loader(fmt).load(store, FIX / name, LoadOptions(**opts), LoadReport())  # type: ignore[arg-type]


def test_select_ask_construct(store: Store) -> None:
    load_file(store, "tiny.ttl", "rdf")
    rows = store.select(f"SELECT ?l WHERE {{ <{ENTITY}Asthma> <{SKOS_PREF}> ?l }}")
    assert rows == [{"l": Term("literal", "Asthma", "en")}]
    assert store.ask(f"ASK {{ <{ENTITY}Asthma> ?p <{ENTITY}Wheezing> }}") is True
    assert store.ask(f"ASK {{ <{ENTITY}Wheezing> ?p <{ENTITY}Asthma> }}") is False
    triples = store.construct(f"CONSTRUCT {{ ?s ?p ?o }} WHERE {{ ?s ?p ?o FILTER(?s = <{ENTITY}Wheezing>) }}")
    assert len(triples) == 2


def test_streamed_rows_match_select(store: Store) -> None:
    """``select_all`` and ``iri_rows`` (the whole-graph passes' readers) give ``select``'s rows, streamed; iri_rows
    gives None for a value that is not an IRI and for an unbound one."""
    load_file(store, "tiny.ttl", "rdf")
    query = f"SELECT ?s ?o ?none WHERE {{ GRAPH ?g {{ ?s ?p ?o }} FILTER(?s = <{ENTITY}Asthma>) }}"
    rows = store.select(query)
    assert sorted(map(repr, store.select_all(query))) == sorted(map(repr, rows)) and len(rows) > 2
    expected = [(r["s"].value, r["o"].value if r["o"].kind == "uri" else None, None) for r in rows]
    got = sorted(store.iri_rows(query, ("s", "o", "none")), key=lambda r: (r[0], r[1] or ""))
    assert got == sorted(expected, key=lambda r: (r[0], r[1] or ""))
    assert any(o is None for _, o, _ in got) and any(o is not None for _, o, _ in got)


def test_links_and_predicates_between_read_the_index_as_quads_do(store: Store) -> None:
    """``links`` (the path search's adjacency primitive) gives (predicate, other end) for the IRI-valued quads at
    a node, either way and for one predicate; ``predicates_between`` the predicates with both ends bound;
    ``literals`` a node's literal values of one predicate with their language; a node no quad names (or an IRI
    no store can hold) gives nothing."""
    load_file(store, "tiny.ttl", "rdf")
    asthma, wheezing = f"{ENTITY}Asthma", f"{ENTITY}Wheezing"
    has_symptom = "https://w3id.org/mirage-kg/schema#has_symptom"
    forward = set(store.links(asthma, "forward"))
    assert (has_symptom, wheezing) in forward
    assert forward == {(q.predicate.value, q.object.value) for q in store.quads(asthma) if q.object.kind == "uri"}
    assert all(o != "reactive \"airway\" disease" for _, o in forward)  # literals are not links
    assert set(store.links(wheezing, "backward")) == {(has_symptom, asthma)}
    assert set(store.links(wheezing, "backward", has_symptom)) == {(has_symptom, asthma)}
    assert list(store.links(wheezing, "backward", SKOS_PREF)) == []
    assert list(store.predicates_between(asthma, wheezing)) == [has_symptom]
    assert list(store.predicates_between(wheezing, asthma)) == []
    assert list(store.links(f"{ENTITY}Nothing", "forward")) == []
    labels = {(q.object.value, q.object.lang) for q in store.quads(asthma, SKOS_ALT) if q.object.kind == "literal"}
    assert labels and sorted(store.literals(asthma, SKOS_ALT)) == sorted(labels)  # the label lookup's primitive
    assert list(store.literals(asthma, has_symptom)) == []  # IRIs are not literals
    assert list(store.literals(f"{ENTITY}Nothing", SKOS_PREF)) == []


def test_triple_lines_and_holds_say_what_the_pattern_primitive_says(store: Store) -> None:
    """The capabilities a release update reads the graph through: ``triple_lines`` (a graph's triples as N-Triples
    lines) and ``holds`` (a point lookup of a triple of IRIs) give what ``quads`` gives, whether the store answers
    them from its own index or by the contract's default; an IRI no store can hold matches nothing."""
    load_file(store, "tiny.ttl", "rdf")
    asthma, wheezing = f"{ENTITY}Asthma", f"{ENTITY}Wheezing"
    has_symptom = "https://w3id.org/mirage-kg/schema#has_symptom"
    graph = next(iter(store.quads(asthma))).graph
    for pattern in ({"subject": asthma}, {"obj": wheezing}, {"predicate": has_symptom}, {"subject": wheezing}):
        lines = sorted(store.triple_lines(graph, **pattern))
        assert lines and lines == sorted(Store.triple_lines(store, graph, **pattern)), pattern  # own == default
        assert {(to_term(t.subject), to_term(t.predicate), to_term(t.object)) for t in parse_lines(lines)} == \
            {(q.subject, q.predicate, q.object) for q in store.quads(graph=graph, **pattern)}, pattern
    assert list(store.triple_lines(graph + "-none", asthma)) == []
    assert list(store.triple_lines(graph, "not an IRI")) == []
    for holds in (store.holds, lambda *t: Store.holds(store, *t)):
        assert holds(asthma, has_symptom, wheezing, graph) is True
        assert holds(wheezing, has_symptom, asthma, graph) is False
        assert holds(asthma, has_symptom, wheezing, graph + "-none") is False
        assert holds("not an IRI", has_symptom, wheezing, graph) is False


def test_read_only_is_part_of_the_contract(store: Store, tmp_path: Path) -> None:
    """Every store says whether it refuses writes (the graph layer builds no file beside a read-only store); a
    store opened for writing does not, a reader of an on-disk store does, and refuses a write naming the store."""
    assert store.read_only is False
    folder = tmp_path / "read-only-check"
    OxigraphStore(folder).close()
    with OxigraphStore(folder, read_only=True) as reader:
        assert reader.read_only is True
        with pytest.raises(StoreError, match="read-only"):
            reader.update(f"INSERT DATA {{ GRAPH <{ENTITY}g> {{ <{ENTITY}a> <{ENTITY}b> <{ENTITY}c> }} }}")


def test_hostile_literal_round_trips(store: Store) -> None:
    load_file(store, "tiny.ttl", "rdf")
    alt = store.triples(f"{ENTITY}Asthma", SKOS_ALT)
    assert [o.value for _, _, o in alt] == ['reactive "airway" disease']
    # The same term written back into a query through Term.sparql() matches exactly itself.
    assert store.ask(f"ASK {{ ?s <{SKOS_ALT}> {alt[0][2].sparql()} }}")


def test_triple_file_counts_and_graph(store: Store) -> None:
    load_file(store, "small.tsv", "triples")
    result = compute_stats(store)
    assert result.facts == 3  # four lines, one repeat
    assert result.entities == 3
    assert {r["id"]: r["count"] for r in result.relations} == {"MKG:has_symptom": 2, "MKG:possible_disease": 1}
    assert result.labels == 3 + 2  # three entity labels, two relation labels
    graphs = store.loaded_graphs()
    assert any(g.endswith("/triples/small.tsv") for g in graphs)


def test_failed_load_leaves_store_unchanged(store: Store) -> None:
    load_file(store, "small.tsv", "triples")
    before = sorted(map(str, store.select("SELECT ?s ?p ?o ?g WHERE { GRAPH ?g { ?s ?p ?o } }")))
    with pytest.raises(InputError) as info:
        load_file(store, "malformed.tsv", "triples")
    assert "malformed.tsv:3" in str(info.value) and "3 tab-separated fields" in str(info.value)
    # Also into the same, non-empty graph (the staged path).
    with pytest.raises(InputError):
        load_file(store, "malformed.tsv", "triples", graph=store.graphs()[-1])
    after = sorted(map(str, store.select("SELECT ?s ?p ?o ?g WHERE { GRAPH ?g { ?s ?p ?o } }")))
    assert after == before


def test_append_to_existing_graph(store: Store) -> None:
    graph = "https://w3id.org/mirage-kg/graph/mine"
    load_file(store, "small.tsv", "triples", graph=graph)
    n = store.triple_count(graph)
    load_file(store, "tiny.ttl", "rdf", graph=graph)
    assert store.triple_count(graph) > n
    assert not [g for g in store.graphs() if "/staging/" in g]


def test_recover_drops_pending_load(store: Store) -> None:
    load_file(store, "small.tsv", "triples")
    before = store.triple_count()
    # Simulate a load killed midway: pending marker plus part of its data.
    store.update(
        'INSERT DATA { GRAPH <https://w3id.org/mirage-kg/graph/manifest> { <urn:x:half> <https://w3id.org/mirage-kg/schema#pendingLoad> "t1" } '
        "GRAPH <urn:x:half> { <urn:x:a> <urn:x:p> <urn:x:b> } }"
    )
    assert store.recover() == ["urn:x:half"]
    assert store.triple_count() == before


def test_invalid_query_is_a_query_error(store: Store) -> None:
    with pytest.raises(QueryError):
        store.select("SELEKT nonsense")


def test_export_ntriples(store: Store) -> None:
    load_file(store, "small.tsv", "triples")
    out = io.BytesIO()
    store.export(out, "application/n-triples")
    assert b"has_symptom" in out.getvalue()


def test_unreachable_endpoint_names_url_and_is_retryable() -> None:
    broken = SparqlStore("http://127.0.0.1:9/query", max_retries=1, backoff=0.01, timeout=2)
    with pytest.raises(EndpointError) as info:
        broken.select("SELECT * WHERE { ?s ?p ?o }")
    assert info.value.retryable and "127.0.0.1:9" in str(info.value)


@pytest.mark.parametrize(("media", "marker"), [("application/n-quads", b"/triples/small.tsv>"),
                                               ("text/turtle", b"has_symptom")])
def test_export_quads_and_turtle(store: Store, media: str, marker: bytes) -> None:
    load_file(store, "small.tsv", "triples")
    out = io.BytesIO()
    store.export(out, media)
    assert marker in out.getvalue()
    import pyoxigraph as ox

    fmt = ox.RdfFormat.N_QUADS if media == "application/n-quads" else ox.RdfFormat.TURTLE
    parsed = list(ox.parse(out.getvalue(), format=fmt))
    facts = [q for q in parsed if q.predicate.value.endswith(("has_symptom", "possible_disease"))]
    assert len(facts) == 3


def test_query_timeout_bounds_the_whole_answer(store: Store) -> None:
    """A query whose millions of rows keep streaming is cut off at the timeout, not at each socket read."""
    load_file(store, "small.tsv", "triples")
    with pytest.raises(MirageError) as info:
        store.select("SELECT * WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i }", timeout=0.2)
    assert "timeout" in str(info.value)


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_a_timed_out_query_stops_in_the_background(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> None:
    """The embedded store's timeout leaves the evaluation to a daemon thread; it used to keep collecting rows of an
    abandoned cross product until the process died (the one-process test suite grew past 20 GB that way, and a
    long-lived `serve` would too). Now the thread stops at its next row once the caller has given up."""
    import threading
    import time

    from tests.conftest import open_kind

    store = open_kind(request, kind, tmp_path)
    load_file(store, "small.tsv", "triples")
    with pytest.raises(QueryError, match="timeout"):
        store.select("SELECT * WHERE { ?a ?b ?c . ?d ?e ?f . ?g ?h ?i . ?j ?k ?l }", timeout=0.2)
    deadline = time.monotonic() + 30  # no timing assertion: without the fix the thread runs for hours
    while any(t.name == "mirage-kg-query" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t for t in threading.enumerate() if t.name == "mirage-kg-query"]
    store.close()
