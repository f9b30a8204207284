"""MIRAGE end to end over four vocabularies, with a scripted model that behaves like QwQ (it reasons inside
``<think>``, searches in anchor and bridge form, one chain settles on a wrong diagnosis and one proposes a drug the
KG contraindicates): the HPO default KG (the real HPO from ``build-default --only hpo``, plus synthetic disease
annotations in the phenotype.hpoa layout and a few drug facts, since a full build with all 271k annotations takes
over a minute), a UMLS KG (synthetic RRF: MRSTY types, may_treat, contraindicated_with_disease), a SNOMED CT KG
(synthetic RF2 under the real top-level hierarchies, drug facts beside it) and a custom Turtle ontology with its own
kinds mapping. On each the diagnosis vote and the contraindication check fire, and every citation is a KG path."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from mirage_kg import KnowledgeGraph
from mirage_kg.loaders import LoadOptions, LoadReport, get_loader
from mirage_kg.store import OxigraphStore, ensure_schema
from mirage_reason.backends import ScriptedBackend
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.answer import Answer
from mirage_reason.pipeline.coordinator import Mirage
from mirage_reason.pipeline.prompts import QUERY_BEGIN as QB
from mirage_reason.pipeline.prompts import QUERY_END as QE
from mirage_reason.pipeline.prompts import RESULT_END

E2E = Path(__file__).resolve().parent.parent / "fixtures" / "e2e"


@dataclass(frozen=True)
class Scenario:
    """The labels one KG uses for the same clinical story."""

    findings: tuple[str, str, str]  # the question's complaints
    condition: str  # a condition the patient already has
    diagnosis: str  # what two chains find
    wrong: str  # what the third chain settles on
    bad_drug: str  # proposed by a chain; the KG contraindicates it in ``condition``
    good_drug: str

    @property
    def question(self) -> str:
        a, b, c = self.findings
        return f"I have {a.lower()}, {b.lower()} and {c.lower()}, and I have {self.condition.lower()}. " \
               "What is it and what should I take?"


def qwq_like(s: Scenario):  # noqa: ANN201 - a prompt -> completion function
    """A scripted model in QwQ's manner: searches from inside its reasoning, then answers after ``</think>``."""
    a, b, c = s.findings
    plans = {  # sub-question finding -> (searches, final answer)
        a: ([a, f"{a}||{s.diagnosis}", s.diagnosis], f"It is most likely {s.diagnosis}. {s.bad_drug} can be taken."),
        b: ([b, f"{b}||{s.diagnosis}", s.diagnosis], f"This is {s.diagnosis}; {s.good_drug} helps."),
        c: ([c, f"{c}||{s.wrong}"], f"This looks like {s.wrong}."),
        s.condition: ([s.condition], f"With {s.condition.lower()} the patient should see a doctor."),
    }

    def model(prompt: str) -> str:
        if "Write at most" in prompt:  # the decomposer
            return "<think>Four entities, four sub-questions.</think>\n" + "\n".join(
                f"{i}. What does {x.lower()} suggest?" for i, x in enumerate((a, b, c, s.condition), start=1))
        if "Facts:\n[1]" in prompt:  # the writer: cites every fact it was given
            facts = re.findall(r"^\[(\d+)\] (.+)$", prompt, re.MULTILINE)
            return f"<think>Word it.</think>It is most likely {s.diagnosis}. " + " ".join(
                f"{text} [{n}]." for n, text in facts)
        question = prompt.rsplit("Question: ", 1)[-1].split("\n", 1)[0].lower()
        searches, answer = next(plan for key, plan in plans.items() if key.lower() in question)
        turn = prompt.count(RESULT_END)
        if turn < len(searches):
            opening = "<think>Let me look this up in the knowledge graph.\n" if turn == 0 else "\nNext I check "
            return f"{opening}{QB}{searches[turn]}{QE}"
        return f"\nThe facts fit.\n</think>\n\n{answer}"

    return model


def load(store: OxigraphStore, fmt: str, path: Path) -> None:
    get_loader(fmt).load(store, path, LoadOptions(), LoadReport())


def turtle(store: OxigraphStore, path: Path) -> None:
    store.load(io.BytesIO(path.read_bytes()), media_type="text/turtle", graph=f"urn:test:{path.name}",
               source=str(path))


def run(kg: KnowledgeGraph, s: Scenario, **config: object) -> Answer:
    cfg = MirageConfig(n_r=3, max_turns=6, rank_by_question=False, seed=0, **config)  # type: ignore[arg-type]
    return Mirage(kg, ScriptedBackend(qwq_like(s)), cfg).answer(s.question)


