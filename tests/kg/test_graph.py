"""Graph queries on both stores: entity lookup, anchor, bridge (exact against a plain enumeration with networkx),
verbalisation in both directions, path checks, and ids/labels that try to break out of a query."""

from __future__ import annotations

import io
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirage_kg.errors import InputError, MirageError, UnknownEntityError
from mirage_kg.graph.facts import NON_FACT_PREDICATES, Neighbour
from mirage_kg.graph.paths import once_each_way, path_sort_key
from mirage_kg.kg import KnowledgeGraph
from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
from mirage_kg.model.records import Entity, Path as KgPath, Relation, Step
from mirage_kg.model.namespaces import ENTITY, MKG, compress, is_identifier, mint
from mirage_kg.store import OxigraphStore, SparqlStore, Store, ensure_schema
from mirage_kg.model.terms import iri_ref, literal

SMALL = """
@prefix MKG:  <https://w3id.org/mirage-kg/schema#> .
@prefix KG:   <https://w3id.org/mirage-kg/entity/> .
@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .
@prefix skos: <http://www.w3.org/2004/02/skos/core#> .
@prefix ex:   <http://example.org/rel/> .

KG:Panic_disorder a MKG:Disease ; skos:prefLabel "Panic disorder"@en , "Panikstörung"@de ;
    MKG:has_symptom KG:Dizziness , KG:Palpitations , KG:Chest_pain ;
    MKG:need_medication KG:Lorazepam .
KG:Hypertension a MKG:Disease ; skos:prefLabel "Hypertension"@en ; skos:altLabel "high blood pressure"@en ;
    MKG:has_symptom KG:Dizziness , KG:Headache , KG:Chest_pain .
KG:Migraine a MKG:Disease ; skos:prefLabel "Migraine"@en ; MKG:has_symptom KG:Headache , KG:Dizziness .
KG:Dizziness skos:prefLabel "Dizziness"@en ; MKG:possible_disease KG:Panic_disorder .
KG:Palpitations skos:prefLabel "Palpitations"@en .
KG:Chest_pain skos:prefLabel "Chest pain"@en .
KG:Headache rdfs:label "Headache" .
KG:Lorazepam skos:prefLabel "Lorazepam"@en ; ex:treats KG:Panic_disorder .
KG:Lonely skos:prefLabel "Lonely"@en .
KG:Isolated skos:prefLabel "Isolated"@en ; ex:relatedTo KG:Lonely .
ex:treats rdfs:label "treats" .
ex:hasPart rdfs:label "has part" .
ex:odd rdfs:label "odd" ; MKG:forwardTemplate "{subject.__class__} {0} {object}" .
"""

E = ENTITY


def load_text(store: Store, text: str, graph: str = "https://w3id.org/mirage-kg/graph/test") -> None:
    store.load(io.BytesIO(text.encode("utf-8")), media_type="text/turtle", graph=graph, source="test")


TEST_GRAPH = "https://w3id.org/mirage-kg/graph/test"


@pytest.fixture(scope="module", params=["oxigraph", "sparql"])
def small_store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """The small graph on each store, loaded once per module (the tests here only read it)."""
    if request.param == "oxigraph":
        opened: Store = OxigraphStore()
    else:
        server = request.getfixturevalue("oxigraph_server")
        server.clear()
        opened = SparqlStore(server.query_url)
    ensure_schema(opened)
    load_text(opened, SMALL, TEST_GRAPH)
    yield opened
    opened.close()


@pytest.fixture
def kg(small_store: Store, tmp_path: Path) -> KnowledgeGraph:
    if small_store.triple_count(TEST_GRAPH) == 0:  # another module's test cleared the shared server meanwhile
        ensure_schema(small_store)
        load_text(small_store, SMALL, TEST_GRAPH)
    return KnowledgeGraph(small_store, embedding_model="none", cache_dir=tmp_path / "cache")


# --- entities -------------------------------------------------------------------------------------------------------

def test_entity_by_curie_iri_and_label(kg: KnowledgeGraph) -> None:
    by_curie = kg.entity("KG:Panic_disorder")
    assert by_curie == Entity(E + "Panic_disorder", "Panic disorder")  # English prefLabel wins over German
    assert kg.entity(E + "Panic_disorder") == by_curie
    assert kg.entity(f"<{E}Panic_disorder>") == by_curie
    assert kg.entity("Panic disorder") == by_curie
    assert kg.entity("high blood pressure").id == "KG:Hypertension"  # an exact synonym
    assert kg.entity("KG:Headache").label == "Headache"  # rdfs:label when there is no prefLabel
    with pytest.raises(UnknownEntityError):
        kg.entity("KG:Nothing_here")
    with pytest.raises(UnknownEntityError):
        kg.entity("panic disorders")  # entity() is exact; the linker does the rest
    with pytest.raises(UnknownEntityError, match="relation or class"):
        kg.entity("MKG:has_symptom")


# --- anchor ---------------------------------------------------------------------------------------------------------

def test_anchor_both_directions_ordered_and_starting_at_the_anchor(kg: KnowledgeGraph) -> None:
    steps = kg.anchor("KG:Panic_disorder", rank="degree")
    assert all(s.start.id == "KG:Panic_disorder" for s in steps)
    got = [(s.relation.id, s.direction, s.end.id) for s in steps]
    assert got == [
        # MKG:has_symptom out, ranked by degree (Dizziness 4, Chest pain 2, Palpitations 1)
        ("MKG:has_symptom", "forward", "KG:Dizziness"),
        ("MKG:has_symptom", "forward", "KG:Chest_pain"),
        ("MKG:has_symptom", "forward", "KG:Palpitations"),
        ("MKG:need_medication", "forward", "KG:Lorazepam"),
        ("MKG:possible_disease", "backward", "KG:Dizziness"),
        ("http://example.org/rel/treats", "backward", "KG:Lorazepam"),
    ]
    assert steps[0].text == "Panic disorder has symptom Dizziness"
    assert steps[4].text == "Panic disorder is a possible disease for Dizziness"
    assert steps[5].text == "Panic disorder is the treats target of Lorazepam"  # no inverse vocabulary


def test_anchor_k_direction_relations_and_determinism(kg: KnowledgeGraph) -> None:
    one = kg.anchor("KG:Dizziness", k=1, rank="degree")
    assert [(s.relation.id, s.direction, s.end.id) for s in one] == [
        ("MKG:has_symptom", "backward", "KG:Panic_disorder"),  # degree 6 beats Hypertension 3, Migraine 2
        ("MKG:possible_disease", "forward", "KG:Panic_disorder"),
    ]
    assert [s.text for s in one] == ["Dizziness is a symptom of Panic disorder",
                                     "Dizziness may indicate the disease Panic disorder"]
    full = kg.anchor("KG:Dizziness", k=10)
    assert len(full) == 4 and full == kg.anchor("KG:Dizziness", k=10)
    assert [s.end.id for s in kg.anchor("KG:Dizziness", direction="out")] == ["KG:Panic_disorder"]
    assert {s.direction for s in kg.anchor("KG:Dizziness", direction="in")} == {"backward"}
    only = kg.anchor("KG:Panic_disorder", relations=["MKG:has_symptom"], k=2)
    # most specific first: Palpitations (one fact) and Chest pain (two) before the hub Dizziness (four)
    assert [s.end.id for s in only] == ["KG:Palpitations", "KG:Chest_pain"]
    by_degree = kg.anchor("KG:Panic_disorder", relations=["MKG:has_symptom"], k=2, rank="degree")
    assert [s.end.id for s in by_degree] == ["KG:Dizziness", "KG:Chest_pain"]
    with pytest.raises(InputError, match="rank must be"):
        kg.anchor("KG:Dizziness", rank="popularity")
    assert kg.anchor("KG:Panic_disorder", relations=["has symptom"]) == kg.anchor(
        "KG:Panic_disorder", relations=["MKG:has_symptom"])
    assert kg.anchor("KG:Palpitations", relations=["http://example.org/rel/treats"]) == []
    with pytest.raises(InputError):
        kg.anchor("KG:Dizziness", direction="sideways")
    with pytest.raises(InputError):
        kg.anchor("KG:Dizziness", relations=["no such relation"])


@pytest.mark.filterwarnings("ignore:ranking by similarity without embeddings")
def test_anchor_rank_by_text_without_embeddings_uses_fuzzy_similarity(kg: KnowledgeGraph) -> None:
    steps = kg.anchor("KG:Panic_disorder", relations=["MKG:has_symptom"], rank_by="pain in the chest")
    assert [s.end.id for s in steps] == ["KG:Chest_pain", "KG:Dizziness", "KG:Palpitations"]


# --- verbalisation --------------------------------------------------------------------------------------------------

