"""The synthesizer's diagnosis vote over a real KG (the demo KG, so the graph's differential is there): evidence
coverage of the question's findings decides, the chains' votes add a bounded share, repetition cannot win it, the
differential's best candidate stands in the vote, and the answer says which findings it explains."""

from __future__ import annotations

import io

import pytest

from mirage_kg import KnowledgeGraph, Path, demo_store
from mirage_reason.backends import ScriptedBackend
from mirage_reason.pipeline.chain import ChainResult
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.resolution import VOTE_WEIGHT
from mirage_reason.pipeline.synthesizer import Synthesizer

QUESTION = "I have a fever, a cough, night sweats and haemoptysis. What is it?"


@pytest.fixture(scope="module")
def kg() -> KnowledgeGraph:
    return KnowledgeGraph(demo_store(), embedding_model="none")


def chain(answer: str, paths: tuple[Path, ...]) -> ChainResult:
    return ChainResult(sub_question="q", question="q", answer=answer, text=answer, searches=(), seed_paths=paths,
                       trace=(), finish_reason="answered", turns=1, completion_tokens=3, prompt_tokens=10,
                       search_seconds=0.0)


def facts(kg: KnowledgeGraph, label: str) -> tuple[Path, ...]:
    return tuple(Path((s,)) for s in kg.anchor(kg.entities_named(label)[0], k=20))


def analyse(kg: KnowledgeGraph, chains: list[ChainResult], question: str = QUESTION):  # noqa: ANN201
    synth = Synthesizer(kg, ScriptedBackend([]), MirageConfig())
    entities = [m.best.entity for m in kg.link(question) if m.best and m.best.score >= 0.7]
    return synth.analyse(question, entities, chains)


def test_repeating_an_unsupported_diagnosis_cannot_win(kg: KnowledgeGraph) -> None:
    """Five chains say migraine, tied to the question only through a path over a shared symptom (it explains none
    of the findings); one says tuberculosis (all four). Tuberculosis wins; so it does against asthma, which
    explains the cough only, however many chains repeat asthma."""
    tb = facts(kg, "Tuberculosis")
    migraine_paths = tuple(kg.bridge("KG:Migraine", "KG:Fever", max_hops=3, max_paths=3))
    assert migraine_paths  # the chains did tie migraine to a question entity
    s = analyse(kg, [chain("It is migraine.", migraine_paths)] * 5 + [chain("Tuberculosis.", tb)])
    [vote] = [c for c in s.conflicts if c.kind == "diagnosis"]
    assert vote.winner is not None and vote.winner.label == "Tuberculosis"
    assert {c.entity.label: c.status for c in s.dropped}["Migraine"] == "outvoted"
    s = analyse(kg, [chain("Asthma.", facts(kg, "Asthma"))] * 8 + [chain("Tuberculosis.", tb)])
    [vote] = [c for c in s.conflicts if c.kind == "diagnosis"]
    assert vote.winner.label == "Tuberculosis"
    votes = dict(vote.votes)
    assert votes["KG:Asthma"] < votes["KG:Tuberculosis"]
    assert votes["KG:Asthma"] <= s.differential.coverage(kg.entity("KG:Asthma").iri) + VOTE_WEIGHT + 1e-9


def test_the_differentials_best_candidate_stands_and_can_win(kg: KnowledgeGraph) -> None:
    """Every chain names asthma; the graph's best explanation, tuberculosis, joins the vote, wins, and becomes a
    claim cited by its facts; the answer names the findings it explains and leaves none out."""
    s = analyse(kg, [chain("Asthma.", facts(kg, "Asthma"))] * 3)
    [vote] = [c for c in s.conflicts if c.kind == "diagnosis"]
    assert vote.winner.label == "Tuberculosis" and vote.evidence
    assert s.claims[0].entity.label == "Tuberculosis" and s.claims[0].citations
    assert all(kg.path_exists(p) for p in s.claims[0].citations)
    assert {e["label"] for e in s.findings["explained"]} == {"Fever", "Cough", "Night sweats", "Haemoptysis"}
    assert s.findings["unexplained"] == []


def test_at_equal_coverage_the_votes_decide(kg: KnowledgeGraph) -> None:
    """Influenza and COVID-19 both explain fever, cough and sore throat: the chains' majority picks."""
    question = "I have a fever, a cough and a sore throat. What is it?"
    flu, covid = facts(kg, "Influenza"), facts(kg, "COVID-19")
    s = analyse(kg, [chain("COVID-19.", covid), chain("COVID-19.", covid), chain("Influenza.", flu)], question)
    [vote] = [c for c in s.conflicts if c.kind == "diagnosis"]
    assert s.differential.coverage(kg.entity("KG:Influenza").iri) == pytest.approx(
        s.differential.coverage(kg.entity("KG:COVID-19").iri))
    assert vote.winner.label == "COVID-19"
    assert [e["label"] for e in s.findings["unexplained"]] == []


