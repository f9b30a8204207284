"""The reasoner tests' fake graph held to the real one: ``FakeKG`` and a real ``KnowledgeGraph`` over the same
entities and triples (``fake_kg.real_kg``) both satisfy ``KnowledgeGraphLike`` and give the same answers to what
the reasoner asks: entities by name or id, linking (scores and methods), anchor (its order), bridge, retrieval's
entities and path checks."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

import pytest

from fake_kg import ENTITIES, RELATIONS, FakeKG, ent, real_kg
from mirage_kg import KnowledgeGraph, KnowledgeGraphLike, LinkerLike, Path, Step, UnknownEntityError

NAMES = ["Influenza", "influenza", "flu", "Flu", "Tamiflu", "tamiflu", "Type 2 diabetes mellitus", "type 2 diabetes",
         "Coughs", "sore throats", "high blood pressure", "feverr", "Influenzza", "Type 2 diabetes melitus",
         "blood glucose", "Oselt", "KG:Influenza", "KG:Nothing", "https://w3id.org/mirage-kg/entity/Fever", "xyz",
         " Asthma ", ""]
TEXTS = ["I have a fever and a cough, could it be the flu?", "Tamiflu for influenza",
         "Can I take ibuprofen with a stomach ulcer?", "fever, coughs and wheezing in asthma",
         "Type 2 Diabetes Mellitus and polyuria", "What is KG:Influenza?", "tiredness and headaches",
         "Is propranolol safe with asthma and high blood pressure?", "sore throat after a cold",
         "paracetamol or acetaminophen", "type 2 diabetes and metformin", "nothing here at all"]


@pytest.fixture(scope="module")
def real() -> Iterator[KnowledgeGraph]:
    kg = real_kg()
    yield kg
    kg.store.close()


@pytest.fixture
def fake() -> FakeKG:
    return FakeKG()


def candidates(found: list) -> list[tuple[str, float, str]]:  # type: ignore[type-arg]
    return [(c.entity.iri, c.score, c.method) for c in found]


def steps(found: list[Step]) -> list[tuple[str, str, str, str]]:
    return [(s.subject.iri, s.relation.iri, s.object.iri, s.direction) for s in found]


def paths(found: list[Path]) -> list[list[tuple[str, str, str, str]]]:
    return [steps(list(p.steps)) for p in found]


def test_both_satisfy_the_protocol(real: KnowledgeGraph, fake: FakeKG) -> None:
    for kg in (real, fake):
        assert isinstance(kg, KnowledgeGraphLike) and isinstance(kg.linker, LinkerLike)
    assert not isinstance(object(), KnowledgeGraphLike)  # the check can fail


@pytest.mark.parametrize("name", [n for n in NAMES if n.strip()] + ["Diabetes", "diabetes", "Migraine"])
def test_entity_by_name_or_id(real: KnowledgeGraph, fake: FakeKG, name: str) -> None:
    def answer(kg: KnowledgeGraphLike) -> str:
        try:
            return kg.entity(name).iri
        except UnknownEntityError:
            return "unknown"

    assert answer(fake) == answer(real)


@pytest.mark.parametrize("name", NAMES)
def test_link_one_scores_and_methods(real: KnowledgeGraph, fake: FakeKG, name: str) -> None:
    assert candidates(fake.linker.link_one(name, top=5)) == candidates(real.linker.link_one(name, top=5))


@pytest.mark.parametrize("text", TEXTS)
def test_link_spans_and_candidates(real: KnowledgeGraph, fake: FakeKG, text: str) -> None:
    """The same mentions with the same best candidate; the fake's candidates are the real linker's first ones
    (the real linker may list look-alikes below a span's dictionary match)."""
    ours, theirs = fake.link(text), real.link(text)
    assert [(m.text, m.start, m.end) for m in ours] == [(m.text, m.start, m.end) for m in theirs]
    for mine, other in zip(ours, theirs):
        assert candidates(list(mine.candidates)) == candidates(list(other.candidates))[:len(mine.candidates)]
        assert mine.candidates


@pytest.mark.parametrize("label", list(ENTITIES))
def test_anchor_steps_in_order(real: KnowledgeGraph, fake: FakeKG, label: str) -> None:
    for direction in ("both", "out", "in"):
        for k in (1, 2, 10):
            assert steps(fake.anchor(label, k=k, direction=direction)) == \
                steps(real.anchor(label, k=k, direction=direction)), (direction, k)
    symptom = [RELATIONS["has_symptom"].iri]
    assert steps(fake.anchor(label, relations=symptom)) == steps(real.anchor(label, relations=symptom))


def test_bridge_paths_in_order(real: KnowledgeGraph, fake: FakeKG) -> None:
    labels = list(ENTITIES)
    for a, b in combinations(labels[:14], 2):
        for hops in (1, 2, 3):
            assert paths(fake.bridge(a, b, max_hops=hops)) == paths(real.bridge(a, b, max_hops=hops)), (a, b, hops)
    assert paths(fake.bridge("Influenza", "Asthma", max_paths=2)) == \
        paths(real.bridge("Influenza", "Asthma", max_paths=2))


@pytest.mark.parametrize("text", TEXTS)
def test_retrieve_links_the_same_entities(real: KnowledgeGraph, fake: FakeKG, text: str) -> None:
    """The fake's retrieval links each mention's best candidate, all of which the real retriever links too (it
    ranks them by weight and adds look-alikes: tests on the fake must not rely on retrieval's entity order);
    every fact the fake offers as evidence is one the real graph holds."""
    ours, theirs = fake.retrieve(text), real.retrieve(text)
    linked = {e.iri for e in ours.entities}
    assert linked == {m.best.entity.iri for m in real.link(text) if m.best is not None}
    assert linked <= {e.iri for e in theirs.entities}
    assert all(real.path_exists(ev.path) for ev in ours.evidence)


def test_path_exists(real: KnowledgeGraph, fake: FakeKG) -> None:
    held = fake.anchor("Influenza")[0]
    flipped = Step(held.object, held.relation, held.subject, held.direction)
    unknown = Step(ent("Influenza"), RELATIONS["need_medication"], ent("Metformin"), "forward")
    for path, expected in ((Path((held,)), True), (Path((flipped,)), False), (Path((held, unknown)), False),
                           (Path(()), False)):
        assert fake.path_exists(path) is expected and real.path_exists(path) is expected