def test_verbalisation_both_directions_and_without_templates(kg: KnowledgeGraph) -> None:
    rel = kg.relation("MKG:has_symptom")
    panic, dizzy = kg.entity("KG:Panic_disorder"), kg.entity("KG:Dizziness")
    forward, backward = Step(panic, rel, dizzy, "forward"), Step(panic, rel, dizzy, "backward")
    assert kg.verbalise(forward) == "Panic disorder has symptom Dizziness"
    assert kg.verbalise(backward) == "Dizziness is a symptom of Panic disorder"
    treats = kg.relation("http://example.org/rel/treats")
    assert treats.label == "treats" and treats.forward_template is None
    lor = kg.entity("KG:Lorazepam")
    assert Step(lor, treats, panic).text == "Lorazepam treats Panic disorder"
    assert Step(lor, treats, panic, "backward").text.startswith("Panic disorder")
    part = kg.relation("http://example.org/rel/hasPart")
    assert Step(panic, part, dizzy, "backward").text == "Dizziness is part of Panic disorder"
    unlabelled = kg.relation("http://example.org/rel/relatedTo")
    assert unlabelled.label == "related to"
    # a template that would steer str.format is ignored, the label is used instead
    odd = kg.relation("http://example.org/rel/odd")
    assert odd.forward_template is None and Step(panic, odd, dizzy).text == "Panic disorder odd Dizziness"
    path = KgPath((forward, Step(kg.entity("KG:Hypertension"), rel, dizzy, "backward")))
    assert kg.verbalise(path) == "Panic disorder has symptom Dizziness; Dizziness is a symptom of Hypertension"


# --- bridge ---------------------------------------------------------------------------------------------------------

def test_bridge_paths_both_ways_shortest_first(kg: KnowledgeGraph) -> None:
    # Headache is three steps from Panic disorder (through a disease), so nothing within two
    assert kg.bridge("KG:Panic_disorder", "KG:Headache", max_hops=2) == []
    three = kg.bridge("KG:Panic_disorder", "KG:Headache", max_hops=3, rank="degree")
    assert [[n.id for n in p.nodes] for p in three] == [
        ["KG:Panic_disorder", "KG:Chest_pain", "KG:Hypertension", "KG:Headache"],
        ["KG:Panic_disorder", "KG:Dizziness", "KG:Hypertension", "KG:Headache"],
        ["KG:Panic_disorder", "KG:Dizziness", "KG:Hypertension", "KG:Headache"],
        ["KG:Panic_disorder", "KG:Dizziness", "KG:Migraine", "KG:Headache"],
        ["KG:Panic_disorder", "KG:Dizziness", "KG:Migraine", "KG:Headache"],
    ]
    first = three[0]
    assert [s.direction for s in first.steps] == ["forward", "backward", "forward"]
    assert first.text == ("Panic disorder has symptom Chest pain; Chest pain is a symptom of Hypertension; "
                          "Hypertension has symptom Headache")
    # the two Dizziness edges (has_symptom forward, possible_disease backward) make two distinct paths
    assert [s.to_json() for s in three[1].steps][0] == {
        "subject": "KG:Panic_disorder", "relation": "MKG:has_symptom", "object": "KG:Dizziness",
        "direction": "forward"}
    assert [s.to_json() for s in three[2].steps][0] == {
        "subject": "KG:Dizziness", "relation": "MKG:possible_disease", "object": "KG:Panic_disorder",
        "direction": "backward"}
    assert kg.bridge("KG:Panic_disorder", "KG:Headache", max_paths=2, rank="degree") == three[:2]
    one = kg.bridge("KG:Panic_disorder", "KG:Dizziness", max_hops=1)
    assert [(p.steps[0].relation.id, p.steps[0].direction) for p in one] == [
        ("MKG:has_symptom", "forward"), ("MKG:possible_disease", "backward")]
    only = kg.bridge("KG:Panic_disorder", "KG:Headache", relations=["MKG:has_symptom"])
    assert len(only) == 3 and all(s.relation.id == "MKG:has_symptom" for p in only for s in p.steps)
    assert all(kg.path_exists(p) for p in three)


def test_bridge_edge_cases(kg: KnowledgeGraph) -> None:
    assert kg.bridge("KG:Panic_disorder", "KG:Panic_disorder") == []
    assert kg.bridge("KG:Panic_disorder", "KG:Lonely") == []  # another component: the ASK says no
    assert not kg.connected(E + "Panic_disorder", E + "Lonely", 3)
    assert kg.connected(E + "Panic_disorder", E + "Headache", 3)
    with pytest.raises(InputError):
        kg.bridge("KG:Panic_disorder", "KG:Headache", max_hops=0)


def test_path_exists(kg: KnowledgeGraph) -> None:
    rel = kg.relation("MKG:has_symptom")
    real = KgPath((Step(kg.entity("KG:Migraine"), rel, kg.entity("KG:Headache")),))
    fake = KgPath((Step(kg.entity("KG:Migraine"), rel, kg.entity("KG:Palpitations")),))
    assert kg.path_exists(real) and not kg.path_exists(fake)
    assert not kg.path_exists(KgPath(()))


# --- exactness against a plain enumeration --------------------------------------------------------------------------

def fact_multigraph(store: Store) -> Any:
    """Every fact edge as an undirected multigraph edge keyed by its triple (the reference enumeration)."""
    import networkx as nx

    kg = KnowledgeGraph(store, embedding_model="none")
    non = kg.non_concepts()
    graph = nx.MultiGraph()
    for s, p, o in store.triples():
        if s.kind == o.kind == "uri" and p.value not in NON_FACT_PREDICATES and s.value not in non \
                and o.value not in non and s.value != o.value:
            graph.add_edge(s.value, o.value, key=(s.value, p.value, o.value))
    return graph


def reference_paths(graph: Any, a: str, b: str, hops: int) -> list[tuple[tuple[str, str, str, str], ...]]:
    import networkx as nx

    out = []
    for edges in nx.all_simple_edge_paths(graph, a, b, cutoff=hops):
        node, steps = a, []
        for u, v, (s, p, o) in edges:
            steps.append((s, p, o, "forward" if s == node else "backward"))
            node = o if s == node else s
        out.append(tuple(steps))
    return sorted(once_each_way(out), key=path_sort_key)


def as_raw(paths: list[KgPath]) -> list[tuple[tuple[str, str, str, str], ...]]:
    return [tuple((s.subject.iri, s.relation.iri, s.object.iri, s.direction) for s in p.steps) for p in paths]


@pytest.fixture(scope="module")
def emckg_store(emckg_path: Path) -> OxigraphStore:
    store = OxigraphStore()
    ensure_schema(store)
    get_loader("triples").load(store, emckg_path, LoadOptions(), LoadReport())
    return store


@pytest.mark.slow
def test_bridge_equals_networkx_on_emckg(emckg_store: OxigraphStore) -> None:
    graph = fact_multigraph(emckg_store)
    kg = KnowledgeGraph(emckg_store, embedding_model="none")
    rng = random.Random(4)
    nodes = sorted(graph.nodes)
    checked = 0
    for i in range(60):
        a, b = rng.sample(nodes, 2)
        if i % 2:  # every other pair is a random walk apart, so that most pairs do connect
            b = a
            for _ in range(rng.choice((2, 3))):
                b = rng.choice(sorted(graph.neighbors(b)))
            if a == b:
                continue
        for hops in (1, 2, 3):
            expected = reference_paths(graph, a, b, hops)
            got = as_raw(kg.bridge(a, b, max_hops=hops, max_paths=10**6, rank="degree"))
            assert got == expected, (a, b, hops)
            checked += len(got)
        cut = kg.bridge(a, b, max_hops=3, max_paths=7, rank="degree")
        assert as_raw(cut) == reference_paths(graph, a, b, 3)[:7]
    assert checked > 2000  # the pairs were not all disconnected