def test_the_asked_kind_answers_treatment_features_and_tests(kg: KnowledgeGraph) -> None:
    """"What medication treats asthma?" is answered with the asthma drugs the KG holds, even when the chains name
    none; "what are the symptoms of ..." with the condition's findings, not its drugs; "which tests" with tests."""
    vague = [chain("It depends on the patient.", ())]
    s = analyse(kg, vague, "What medication treats asthma?")
    drugs = {c.entity.label for c in s.claims if c.kind == "drug"}
    assert drugs and drugs <= {"Salbutamol", "Budesonide", "Montelukast", "Inhaled corticosteroid",
                               "Formoterol", "Ipratropium", "Prednisolone", "Salmeterol", "Tiotropium"}, drugs
    assert all(kg.path_exists(p) for c in s.claims for p in c.citations)
    s = analyse(kg, vague, "What are the main symptoms of tuberculosis?")
    assert s.intents == ("features",)
    found = {c.entity.label for c in s.claims if c.kind == "finding"}
    assert {"Haemoptysis", "Night sweats"} <= found and not [c for c in s.claims if c.kind == "drug"]
    s = analyse(kg, vague, "Which tests confirm tuberculosis?")
    assert [c for c in s.claims if c.kind == "test"] and not [c for c in s.claims if c.kind == "drug"]


def test_hpo_features_question_gets_phenotypes(tmp_path: object) -> None:
    """On HPO (the small default-KG fixture) "What are the main features of Marfan syndrome?" is answered with
    Marfan's phenotypes, hallmarks first, and no medication gap line."""
    from pathlib import Path as FsPath

    from mirage_kg import OxigraphStore
    from mirage_kg.loaders.hpoa import HpoaLoader
    from mirage_kg.loaders.obo import OboLoader
    from mirage_kg.loaders import LoadOptions, LoadReport
    from mirage_kg.model.namespaces import GRAPH
    from mirage_kg.store import ensure_schema

    fixtures = FsPath(__file__).resolve().parent.parent / "fixtures" / "default_kg"
    store = OxigraphStore()
    ensure_schema(store)
    OboLoader().load(store, fixtures / "hp-mini.obo", LoadOptions(), LoadReport())
    HpoaLoader().load(store, fixtures / "mini.hpoa", LoadOptions(graph=GRAPH + "hpoa/test"), LoadReport())
    hpo = KnowledgeGraph(store, embedding_model="none")
    marfan = [e for e in hpo.entities_named("Marfan syndrome")]
    synth = Synthesizer(hpo, ScriptedBackend([]), MirageConfig())
    s = synth.analyse("What are the main features of Marfan syndrome?", marfan[:1],
                      [chain("It is a connective tissue disorder.", ())])
    features = [c.entity.label for c in s.claims if c.kind == "finding"]
    assert {"Arachnodactyly", "Ectopia lentis"} <= set(features)
    assert "Autosomal dominant inheritance" not in features  # an inheritance annotation is no feature
    assert not s.gaps or not any("medication" in g for g in s.gaps)
    # asked of a merged concept (MONDO's Marfan, an exact match of OMIM's), whose steps are its members' triples
    store.load(io.BytesIO(b"<http://purl.obolibrary.org/obo/MONDO_0007947> "
                          b"<http://www.w3.org/2004/02/skos/core#exactMatch> <https://omim.org/entry/154700> .\n"
                          b"<http://purl.obolibrary.org/obo/MONDO_0007947> "
                          b"<http://www.w3.org/2004/02/skos/core#prefLabel> \"Marfan syndrome (MONDO)\"@en .\n"
                          b"<http://purl.obolibrary.org/obo/MONDO_0007947> "
                          b"<http://www.w3.org/2000/01/rdf-schema#subClassOf> "
                          b"<http://purl.obolibrary.org/obo/MONDO_0000001> .\n"),
               media_type="application/n-triples", graph="urn:test:mondo")
    merged = KnowledgeGraph(store, embedding_model="none")
    mondo = merged.entity("MONDO:0007947")
    s = Synthesizer(merged, ScriptedBackend([]), MirageConfig()).analyse(
        "What are the main features of Marfan syndrome?", [mondo], [chain("It is a connective tissue disorder.", ())])
    assert {"Arachnodactyly", "Ectopia lentis"} <= {c.entity.label for c in s.claims if c.kind == "finding"}, s.gaps


def test_a_named_condition_that_explains_the_question_can_win(kg: KnowledgeGraph) -> None:
    """"I keep having panic attacks": the question names panic disorder and nothing else; a chain that settles on
    hypertension (tied to it through a shared symptom) does not carry the answer."""
    question = "I keep having panic attacks. What is it?"
    paths = tuple(kg.bridge("KG:Hypertension", "KG:Panic_disorder", max_hops=2, max_paths=3))
    s = analyse(kg, [chain("It is hypertension.", paths)] * 3, question)
    assert [f.role for f in s.differential.findings] == ["condition"]
    assert s.diagnoses[0].label == "Panic disorder"
    assert {c.entity.label: c.status for c in s.dropped}.get("Hypertension") == "outvoted"
