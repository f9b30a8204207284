"""The LLM-free retriever: linked entities, hub expansion, budgets, evidence that is real and sourced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mirage_kg.kg import KnowledgeGraph
from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
from mirage_kg.retrieval.retriever import RetrievalResult, Retriever
from mirage_kg.store import DEMO_GRAPH, OxigraphStore, demo_store, ensure_schema


@pytest.fixture(scope="module")
def demo_kg(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeGraph:
    return KnowledgeGraph(demo_store(), embedding_model="none", cache_dir=tmp_path_factory.mktemp("cache"))


QUESTION = "I keep wheezing, my chest feels tight and I get short of breath at night. What could it be?"


def test_retrieve_links_expands_hubs_and_stays_in_budget(demo_kg: KnowledgeGraph) -> None:
    result = demo_kg.retrieve(QUESTION, budget=40)
    assert isinstance(result, RetrievalResult)
    ids = [e.id for e in result.entities]
    assert "KG:Wheezing" in ids
    found = result.evidence_entities()
    assert "KG:Asthma" in found and len(found) <= 40
    assert any(line.startswith("Asthma") or "Asthma" in line for line in result.to_text().splitlines())
    assert len(result.to_text().splitlines()) == len(result.evidence)
    # every fact is in the store, and names the graph it came from
    assert all(demo_kg.path_exists(ev.path) for ev in result.evidence)
    assert all(ev.sources == (DEMO_GRAPH,) for ev in result.evidence)
    # one fact per connected pair of entities
    pairs = [frozenset((ev.path.steps[0].subject.iri, ev.path.steps[0].object.iri))
             for ev in result.evidence if ev.path.length == 1]
    assert len(pairs) == len(set(pairs))


@pytest.mark.parametrize("budget", [1, 5, 17, 100, 400])
def test_budget_is_a_hard_limit(demo_kg: KnowledgeGraph, budget: int) -> None:
    result = demo_kg.retrieve(QUESTION, budget=budget)
    assert len(result.evidence_entities()) <= budget
    if budget >= 17:
        assert len(result.evidence_entities()) > 5


def test_retrieve_is_deterministic_and_serialises(demo_kg: KnowledgeGraph) -> None:
    one, two = demo_kg.retrieve(QUESTION), demo_kg.retrieve(QUESTION)
    assert one.evidence == two.evidence and one.entities == two.entities
    out = json.loads(json.dumps(one.to_json()))
    assert set(out) == {"question", "entities", "differential", "evidence"}
    assert set(out["entities"][0]) == {"id", "label", "mention"}
    assert set(out["evidence"][0]) == {"text", "nodes", "steps", "source"}
    assert out["evidence"][0]["source"] == "GRAPH:demo"
    assert set(out["evidence"][0]["steps"][0]) == {"subject", "relation", "object", "direction"}


def test_nothing_linked_means_no_evidence(demo_kg: KnowledgeGraph) -> None:
    result = demo_kg.retrieve("Good morning, how are you today?")
    assert result.entities == () and result.evidence == () and result.to_text() == ""
    assert result.evidence_entities() == set()


def test_a_named_disease_is_its_own_hub(demo_kg: KnowledgeGraph) -> None:
    result = demo_kg.retrieve("What tests and drugs are used for asthma?", budget=30)
    assert result.entities[0].id == "KG:Asthma"
    found = result.evidence_entities()
    assert {"KG:Spirometry", "KG:Salbutamol"} <= found


def test_retriever_on_emckg_reaches_the_answer_entities(emckg_path: Path) -> None:
    store = OxigraphStore()
    ensure_schema(store)
    get_loader("triples").load(store, emckg_path, LoadOptions(), LoadReport())
    kg = KnowledgeGraph(store, embedding_model="none")
    result = kg.retrieve("Doctor, I have been experiencing a hoarse voice for a few weeks now.", budget=60)
    assert result.entities[0].id == "KG:Hoarse_voice"
    assert "KG:Vocal_cord_polyp" in result.evidence_entities()
    # a retriever built by hand takes its knobs
    narrow = Retriever(kg, max_hubs=1).retrieve("hoarse voice", budget=100)
    assert len(narrow.evidence_entities()) < len(kg.retrieve("hoarse voice").evidence_entities())


def test_retrieve_is_the_same_on_an_endpoint(oxigraph_server: Any, demo_kg: KnowledgeGraph, tmp_path: Path) -> None:
    from mirage_kg.model.namespaces import ontologies_dir
    from mirage_kg.store import SparqlStore

    oxigraph_server.clear()
    remote = SparqlStore(oxigraph_server.query_url)
    ensure_schema(remote)
    with open(ontologies_dir() / "demo.ttl", "rb") as handle:
        remote.load(handle, media_type="text/turtle", graph=DEMO_GRAPH, source="mirage-kg demo KG")
    kg = KnowledgeGraph(remote, embedding_model="none", cache_dir=tmp_path)
    here, there = demo_kg.retrieve(QUESTION, budget=30), kg.retrieve(QUESTION, budget=30)
    assert there.entities == here.entities
    assert [ev.path for ev in there.evidence] == [ev.path for ev in here.evidence]
    remote.close()


def test_evidence_leads_with_the_differential(demo_kg: KnowledgeGraph) -> None:
    """The best candidates' facts with the findings come first, so the model sees the differential; without the
    lead the same question's evidence starts elsewhere."""
    question = "I have a fever, a cough, night sweats and I cough up blood"
    result = demo_kg.retrieve(question, budget=60)
    assert result.differential is not None
    top = result.differential.candidates[0]
    assert top.entity.label == "Tuberculosis"
    first = [ev.path for ev in result.evidence[: len(top.paths)]]
    assert [p.steps[0].subject.iri for p in first] == [top.entity.iri] * len(top.paths)
    assert {p.steps[0].object.iri for p in first} == {e.iri for e in top.explains}
    assert result.to_json()["differential"][0]["entity"]["label"] == "Tuberculosis"
    plain = Retriever(demo_kg, lead=0).retrieve(question, budget=60)
    assert plain.differential is None and plain.evidence[0].path != result.evidence[0].path