def test_a_hub_is_read_up_to_a_cap_per_relation_and_bridge_from_it_stays_exact(
        emckg_store: OxigraphStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``HUB_DEGREE`` edges, anchor and the retriever read a node's edges relation by relation up to a cap
    (every relation still there), and bridge searches from the other end: the same paths as the enumeration."""
    import mirage_kg.graph.limits as limits
    from mirage_kg.retrieval.retriever import Retriever

    kg = KnowledgeGraph(emckg_store, embedding_model="none")
    kg.degrees([])  # the whole degree index
    degree = kg._state().degrees or {}
    hubs = sorted(degree, key=lambda n: (-degree[n], n))[:3]
    assert degree[hubs[2]] > 40  # three hubs once HUB_DEGREE is 40
    monkeypatch.setattr(limits, "HUB_DEGREE", 40)
    monkeypatch.setattr(limits, "HUB_EDGES_PER_RELATION", 5)
    hub = hubs[0]
    every = kg.neighbours(hub)
    capped = kg.neighbours(hub, per_relation=5)
    assert set(capped) < set(every)
    groups = {(p, d) for p, d, _ in every}
    assert {(p, d) for p, d, _ in capped} == groups  # no relation is lost
    assert all(sum(1 for p, d, _ in capped if (p, d) == g) == min(5, sum(1 for e in every if e[:2] == g))
               for g in groups)
    steps = kg.anchor(hub, k=3)
    assert steps and all(sum(1 for t in steps if (t.relation.iri, t.direction) == (s.relation.iri, s.direction)) <= 3
                         for s in steps)
    assert {(s.relation.iri, s.direction, (s.object if s.direction == "forward" else s.subject).iri)
            for s in steps} <= set(every)
    graph = fact_multigraph(emckg_store)
    rng = random.Random(7)
    others = rng.sample(sorted(n for n in graph.nodes if degree.get(n, 0) <= 40), 8)
    for a in hubs:
        for b in others:
            for hops in (2, 3):
                expected = reference_paths(graph, a, b, hops)
                assert as_raw(kg.bridge(a, b, max_hops=hops, max_paths=10**6, rank="degree")) == expected
                assert as_raw(kg.bridge(b, a, max_hops=hops, max_paths=10**6, rank="degree")) == \
                    reference_paths(graph, b, a, hops)
    found = Retriever(kg).retrieve(f"How is {kg.entity(hub).label} related to {kg.entity(others[0]).label}?")
    assert found.evidence and all(kg.path_exists(ev.path) for ev in found.evidence)


def test_bridge_and_anchor_equal_on_both_stores(store: Store, emckg_path: Path, tmp_path: Path) -> None:
    """The SPARQL patterns and the embedded search give the same answers (a slice of EMCKG, kept small)."""
    lines = emckg_path.read_text(encoding="utf-8").splitlines()[:700]
    part = tmp_path / "part.tsv"
    part.write_text("\n".join(lines) + "\n", encoding="utf-8")
    get_loader("triples").load(store, part, LoadOptions(), LoadReport())
    reference = OxigraphStore()
    ensure_schema(reference)
    get_loader("triples").load(reference, part, LoadOptions(), LoadReport())
    graph = fact_multigraph(reference)
    kg, ref = KnowledgeGraph(store, embedding_model="none"), KnowledgeGraph(reference, embedding_model="none")
    rng = random.Random(7)
    nodes = sorted(graph.nodes)
    for _ in range(6):
        a, b = rng.sample(nodes, 2)
        expected = reference_paths(graph, a, b, 3)
        assert as_raw(kg.bridge(a, b, max_paths=10**6, rank="degree")) == expected
        assert as_raw(ref.bridge(a, b, max_paths=10**6, rank="degree")) == expected
        assert kg.bridge(a, b, max_paths=10**6) == ref.bridge(a, b, max_paths=10**6)
        assert kg.anchor(a, k=3) == ref.anchor(a, k=3)


# --- hostile ids and labels -----------------------------------------------------------------------------------------

HOSTILE = st.lists(st.sampled_from(list("ab \"'>\\}{\n<;#?") + ["DROP", "ALL", " } ", "\\n", "\\u0022"]),
                   min_size=1, max_size=12).map("".join).filter(lambda t: t.strip() != "")


def quad_count(store: Store) -> int:
    return store.triple_count()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(label=HOSTILE)
def test_hostile_labels_cannot_change_a_query(label: str, tmp_path: Path) -> None:
    store = OxigraphStore()
    ensure_schema(store)
    iri = mint(ENTITY, "X" + label)  # percent-encodes what an IRI cannot hold
    other = E + "Neighbour"
    lines = [f"{iri_ref(iri)} <http://www.w3.org/2004/02/skos/core#prefLabel> {literal(label)} .\n",
             f"{iri_ref(other)} <http://www.w3.org/2004/02/skos/core#prefLabel> {literal('Neighbour')} .\n",
             f"{iri_ref(iri)} {iri_ref(MKG + 'has_symptom')} {iri_ref(other)} .\n"]
    store.load(iter(lines), media_type="application/n-triples", graph="https://w3id.org/mirage-kg/graph/h", source="h")
    before = quad_count(store)
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path / "c")
    found = kg.entity(compress(iri))
    assert found == Entity(iri, label)
    looks_like_id = is_identifier(label)  # "<ab>" is a fine label but reads as an IRI: ids win
    if label.strip() == label and not looks_like_id:
        assert kg.entity(label) == found
    steps = kg.anchor(found)
    assert [(s.end.iri, s.direction) for s in steps] == [(other, "forward")]
    assert kg.anchor(other)[0].end == found
    assert [p.nodes for p in kg.bridge(found, other, max_hops=1)] == [(found, Entity(other, "Neighbour"))]
    if not looks_like_id:
        candidates = kg.linker.link_one(label)
        assert candidates and candidates[0].entity == found and candidates[0].score >= 0.94
    for attempt in (label, f"KG:{label}", f"<{label}>", f"{label}> ?p ?o }} ; DROP ALL ; #"):
        try:
            kg.entity(attempt)
        except MirageError:
            pass
    assert quad_count(store) == before


def test_hostile_labels_on_both_stores(store: Store, tmp_path: Path) -> None:
    labels = ['x" } ; DROP ALL ; #', "a'b>c\\d}e\nf", '"""', "}}{{<>"]
    lines = []
    for label in labels:
        iri = mint(ENTITY, "H" + label)
        lines += [f"{iri_ref(iri)} <http://www.w3.org/2004/02/skos/core#prefLabel> {literal(label)} .\n",
                  f"{iri_ref(iri)} {iri_ref(MKG + 'has_symptom')} {iri_ref(E + 'Fever')} .\n"]
    store.load(iter(lines), media_type="application/n-triples", graph="https://w3id.org/mirage-kg/graph/h", source="h")
    before = store.triple_count()
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path / "c")
    for label in labels:
        iri = mint(ENTITY, "H" + label)
        assert kg.entity(label) == Entity(iri, label)
        assert [s.end.iri for s in kg.anchor(iri)] == [E + "Fever"]
        assert kg.linker.link_one(label)[0].entity.iri == iri
        with pytest.raises(MirageError):
            kg.entity(f"KG:{label.strip()}>")
    assert len(kg.anchor(E + "Fever")) == len(labels)
    assert store.triple_count() == before


def test_no_fact_is_ever_a_label_or_type(kg: KnowledgeGraph) -> None:
    everything = [s for e in ("KG:Panic_disorder", "KG:Hypertension", "KG:Headache") for s in kg.anchor(e, k=50)]
    assert everything and all(s.relation.iri not in NON_FACT_PREDICATES for s in everything)
    assert all(not s.end.iri.startswith(MKG) for s in everything)


def test_relation_fallbacks() -> None:
    from mirage_kg.graph.labels import readable_name

    assert readable_name("http://example.org/rel/hasPart") == "has part"
    assert readable_name(MKG + "need_medical_test") == "need medical test"
    assert readable_name("http://purl.obolibrary.org/obo/RO_0002200") == "RO:0002200"
    assert Relation("urn:x", "treats").verbalise("A", "B") == "A treats B"


def reference_degrees(store: Store, non: frozenset[str]) -> dict[str, int]:
    """Each node's distinct fact triples (over all graphs), counted at both ends: what the degree index holds."""
    out: dict[str, int] = {}
    for s, p, o in store.triples():
        if o.kind == "uri" and p.value not in NON_FACT_PREDICATES:
            for end in (s.value, o.value):
                out[end] = out.get(end, 0) + 1
    return out


@pytest.mark.parametrize("on_disk", [True, False])
def test_the_degree_index_counts_each_triple_once_on_disk_or_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_disk: bool) -> None:
    """The degree index (one native count per predicate's main graph, no DISTINCT over every triple) equals a
    count of distinct fact triples, where a predicate lives in two graphs and a triple is in both; on disk it is
    a file beside the store that the next process opens without a rebuild, and a load makes a new one."""
    import mirage_kg.index.degree as degree_module
    import mirage_kg.graph.limits as limits

    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0 if on_disk else 10**9)
    store = OxigraphStore(tmp_path / "store")
    ensure_schema(store)
    load_text(store, SMALL, TEST_GRAPH)
    load_text(store, "@prefix KG: <https://w3id.org/mirage-kg/entity/> . @prefix ex: <http://example.org/> .\n"
                     "KG:Lorazepam ex:treats KG:Panic_disorder .\nKG:Lorazepam ex:treats KG:Lonely .\n"
                     "KG:Lonely ex:treats KG:Lonely .\n", "https://w3id.org/mirage-kg/graph/second")
    kg = KnowledgeGraph(store, embedding_model="none")
    expected = reference_degrees(store, kg.non_concepts())
    assert len(list(store.quads(f"{E}Lorazepam", None, f"{E}Panic_disorder"))) == 2  # one triple in two graphs
    assert kg.degrees(expected) == expected
    assert kg.degrees([f"{E}Nothing"]) == {f"{E}Nothing": 0}
    assert len(kg._state().degrees or {}) == len(expected)
    index_file = tmp_path / "store" / ".mirage-cache" / "degrees.sqlite"
    assert index_file.is_file() == on_disk
    if not on_disk:
        return
    assert dict(kg._state().degrees or {}) == expected  # iterating the file gives every node

    def no_rebuild(*args: object) -> Any:
        raise AssertionError("the index was rebuilt")

    with monkeypatch.context() as patch:
        patch.setattr(degree_module, "degree_rows", no_rebuild)
        patch.setattr(degree_module, "build_on_disk", no_rebuild)
        again = KnowledgeGraph(store, embedding_model="none")
        assert again.degrees(expected) == expected
    load_text(store, "@prefix KG: <https://w3id.org/mirage-kg/entity/> . @prefix ex: <http://example.org/> .\n"
                     "KG:Lorazepam ex:treats KG:Headache .\n", "https://w3id.org/mirage-kg/graph/third")
    lorazepam = f"{E}Lorazepam"
    assert kg.degrees([lorazepam]) == {lorazepam: expected[lorazepam] + 1}  # the load is noticed, the index rebuilt