def check(kg: KnowledgeGraph, s: Scenario, answer: Answer) -> None:
    # the chains searched in both modes and the model's reasoning stayed out of the answers
    modes = {search.mode for chain in answer.chains for search in chain.searches if search.paths}
    assert modes == {"anchor", "bridge"}
    assert all("<think>" not in c.answer and QB not in c.answer for c in answer.chains)
    # the vote: two chains for the diagnosis, one for the wrong one
    [vote] = [c for c in answer.conflicts if c.kind == "diagnosis"]
    assert vote.winner is not None and vote.winner.label == s.diagnosis
    assert s.wrong in {e.label for e in vote.entities}
    dropped = {c.entity.label: c.status for c in answer.dropped}
    assert dropped[s.wrong] == "outvoted"
    # the contraindication check: the proposed drug is dropped with the KG's reason, and the warning reaches the text
    assert dropped[s.bad_drug] == "contraindicated"
    [treatment] = [c for c in answer.conflicts if c.kind == "treatment"]
    assert {e.label for e in treatment.entities} == {s.bad_drug, s.condition}
    kept = {c.entity.label: c.kind for c in answer.claims}
    assert kept[s.diagnosis] == "disease" and kept[s.good_drug] == "drug" and kept[s.bad_drug] == "warning"
    assert s.diagnosis in answer.text and s.good_drug in answer.text and f"{s.bad_drug}" in answer.text
    assert not answer.abstained and not [f for f in answer.flags if "could not" in f]
    # every citation, warning and conflict's evidence is a path of this KG
    cited = list(answer.cited_paths()) + [p for c in answer.conflicts for p in c.evidence]
    assert cited and all(kg.path_exists(p) for p in cited)
    assert all(kg.path_exists(p) for c in answer.dropped for p in c.citations)


@pytest.mark.slow
def test_hpo_default_kg() -> None:
    from mirage_kg.build.default_kg import build_default_kg

    store = OxigraphStore()
    build_default_kg(store, ["hpo"])  # the real HPO, as `mirage-kg build-default --only hpo` loads it
    load(store, "hpoa", E2E / "hpo" / "e2e.hpoa")
    turtle(store, E2E / "hpo" / "drug-facts.ttl")
    kg = KnowledgeGraph(store, embedding_model="none")
    s = Scenario(("Headache", "Nausea", "Photophobia"), "Asthma", "Synthetic migraine syndrome",
                 "Synthetic tension headache syndrome", "Propranolol", "Sumatriptan")
    answer = run(kg, s)
    check(kg, s, answer)
    # HPO's own kinds: the complaints are phenotypic abnormalities (findings), not diseases
    kinds = {c.entity.label: c.kind for c in answer.claims}
    assert all(kinds.get(f) in (None, "finding") for f in s.findings)


def test_umls_kg() -> None:
    store = OxigraphStore()
    ensure_schema(store)
    load(store, "umls", E2E / "umls")
    kg = KnowledgeGraph(store, embedding_model="none")
    s = Scenario(("Headache", "Nausea", "Photophobia"), "Asthma", "Migraine disorder", "Tension-type headache",
                 "Propranolol", "Sumatriptan")
    check(kg, s, run(kg, s))


def test_snomed_kg() -> None:
    store = OxigraphStore()
    ensure_schema(store)
    load(store, "snomed", E2E / "snomed")
    turtle(store, E2E / "snomed" / "drug-facts.ttl")
    kg = KnowledgeGraph(store, embedding_model="none")
    s = Scenario(("Headache", "Nausea", "Photophobia"), "Asthma", "Migraine", "Tension-type headache",
                 "Propranolol", "Sumatriptan")
    check(kg, s, run(kg, s))


def test_custom_ontology_with_its_own_kinds_mapping() -> None:
    store = OxigraphStore()
    ensure_schema(store)
    turtle(store, E2E / "custom" / "clinic.ttl")
    kg = KnowledgeGraph(store, embedding_model="none")
    s = Scenario(("Headache", "Nausea", "Photophobia"), "Asthma", "Migraine", "Tension-type headache",
                 "Propranolol", "Sumatriptan")
    answer = run(kg, s, kinds=(str(E2E / "custom" / "clinic-kinds.ttl"),))
    check(kg, s, answer)
    # without the mapping nothing in this ontology has a kind or a role: no vote, no check, and the answer says so
    bare = run(kg, s)
    assert not [c for c in bare.conflicts if c.kind in ("diagnosis", "treatment")]