def test_one_pass_over_the_store_builds_the_degree_index_and_the_adjacency_file_as_the_store_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The index step (``build_indexes``, what ``load`` and ``mirage-kg index`` end with) builds the degree index
    and the adjacency file from one streamed pass (``fact_scan``: one TSV read per fact predicate and per label
    predicate, none for the second file): every degree is a count of distinct fact triples (a blank-node subject,
    a triple in two graphs, a self-loop), every label the one the store's literals rank first (quotes, tabs,
    newlines, backslashes, language tags, a number), every filed hub's edges and every node's adjacency what
    ``_stored_neighbours`` reads; and the pass reads the same in tiny blocks and through the Store contract's
    own TSV writer."""
    import mirage_kg.index.degree as degree_module
    import mirage_kg.index.fact_scan as scan_module
    import mirage_kg.graph.limits as limits
    import mirage_kg.store.base as base_module
    from mirage_kg.graph.labels import LABEL_PREDICATES, label_rank
    from mirage_kg.index.build import build_indexes

    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0)
    monkeypatch.setattr(degree_module, "FILED_DEGREE", 15)
    folder = tmp_path / "kg"
    store = OxigraphStore(folder)
    ensure_schema(store)
    load_text(store, heavy_tailed_turtle(300, seed=2), TEST_GRAPH)
    load_text(store, "@prefix KG: <https://w3id.org/mirage-kg/entity/> . @prefix ex: <http://example.org/rel/> .\n"
                     "@prefix skos: <http://www.w3.org/2004/02/skos/core#> . "
                     "@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .\n"
                     "KG:N3 ex:a KG:N9 . [] ex:a KG:N9 . [] ex:b KG:Only_blank . KG:N6 ex:c KG:N6 . KG:N3 ex:a \"a literal\" .\n"
                     'KG:N7 skos:prefLabel "a \\"quoted\\"\\tlabel\\nwith \\\\ a backslash"@en-GB , "Zed"@fr .\n'
                     'KG:N8 rdfs:label 42 . KG:N9 rdfs:label "nine" ; skos:prefLabel "Neun"@de .\n'
                     'KG:Only_blank skos:prefLabel "only a blank node\'s object" .\n',
              "https://w3id.org/mirage-kg/graph/second")
    reads: list[str] = []
    native = OxigraphStore.tsv_blocks

    def spy(self: OxigraphStore, query: str, variables: Any, consume: Any) -> None:
        reads.append(query)
        native(self, query, variables, consume)

    monkeypatch.setattr(OxigraphStore, "tsv_blocks", spy)
    steps = build_indexes(store, embeddings=False)
    assert steps[0].name == "degrees" and steps[0].status == "built"
    kg = KnowledgeGraph(store, embedding_model="none")
    table = kg._degree_table()
    assert isinstance(table, degree_module.DiskDegrees) and (folder / ".mirage-cache" / "adjacency.sqlite").is_file()
    assert len(reads) == len(table.predicates) + len(LABEL_PREDICATES)  # one pass, for both files
    non = kg.non_concepts()
    expected = reference_degrees(store, non)
    assert dict(table) == expected and expected[f"{E}Only_blank"] == 1 and expected[f"{E}N6"] >= 2
    best: dict[str, tuple[Any, str]] = {}
    for place, predicate in enumerate(LABEL_PREDICATES):
        for quad in store.quads(None, predicate, None):
            if quad.subject.kind == "uri" and quad.object.kind == "literal":
                candidate = ((place, *label_rank(quad.object.lang)), quad.object.value)
                best[quad.subject.value] = min(best.get(quad.subject.value, candidate), candidate)
    labels = table.labels(list(expected))
    assert labels == {n: best[n][1] if n in best else None for n in expected}
    assert labels[f"{E}N7"] == 'a "quoted"\tlabel\nwith \\ a backslash' and labels[f"{E}N8"] == "42"
    assert labels[f"{E}N9"] == "Neun" and labels[f"{E}Only_blank"] == "only a blank node's object"
    hubs = [n for n in expected if table.is_filed(n)]
    assert len(hubs) >= 3
    for hub in hubs:
        assert sorted(table.filed_links(hub)) == sorted(tuple(e) for e in kg._stored_neighbours(hub, None)), hub
    adjacency = kg._adjacency_file()
    assert adjacency is not None
    on_file = adjacency.edges(list(expected))
    for node in expected:
        assert sorted(Neighbour(*e) for e in on_file.get(node, []) if e[2] not in non) == \
            kg._stored_neighbours(node, None), node

    def scanned() -> tuple[Any, ...]:
        scan = scan_module.scan_facts(store, table.predicates, LABEL_PREDICATES, label_rank)
        return (scan.names, scan.subjects.tolist(), scan.objects.tolist(), scan.counts, scan.extra_degrees,
                scan.extra_by_id, scan.labels)

    whole = scanned()
    monkeypatch.setattr(base_module, "TSV_BLOCK", 64)  # blocks of a line or two: every cut between rows
    assert scanned() == whole
    monkeypatch.setattr(OxigraphStore, "tsv_blocks", Store.tsv_blocks)  # the contract's default, row by row
    assert scanned() == whole


def test_bridge_through_hubs_is_exact_or_says_where_the_cap_cut_it(
        emckg_store: OxigraphStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``PATH_HUB_DEGREE`` edges a node is extended past along at most ``PATH_HUB_EDGES`` of its edges per
    relation and direction, so no bridge reads a hub's whole neighbourhood; a path that only enters or leaves a
    hub is found by lookups from the other side. Expected: every path of the enumeration, unless the answer names
    the hubs where the cap cut the search (then a subset of real paths), and all of them with ``hub_edges=0``.
    The search used to drop the paths entering or leaving a hub off its capped edges, and say nothing."""
    import mirage_kg.graph.limits as limits

    monkeypatch.setattr(limits, "PATH_HUB_DEGREE", 40)
    monkeypatch.setattr(limits, "PATH_HUB_EDGES", 3)
    kg = KnowledgeGraph(emckg_store, embedding_model="none")
    kg.degrees([])
    degree = kg._state().degrees or {}
    hubs = {n for n in degree if degree[n] > 40}
    capped = {h: set(kg._hub_neighbours(h, None, 3)) for h in hubs}

    def allowed(path: tuple[tuple[str, str, str, str], ...]) -> bool:
        nodes = [path[0][0] if path[0][3] == "forward" else path[0][2]]
        nodes += [o if d == "forward" else s for s, _, o, d in path]
        for i, n in enumerate(nodes[1:-1], start=1):
            if n in capped:
                for s, p, o, _ in (path[i - 1], path[i]):
                    if (p, "forward", o) if s == n else (p, "backward", s) not in capped[n]:
                        return False
        return True

    graph = fact_multigraph(emckg_store)
    rng = random.Random(11)
    small = sorted(n for n in graph.nodes if n not in hubs)
    pairs = [(rng.choice(small), rng.choice(small)) for _ in range(12)]
    pairs += [(hub, rng.choice(small)) for hub in sorted(hubs, key=lambda h: (-degree[h], h))[:3]]
    through_hubs = 0
    for a, b in pairs:
        if a == b:
            continue
        for x, y in ((a, b), (b, a)):
            every = reference_paths(graph, x, y, 3)
            through_hubs += len([path for path in every if allowed(path)]) < len(every)
            found = kg.bridge(x, y, max_hops=3, max_paths=10**6, rank="degree")
            if found.capped:
                assert set(as_raw(found)) <= set(every) and {h for h, _ in found.capped} <= hubs
            else:
                assert as_raw(found) == every, (x, y)
            assert as_raw(kg.bridge(x, y, max_hops=3, max_paths=10**6, rank="degree", hub_edges=0)) == every
            for hops in (1, 2):  # never cut at two edges
                short = kg.bridge(x, y, max_hops=hops, max_paths=10**6, rank="degree")
                assert as_raw(short) == reference_paths(graph, x, y, hops) and not short.capped
    assert through_hubs  # some paths enter or leave a hub off its capped edges


def heavy_tailed_turtle(nodes: int, seed: int) -> str:
    """A graph whose low-numbered nodes are hubs (log-uniform edge targets, as bench_scale's release), with a
    self-loop, a fact stored both ways and three relations: enough shapes for every path the search can take."""
    rng = random.Random(seed)
    lines = ["@prefix KG: <https://w3id.org/mirage-kg/entity/> . @prefix ex: <http://example.org/rel/> ."]
    for n in range(1, nodes + 1):
        for _ in range(rng.choice((1, 2, 3))):
            other = rng.randint(1, nodes) if rng.random() < 0.5 else int(nodes ** rng.random())
            if other >= 1:
                lines.append(f"KG:N{n} ex:{rng.choice(('a', 'b', 'c'))} KG:N{other} .")
    lines += ["KG:N1 ex:a KG:N1 .", "KG:N2 ex:b KG:N7 .", "KG:N7 ex:b KG:N2 .", "KG:N4 ex:c KG:N1 .",
              "KG:N4 ex:a KG:N4 .", "KG:N5 ex:c KG:N4 ."]
    return "\n".join(lines) + "\n"


def test_bridge_never_expands_a_hub_end_whole_for_the_side_next_to_a_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Which side a search extends counts a hub inside a path (past ``PATH_HUB_DEGREE``) by its capped edges, the
    ones walked, and a hub at an end by all of its edges, even after an earlier search capped it. Counting the
    inner hub whole, or the end hub capped, extended the hub end instead: every one of its edges became a partial
    path (at S = 1.0, 50k-211k of them: 1-3.7 s a bridge). Answers equal either way."""
    import mirage_kg.graph.limits as limits

    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0)
    monkeypatch.setattr(limits, "PATH_HUB_DEGREE", 40)
    monkeypatch.setattr(limits, "PATH_HUB_EDGES", 3)
    lines = ["@prefix KG: <https://w3id.org/mirage-kg/entity/> . @prefix ex: <http://example.org/rel/> ."]
    lines += [f"KG:H ex:a KG:L{i} ." for i in range(100)]  # the hub end: 100 edges
    lines += [f"KG:M ex:b KG:R{i} ." for i in range(120)]  # the hub next to the typical end: more
    lines += ["KG:T ex:a KG:M .", "KG:T ex:a KG:U .", "KG:U ex:c KG:L3 .", "KG:M ex:c KG:L7 .", "KG:X ex:a KG:H .",
              "KG:H ex:b KG:Y ."]
    store = OxigraphStore()
    ensure_schema(store)
    load_text(store, "\n".join(lines) + "\n", TEST_GRAPH)
    kg = KnowledgeGraph(store, embedding_model="none")
    hub, typical = f"{ENTITY}H", f"{ENTITY}T"
    read_whole = []
    original = KnowledgeGraph._stored_neighbours

    def spy(self: KnowledgeGraph, iri: str, relations: Any) -> Any:
        read_whole.append(iri)
        return original(self, iri, relations)

    monkeypatch.setattr(KnowledgeGraph, "_stored_neighbours", spy)
    first = kg.bridge(hub, typical, max_hops=3, max_paths=10**6)
    assert hub not in read_whole  # T's side was extended: M counted by its capped edges
    assert {frozenset(n.id for s in p.steps for n in (s.subject, s.object)) for p in first} == \
        {frozenset({"KG:H", "KG:L3", "KG:U", "KG:T"}), frozenset({"KG:H", "KG:L7", "KG:M", "KG:T"})}
    assert len(kg.bridge(f"{ENTITY}X", f"{ENTITY}Y", max_hops=2)) == 1  # through H, by lookups from X and Y
    kg._path_hub_edges(hub, None)  # as a search that went past H would leave them, kept per graph
    assert (hub, None) in kg._state().path_hub_edges
    read_whole.clear()
    again = kg.bridge(hub, typical, max_hops=3, max_paths=10**6)
    assert hub not in read_whole and again == first  # H at an end still counts its 100 edges, not the 3 capped


def test_bridge_and_anchor_read_well_connected_nodes_from_the_degree_index_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes with ``FILED_DEGREE`` edges or more keep their whole adjacency in the degree index's file, the best
    connected first while ``FILED_EDGES`` allows; ``neighbours`` reads it, and bridge asks the file which nodes of
    the other side a filed node links to (no seek per pair, no read of every edge at a hub) and finishes the
    paths between two filed nodes by one join of their edges. Every answer equals
    the one found with nothing on file: bridge at h = 2 and 3 (hubs at an end and inside a path, capped, with a
    relation filter) and anchor."""
    import mirage_kg.index.degree as degree_module
    import mirage_kg.graph.limits as limits
    from mirage_kg.index.degree import DiskDegrees

    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0)
    monkeypatch.setattr(limits, "PATH_HUB_DEGREE", 45)  # the top hubs are walked through along capped edges
    monkeypatch.setattr(limits, "PATH_HUB_EDGES", 4)
    store = OxigraphStore()
    ensure_schema(store)
    load_text(store, heavy_tailed_turtle(800, seed=5), TEST_GRAPH)  # degrees 78, 52, 46, 41, 23, ...
    monkeypatch.setattr(degree_module, "FILED_DEGREE", 10**9)
    plain = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path / "plain")
    degree = dict(plain._degree_table())
    assert not any(plain._degree_table().is_filed(n) for n in degree)

    monkeypatch.setattr(degree_module, "FILED_DEGREE", 14)
    monkeypatch.setattr(degree_module, "FILED_EDGES", 250)
    filed = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path / "filed")
    table = filed._degree_table()
    assert isinstance(table, DiskDegrees)
    budget, expected = 250, []
    for n in sorted((n for n in degree if degree[n] >= 14), key=lambda n: (-degree[n], n)):
        if degree[n] <= budget:
            budget -= len(filed._stored_neighbours(n, None))
            expected.append(n)
    assert sorted(n for n in degree if table.is_filed(n)) == sorted(expected)
    assert 3 <= len(expected) < sum(1 for n in degree if degree[n] >= 14)  # the budget bites, and nodes are filed
    for n in expected:
        assert sorted(Neighbour(*e) for e in table.filed_links(n)) == filed._stored_neighbours(n, None)

    asked = []
    original = DiskDegrees.filed_links_to

    def spy(self: DiskDegrees, iri: str, others: Any) -> list[tuple[str, str, str]]:
        asked.append(iri)
        return original(self, iri, others)

    monkeypatch.setattr(DiskDegrees, "filed_links_to", spy)
    joins = []
    original_join = DiskDegrees.filed_common_links

    def join_spy(self: DiskDegrees, iri: str, other: str) -> list[tuple[str, str, str, str, str]]:
        joins.append(original_join(self, iri, other))
        return joins[-1]

    monkeypatch.setattr(DiskDegrees, "filed_common_links", join_spy)
    rng = random.Random(8)
    small = sorted(n for n in degree if n not in expected)
    pairs = [(hub, rng.choice(small)) for hub in expected for _ in range(3)] + \
            [(rng.choice(small), rng.choice(small)) for _ in range(20)]
    # next to a filed node that is no hub: the paths from a filed end through it are finished by a join (N4's
    # self-loop and its edge from N5 make N4 itself a common neighbour of N5 and N4, which a simple path skips)
    pairs += [(hub, n) for hub in expected[:4] for middle in expected if degree[middle] <= 45
              for n in [e.node for e in filed._stored_neighbours(middle, None)][:2] +
              [e.node for e in filed._stored_neighbours(middle, None) if degree[e.node] == 1][:2] if n != hub]
    # an end next to both: the join also finds it as the middle node, which a simple path cannot take
    pairs += [(hub, n) for hub in expected[:3] for middle in expected if degree[middle] <= 45
              for n in sorted({e.node for e in filed._stored_neighbours(middle, None)} &
                              {e.node for e in filed._stored_neighbours(hub, None)})[:2] if n != hub]
    found = 0
    for a, b in pairs:
        for hops in (2, 3):
            for x, y in ((a, b), (b, a)):
                got = filed.bridge(x, y, max_hops=hops, max_paths=10**6)
                assert got == plain.bridge(x, y, max_hops=hops, max_paths=10**6)
                found += len(got)
        assert filed.bridge(a, b, relations=[f"http://example.org/rel/{r}" for r in "ab"]) == \
            plain.bridge(a, b, relations=[f"http://example.org/rel/{r}" for r in "ab"])
    assert found and asked  # paths were found, and the file was asked for a hub's links
    assert any(joins)  # and paths were finished by joining two filed nodes' edges
    for n in expected + small[:30]:
        assert filed.anchor(n, k=3) == plain.anchor(n, k=3)
        assert filed.anchor(n, k=3, rank="degree", relations=["http://example.org/rel/c"]) == \
            plain.anchor(n, k=3, rank="degree", relations=["http://example.org/rel/c"])


def labelled_turtle(nodes: int) -> str:
    """Labels of every shape the choice rule tells apart, for ``heavy_tailed_turtle``'s nodes: none; English;
    untagged over another language; ``rdfs:label`` only; English tags (the tag decides, then the text by code
    point); an empty label (the CURIE is shown); ``prefLabel`` over an English ``rdfs:label``; text that a query
    would have to escape; code points past ASCII, whose order must be Python's."""
    rows = ["@prefix KG: <https://w3id.org/mirage-kg/entity/> . "
            "@prefix skos: <http://www.w3.org/2004/02/skos/core#> . "
            "@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> ."]
    shapes = ["",  # by node number mod 9; ``{n}`` is the node's number
              'skos:prefLabel "name {n}"@en',
              'skos:prefLabel "Ärzte {n}"@de, "zeta {n}"',
              'rdfs:label "plain {n}", "another {n}"@fr',
              'skos:prefLabel "b {n}"@en-gb, "c {n}"@en, "D {n}"@en, "a {n}"@en-us',
              'skos:prefLabel ""@en ; rdfs:label "x {n}"',
              'skos:prefLabel "é {n}"@fr, "ｅ {n}"@fr, "e {n}"@fr ; rdfs:label "r {n}"@en',
              'skos:prefLabel "say \\"{n}\\" > \\n {{x}}"@en',
              'skos:prefLabel "\U0001F600 {n}"@en, "\uFFFD {n}"@en']
    rows += [f"KG:N{n} {shapes[n % 9].format(n=n)} ." for n in range(1, nodes + 1) if shapes[n % 9]]
    return "\n".join(rows) + "\n"


def test_labels_come_from_the_degree_index_file_as_the_store_gives_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The degree index's file keeps each node's display label beside its degree (one stream over the label
    literals when it is built), so anchor and bridge read no label from the store: every label, anchor and bridge
    equals the store-read one, for every shape of label; a load that relabels a node, a raw write through the
    store (read live until the state is refreshed) and a raw write behind the store's back (a new content key)
    never show the old label."""
    import warnings

    import pyoxigraph as ox

    import mirage_kg.graph.limits as limits
    from mirage_kg.index.caching import StoreStateWarning
    from mirage_kg.index.degree import DiskDegrees, MemoryDegrees
    from mirage_kg.graph.core import Graph

    facts, labels = heavy_tailed_turtle(400, seed=3), labelled_turtle(400)
    store = OxigraphStore()
    ensure_schema(store)
    load_text(store, facts, TEST_GRAPH)
    load_text(store, labels, TEST_GRAPH)
    load_text(store, labels, "https://w3id.org/mirage-kg/graph/second")  # every label twice, in two graphs
    with monkeypatch.context() as patch:
        patch.setattr(limits, "DEGREE_INDEX_ON_DISK", 10**9)
        plain = KnowledgeGraph(store, embedding_model="none")
        assert isinstance(plain._degree_table(), MemoryDegrees)  # labels read from the store
        nodes = sorted(plain._degree_table())  # the schema's classes too
        expected = plain.labels(nodes + [f"{E}Nothing"])
        concepts = [n for n in nodes if n.startswith(E)]
        pairs = [(a, b) for a, b in zip(concepts[::7], concepts[3::11])]
        expected_anchors = [plain.anchor(n, k=3) for n in concepts[::5]]
        expected_bridges = [plain.bridge(a, b, max_hops=h) for a, b in pairs for h in (2, 3)]
    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0)
    filed = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path / "filed")
    table = filed._degree_table()
    assert isinstance(table, DiskDegrees) and table.labelled and not table.annotated  # no annotation records
    assert {expected[n] for n in nodes} >= {"name 1", "zeta 2", "plain 3", "D 4", "KG:N5", "e 6",
                                            'say "7" > \n {x}', "\uFFFD 8"}
    read_from_store: list[str] = []
    original = OxigraphStore.literals

    def spy(self: OxigraphStore, subject: str, predicate: str) -> Any:
        if subject.startswith(E):  # a concept's label, not a relation's metadata (read once per graph state)
            read_from_store.append(subject)
        return original(self, subject, predicate)

    monkeypatch.setattr(OxigraphStore, "literals", spy)
    assert filed.labels(nodes + [f"{E}Nothing"]) == expected
    assert set(read_from_store) == {f"{E}Nothing"}  # only the node with no facts (not on file) is read from the store
    assert [filed.anchor(n, k=3) for n in concepts[::5]] == expected_anchors
    assert [filed.bridge(a, b, max_hops=h) for a, b in pairs for h in (2, 3)] == expected_bridges
    assert filed.entity("KG:N7").label == 'say "7" > \n {x}'
    assert set(read_from_store) == {f"{E}Nothing"}

    # a load that relabels a node: a new graph state, so the file is rebuilt
    relabel = '<https://w3id.org/mirage-kg/entity/N1> <http://www.w3.org/2004/02/skos/core#prefLabel> "aaa"@en .\n'
    load_text(store, relabel, "https://w3id.org/mirage-kg/graph/third")
    assert filed.labels([f"{E}N1"]) == {f"{E}N1": "aaa"}
    assert {x.label for step in filed.anchor(f"{E}N1", k=3) for x in (step.subject, step.object)
            if x.iri == f"{E}N1"} == {"aaa"}
    assert filed._labels_on_file([f"{E}N1"]) == {f"{E}N1": "aaa"}  # from the rebuilt file
    # a raw write through the store in this process: read live from the store until ``refresh``
    store.update(f'INSERT DATA {{ GRAPH <{TEST_GRAPH}> {{ <{E}N1> <http://www.w3.org/2004/02/skos/core#prefLabel> '
                 f'"Aaa"@en }} }}')
    assert filed._labels_on_file([f"{E}N1"]) == {}
    assert filed.labels([f"{E}N1"]) == {f"{E}N1": "Aaa"}
    filed.refresh()
    filed._degree_table()
    assert filed._labels_on_file([f"{E}N1"]) == {f"{E}N1": "Aaa"}

    # on disk: a reader finds the writer's file without building one; a raw write behind the store's back gives a
    # new content key, so the old file is never read, and the new one has the new label
    n2 = f"{E}N2"
    folder = tmp_path / "kg"
    writer = OxigraphStore(folder)
    load_text(writer, facts, TEST_GRAPH)
    load_text(writer, labels, TEST_GRAPH)
    Graph(writer)._degree_table()
    writer.close()
    reader = OxigraphStore(folder, read_only=True)
    assert Graph(reader)._labels_on_file([n2]) == {n2: "zeta 2"}
    reader.close()
    raw = ox.Store(str(folder))
    raw.add(ox.Quad(ox.NamedNode(n2), ox.NamedNode("http://www.w3.org/2004/02/skos/core#prefLabel"),
                    ox.Literal("new name", language="en"), ox.NamedNode(TEST_GRAPH)))
    del raw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoreStateWarning)
        reader = OxigraphStore(folder, read_only=True)
        fresh = Graph(reader)
        assert fresh._labels_on_file([n2]) == {}  # the writer's file is for the old content
        assert fresh.entity("KG:N2").label == "new name"
        fresh._degree_table()
        assert fresh._labels_on_file([n2]) == {n2: "new name"} and fresh.labels([n2]) == {n2: "new name"}
        reader.close()


def test_a_hubs_anchor_is_read_from_the_degree_index_file_as_ranked_when_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each hub's anchor (over ``HUB_DEGREE`` edges, ``rank_by`` unset; and each node's of ``FILED_DEGREE`` edges) is
    ranked once per ranking when the degree index's file is built, and filed: anchor then reads a hub's top ``k``
    per relation in one lookup. For every such node, ``k`` (under, at and past the filed depth and the cap), relation filter, direction and ranking the answer
    equals the one ranked as before; a raw write is read live until ``refresh``, which files the new state's."""
    import mirage_kg.index.degree as degree_module
    import mirage_kg.graph.limits as limits
    from mirage_kg.index.degree import DiskDegrees
    from mirage_kg.graph.core import Graph

    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0)
    monkeypatch.setattr(limits, "HUB_DEGREE", 20)
    monkeypatch.setattr(limits, "HUB_EDGES_PER_RELATION", 8)  # the cap bites at the top hubs
    monkeypatch.setattr(degree_module, "HUB_ANCHOR_DEPTH", 6)  # and so does the filed depth
    monkeypatch.setattr(degree_module, "FILED_DEGREE", 14)
    store = OxigraphStore()
    ensure_schema(store)
    load_text(store, heavy_tailed_turtle(800, seed=5), TEST_GRAPH)  # degrees 78, 52, 46, 41, 23, ...
    # merged concepts: neighbours a hub reaches through another member (the step keeps the stored end), and a
    # hub merged with another node (ranked as before: its anchor depends on its members)
    same = "http://www.w3.org/2004/02/skos/core#exactMatch"
    load_text(store, "".join(f"<{E}N{i + 400}> <{same}> <{E}N{i}> .\n" for i in range(100, 400, 3)) +
              f"<{E}N799> <{same}> <{E}N3> .\n", TEST_GRAPH)
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path)
    table = kg._degree_table()
    assert isinstance(table, DiskDegrees) and table.hub_anchor_settings() is not None
    hubs = sorted(n for n in table if table[n] > 20)
    merged = [hub for hub in hubs if len(kg.groups.of(hub)) > 1]
    assert len(hubs) >= 4 and merged
    hubs += sorted(n for n in table if 14 <= table[n] <= 20)[:6]  # nodes of FILED_DEGREE edges, no hubs: filed too
    assert len(hubs) >= 8

    read: list[tuple[str, int]] = []
    original = DiskDegrees.hub_anchor_rows

    def spy(self: DiskDegrees, iri: str, rank: str, k: int) -> Any:
        rows = original(self, iri, rank, k)
        if rows is not None:
            read.append((iri, k))
        return rows

    monkeypatch.setattr(DiskDegrees, "hub_anchor_rows", spy)
    ranked_as_before = Graph._filed_hub_anchor

    def as_before(kg: KnowledgeGraph, hub: str, **options: Any) -> list[Step]:
        with monkeypatch.context() as patch:
            patch.setattr(Graph, "_filed_hub_anchor", lambda *args: None)
            return kg.anchor(hub, **options)

    rel = "http://example.org/rel/"
    checked = through_members = 0
    for hub in hubs:
        for k in (1, 3, 6, 7, 10):
            for relations in (None, [rel + "a"], [rel + "b", rel + "c"]):
                for direction in ("both", "forward", "backward"):
                    for rank in ("specificity", "degree"):
                        options = {"k": k, "relations": relations, "direction": direction, "rank": rank}
                        before = len(read)
                        got = kg.anchor(hub, **options)
                        assert got == as_before(kg, hub, **options), (hub, options)
                        # from the file up to its depth, a hub merged with no other node
                        assert len(read) == before + (k <= 6 and hub not in merged), (hub, options)
                        checked += len(got)
                        through_members += sum(1 for step in got if kg.groups.rep(step.subject.iri) !=
                                               step.subject.iri or kg.groups.rep(step.object.iri) != step.object.iri)
    assert checked > 1000 and through_members
    by_group: dict[tuple[str, str], int] = {}
    for step in kg.anchor(next(hub for hub in hubs if hub not in merged), k=6):
        by_group[(step.relation.iri, step.direction)] = by_group.get((step.relation.iri, step.direction), 0) + 1
    assert max(by_group.values()) == 6  # the filed depth is reached: the cap and ranking are exercised
    assert ranked_as_before is Graph._filed_hub_anchor

    # a raw write in this process: read live (not from the file) until refresh, which files the new state's
    hub = next(hub for hub in hubs if hub not in merged)
    store.update(f"INSERT DATA {{ GRAPH <{TEST_GRAPH}> {{ <{E}N{800}> <{rel}a> <{hub}> . "
                 f"<{hub}> <{rel}b> <{E}Fresh> }} }}")
    before = len(read)
    assert kg.anchor(hub, k=6) == as_before(kg, hub, k=6)
    assert len(read) == before
    kg.refresh()
    fresh = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path)
    for graph in (kg, fresh):
        for rank in ("specificity", "degree"):
            assert graph.anchor(hub, k=6, rank=rank) == as_before(graph, hub, k=6, rank=rank)
    assert len(read) == before + 4  # the new state's file has its own hub anchors
    assert kg._degree_table().hub_anchor_settings() is not None and kg._degree_table() is not table
    # a file ranked under other settings is ranked again (the rows replaced), not answered from
    monkeypatch.setattr(degree_module, "HUB_ANCHOR_DEPTH", 4)
    other = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path)
    before = len(read)
    for k in (4, 5):
        assert other.anchor(hub, k=k) == as_before(other, hub, k=k)
    assert len(read) == before + 1 and other._degree_table().hub_anchor_settings()["depth"] == 4  # type: ignore[index]


def test_hub_anchors_are_ranked_before_the_file_is_locked_for_writing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranking a hub reads the degree index's own file: every anchor is made before the write transaction starts,
    whose lock (once its cache spills, as at S = 1.0) would turn each of those reads into "database is locked"."""
    import sqlite3

    import mirage_kg.index.degree as degree_module
    import mirage_kg.graph.limits as limits
    from mirage_kg.index.degree import DiskDegrees

    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0)
    monkeypatch.setattr(limits, "HUB_DEGREE", 20)
    monkeypatch.setattr(degree_module, "FILED_DEGREE", 14)
    filed: list[bool] = []
    original = DiskDegrees.file_hub_anchors

    def while_ranking(self: DiskDegrees, settings: dict[str, object], anchors: Any) -> bool:
        def probed() -> Any:
            for item in anchors:
                probe = sqlite3.connect(self.path, timeout=0)
                probe.execute("BEGIN IMMEDIATE")  # "database is locked" if the filing's write had begun
                probe.rollback()
                probe.close()
                yield item
        filed.append(original(self, settings, probed()))
        return filed[-1]

    monkeypatch.setattr(DiskDegrees, "file_hub_anchors", while_ranking)
    store = OxigraphStore()
    ensure_schema(store)
    load_text(store, heavy_tailed_turtle(800, seed=5), TEST_GRAPH)
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path)
    hub = max(kg._degree_table(), key=kg._degree_table().__getitem__)
    kg.anchor(hub, k=5)
    assert filed == [True] and kg._degree_table().hub_anchor_settings() is not None


def test_an_anchor_at_a_node_merged_with_none_walks_as_a_merged_one_and_reads_the_file_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where neither a node nor its neighbours are merged with another concept (every node of a store without
    exact matches), ``walk`` takes its edges as stored instead of folding them by group: the same edges (a
    self-loop dropped, a fact stored both ways once, forward) as the group walk gives with every node its own
    group, at any cap, relation filter and k. A typical anchor whose entity was looked up makes one query of the
    degree index's file (its neighbours' degrees and labels): no per-call read of the file's hub settings."""
    import mirage_kg.index.degree as degree_module
    import mirage_kg.graph.limits as limits
    from mirage_kg.graph.concepts import ConceptGroups
    from mirage_kg.index.degree import DiskDegrees

    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0)
    monkeypatch.setattr(limits, "HUB_DEGREE", 20)  # the capped hub reading walks too
    monkeypatch.setattr(degree_module, "FILED_DEGREE", 40)
    store = OxigraphStore()
    ensure_schema(store)
    load_text(store, heavy_tailed_turtle(300, seed=11), TEST_GRAPH)
    # edges to a schema class (a declaration, not a concept): never a neighbour, from the store or the file
    load_text(store, "".join(f"<{E}N{n}> <http://example.org/rel/a> <{MKG}Disease> .\n" for n in range(5, 300, 7)),
              TEST_GRAPH)
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path)
    table = kg._degree_table()
    assert isinstance(table, DiskDegrees) and not kg.groups.representative
    nodes = sorted(n for n in table if n.startswith(E) and kg.is_concept(n))
    rel = "http://example.org/rel/"
    shapes = [(relations, cap) for relations in (None, frozenset({rel + "a"}), frozenset({rel + "b", rel + "c"}))
              for cap in (None, 3, 250)]
    walked = {(n, shape): kg.walk(n, *shape) for n in nodes for shape in shapes}
    with monkeypatch.context() as patch:  # the reference: every node's edges read from the store
        patch.setattr(type(kg), "_adjacency_file", lambda self: None)
        anchored = {(n, k, rank): kg.anchor(n, k=k, rank=rank) for n in nodes for k in (1, 3, 10)
                    for rank in ("specificity", "degree")}
    assert kg._adjacency_file() is not None
    for (n, k, rank), steps in anchored.items():  # from the adjacency file: the same
        assert kg.anchor(n, k=k, rank=rank) == steps, (n, k, rank)
    assert any(e[2] == n for (n, _), edges in walked.items() for e in edges) is False  # no self-loop kept
    assert sum(len(edges) for edges in walked.values()) > 3000
    for n in nodes:  # a group's top k is the first k of its whole ranking
        for rank in ("specificity", "degree"):
            whole: dict[tuple[str, str], list[Step]] = {}
            for step in kg.anchor(n, k=1000, rank=rank):
                whole.setdefault((step.relation.iri, step.direction), []).append(step)
            for k in (1, 3, 10):
                got = anchored[(n, k, rank)]
                assert got == [step for step in kg.anchor(n, k=1000, rank=rank)
                               if step in whole[(step.relation.iri, step.direction)][:k]], (n, k, rank)
    kg._state().groups = ConceptGroups({n: n for n in nodes}, {n: (n,) for n in nodes})  # the group walk
    for (n, shape), edges in walked.items():
        assert kg.walk(n, *shape) == edges, (n, shape)
    for (n, k, rank), steps in anchored.items():
        assert kg.anchor(n, k=k, rank=rank) == steps, (n, k, rank)

    kg._state().groups = None
    statements: list[str] = []
    typical = [n for n in nodes if 2 <= table[n] < 20]
    assert len(typical) > 100 and kg._adjacency_file() is not None
    store_reads: list[str] = []
    original_links = OxigraphStore.links

    def links_spy(self: OxigraphStore, node: str, *args: Any) -> Any:
        store_reads.append(node)
        return original_links(self, node, *args)

    monkeypatch.setattr(OxigraphStore, "links", links_spy)
    for n in typical:
        table._memo.clear()
        kg.entity(n)  # what a caller does first (and the bench, before timing)
        table._db.set_trace_callback(statements.append)
        assert kg.anchor(n, k=10) == anchored[(n, 10, "specificity")]
        table._db.set_trace_callback(None)
        assert len(statements) == 1 and statements[0].startswith("SELECT iri, degree, label FROM degrees"), statements
        statements.clear()
    assert not store_reads  # its own edges from the adjacency file: no store read at all
    # without the adjacency file (or with a raw write since it was opened): the store, the same answers
    monkeypatch.setattr(type(kg), "_adjacency_file", lambda self: None)
    for n in typical[:50]:
        assert kg.anchor(n, k=10) == anchored[(n, 10, "specificity")]
    assert len(store_reads) == 100  # two scans each


def test_bridge_reads_every_nodes_adjacency_from_the_adjacency_file_with_the_same_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside an on-disk degree index the graph builds ``adjacency.sqlite`` (every node's fact edges as integer
    arrays) and bridge reads the nodes it walks from it in batches instead of the store: each node's edges there
    are exactly the store's (a self-loop once, a fact stored both ways, several graphs holding one triple, a
    literal and a schema node left out); every bridge (h = 1..3, both ways, hubs at an end and inside, a relation
    filter) equals the one with no file; a raw write is read live until ``refresh``, which builds the new state's
    file; a store opened read-only builds none."""
    import mirage_kg.index.adjacency as adjacency_module
    import mirage_kg.index.degree as degree_module
    import mirage_kg.graph.limits as limits
    from mirage_kg.graph.core import Graph

    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0)
    monkeypatch.setattr(limits, "PATH_HUB_DEGREE", 45)  # the top hubs are walked through along capped edges
    monkeypatch.setattr(limits, "PATH_HUB_EDGES", 4)
    monkeypatch.setattr(degree_module, "FILED_DEGREE", 40)  # a few nodes keep their edges in the degree file
    monkeypatch.setattr(adjacency_module, "_BUCKET", 64)  # several sorting passes in the build
    folder = tmp_path / "kg"
    store = OxigraphStore(folder)
    ensure_schema(store)
    load_text(store, heavy_tailed_turtle(800, seed=5), TEST_GRAPH)
    extra = (f"<{E}N3> <http://example.org/rel/a> <{E}N9> . <{E}N3> <http://example.org/rel/a> \"text\" .\n"
             f"<{E}N3> <http://example.org/rel/b> <http://example.org/rel/a> .\n")  # a second copy, a literal, schema
    load_text(store, extra, "https://w3id.org/mirage-kg/graph/second")
    kg = KnowledgeGraph(store, embedding_model="none")
    kg._degree_table()
    adjacency = kg._adjacency_file()
    assert adjacency is not None and adjacency.path == folder / ".mirage-cache" / "adjacency.sqlite"
    nodes = sorted(kg._degree_table())
    non = kg.non_concepts()
    on_file = adjacency.edges(nodes)
    assert sorted(on_file) == nodes
    for n in nodes:
        assert sorted(Neighbour(*e) for e in on_file[n] if e[2] not in non) == \
            kg._stored_neighbours(n, None), n

    read: list[str] = []
    original = OxigraphStore.links

    def spy(self: OxigraphStore, node: str, direction: str, predicate: str | None = None) -> Any:
        read.append(node)
        return original(self, node, direction, predicate)

    monkeypatch.setattr(OxigraphStore, "links", spy)
    plain = KnowledgeGraph(store, embedding_model="none")
    monkeypatch.setattr(plain, "_adjacency_file", lambda: None)
    degree = kg.degrees(nodes)
    rng = random.Random(3)
    small = [n for n in nodes if degree[n] <= 45 and n not in non and n.startswith(E)]
    pairs = [(f"{E}N{h}", rng.choice(small)) for h in (1, 2, 3, 4, 5) for _ in range(3)] + \
            [(rng.choice(small), rng.choice(small)) for _ in range(10)] + [(f"{E}N3", f"{E}N9")]
    for start in rng.sample(small, 40):  # connected pairs, as bench_scale draws them: a walk of 2-3 steps
        end = start
        for _ in range(rng.choice((2, 3))):
            end = rng.choice(plain._stored_neighbours(end, None)).node
        if end != start and end not in non:
            pairs.append((start, end))
    found = 0
    for a, b in pairs:
        for x, y in ((a, b), (b, a)):
            read.clear()
            got = kg.bridge(x, y, max_hops=3, max_paths=10**6)
            walked = sorted(set(read))
            assert got == plain.bridge(x, y, max_hops=3, max_paths=10**6)
            found += len(got)
            # the store is read only for hubs' capped edges (and never for a node the file holds whole)
            assert all(degree[n] > 45 for n in walked), walked
        assert kg.bridge(a, b, relations=["http://example.org/rel/a", "http://example.org/rel/b"]) == \
            plain.bridge(a, b, relations=["http://example.org/rel/a", "http://example.org/rel/b"])
    assert found > 80  # 102: the comparison is not vacuous

    # a raw write in this process: read live (the store) until refresh, which builds the new state's file
    n9, n10 = f"{E}N9", f"{E}N10"
    before = kg.bridge(n9, n10, max_hops=1)
    store.update(f"INSERT DATA {{ GRAPH <{TEST_GRAPH}> {{ <{n9}> <http://example.org/rel/c> <{n10}> }} }}")
    assert kg._adjacency_file() is None
    after = kg.bridge(n9, n10, max_hops=1)
    assert len(after) == len(before) + 1
    kg.refresh()
    kg._degree_table()
    rebuilt = kg._adjacency_file()
    assert rebuilt is not None and rebuilt.fingerprint != adjacency.fingerprint
    assert ("http://example.org/rel/c", "forward", n10) in rebuilt.edges([n9])[n9]
    assert kg.bridge(n9, n10, max_hops=1) == after
    store.close()

    # a store opened read-only reads the file a writer left and builds none where it is missing
    (folder / ".mirage-cache" / "adjacency.sqlite").unlink()
    reader = OxigraphStore(folder, read_only=True)
    graph = Graph(reader)
    graph._degree_table()
    assert graph._adjacency_file() is None and not (folder / ".mirage-cache" / "adjacency.sqlite").exists()
    reader.close()


def test_relations_are_described_all_at_once_with_the_same_labels_and_templates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the degree index on file, the first relation asked about brings every fact relation's description (a
    new relation was a few cold store lookups in whichever anchor first met it), each read in one scan of its
    quads: the same labels, inverse labels and templates, in the same order, as one lookup per key (labels in two
    graphs and two languages, a template, a relation with none)."""
    import mirage_kg.graph.limits as limits
    from mirage_kg.graph.core import Graph
    from mirage_kg.graph.facts import BACKWARD_TEMPLATE, FORWARD_TEMPLATE, INVERSE_LABEL
    from mirage_kg.model.namespaces import RDFS_LABEL, SKOS_PREF

    monkeypatch.setattr(limits, "DEGREE_INDEX_ON_DISK", 0)
    store = OxigraphStore()
    ensure_schema(store)
    load_text(store, heavy_tailed_turtle(200, seed=4), TEST_GRAPH)
    load_text(store, '@prefix ex: <http://example.org/rel/> . @prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> . '
                     '@prefix mkg: <https://w3id.org/mirage-kg/schema#> . '
                     'ex:a rdfs:label "zeta a"@en, "alpha a", "a en français"@fr ; mkg:inverseLabel "a of" ; '
                     'mkg:forwardTemplate "{subject} has a {object}" . ex:b rdfs:label "b"@de .', TEST_GRAPH)
    load_text(store, '@prefix ex: <http://example.org/rel/> . @prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> . '
                     'ex:a rdfs:label "beta a"@en . ex:b rdfs:label "b"@en .',
              "https://w3id.org/mirage-kg/graph/other")
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=tmp_path)
    kg._degree_table()
    table = kg._current_degree_file()
    assert table is not None and len(table.predicates) >= 3
    keys = (RDFS_LABEL, SKOS_PREF, INVERSE_LABEL, FORWARD_TEMPLATE, BACKWARD_TEMPLATE)
    relations = [*table.predicates, "http://example.org/rel/none"]
    assert kg._literal_values(relations, keys, few_quads=True) == kg._literal_values(relations, keys)
    assert len(kg._literal_values(["http://example.org/rel/a"], keys)["http://example.org/rel/a"][RDFS_LABEL]) == 4
    kg.relations(["http://example.org/rel/a"])
    assert set(table.predicates) <= set(kg._state().relations)  # all of them, from the first question
    plain = KnowledgeGraph(store, embedding_model="none")  # no degree file: each relation when asked, by lookups
    monkeypatch.setattr(plain, "_literal_values", lambda iris, keys, few_quads=False: Graph._literal_values(
        plain, iris, keys))
    assert kg.relations(table.predicates) == plain.relations(table.predicates)
    assert kg.relation("http://example.org/rel/a").inverse_label == "a of"
