"""Dataset loaders: the real public files (skipped when ../shared/data is absent) and a tiny JSONL fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirage_kg import InputError
from mirage_reason.evaluation.datasets import entity_curie, load_dataset

from eval_support import FIXTURES, TINY, shared_file


def test_genmedgpt5k_real_file() -> None:
    path = shared_file("genmedgpt5k", "genmedgpt5k.json")
    examples = load_dataset("genmedgpt5k", path)
    assert len(examples) == 5452
    first = examples[0]
    assert first.id == "genmedgpt5k-0" and first.kind == "free"
    assert first.question.startswith("Doctor, I have been experiencing sudden and frequent panic attacks")
    assert first.reference and "panic disorder" in first.reference
    assert len({e.id for e in examples}) == len(examples)


def test_genmedgpt5k_linked_real_file_has_gold_entities() -> None:
    folder = shared_file("genmedgpt5k", "linked_248.jsonl").parent
    examples = load_dataset("genmedgpt5k-linked", folder)  # a folder holding the file works too
    assert len(examples) == 248
    first = examples[0]
    assert first.gold_question_entities == ("KG:Panic_disorder",)
    assert "KG:Toxicology_screen" in first.gold_answer_entities and len(first.gold_answer_entities) == 7
    # names with ';' and '()' stay whole: the split is on ',' only
    second = examples[1]
    assert "KG:Tracheostomy;_temporary_and_permanent" in second.gold_answer_entities
    assert sum(len(e.gold_answer_entities) for e in examples) == 1842


def test_explaincpe_test_split_by_default_and_dev_by_path() -> None:
    data = shared_file("explaincpe", "test.json").parent.parent
    test = load_dataset("explaincpe", data)
    assert len(test) == 190
    assert all(e.kind == "choice" and len(e.options) == 5 and e.gold_letter in "ABCDE" for e in test)
    assert test[0].id == "explaincpe-test-0" and test[0].gold_letter == "D" and test[0].options[3] == "喷雾剂"
    dev = load_dataset("explaincpe", data / "explaincpe" / "dev.json")
    assert len(dev) == 700 and dev[0].id.startswith("explaincpe-dev-")


def test_default_data_dir_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    data = shared_file("explaincpe", "test.json").parent.parent
    monkeypatch.setenv("MIRAGE_KG_DATA", str(data))
    assert len(load_dataset("explaincpe")) == 190
    monkeypatch.setenv("MIRAGE_KG_DATA", str(data / "nowhere"))
    with pytest.raises(InputError, match="not found"):
        load_dataset("explaincpe")


def test_limit_is_a_seeded_sample_in_file_order() -> None:
    path = shared_file("explaincpe", "test.json")
    a = load_dataset("explaincpe", path, limit=20, seed=0)
    b = load_dataset("explaincpe", path, limit=20, seed=0)
    c = load_dataset("explaincpe", path, limit=20, seed=1)
    assert [e.id for e in a] == [e.id for e in b] != [e.id for e in c]
    everything = [e.id for e in load_dataset("explaincpe", path)]
    positions = [everything.index(e.id) for e in a]
    assert positions == sorted(positions) and len(a) == 20


def test_jsonl_fixture() -> None:
    examples = load_dataset("jsonl", TINY)
    assert [e.id for e in examples] == ["flu-1", "asthma-1", "line-3", "7"]
    flu, asthma, diabetes, migraine = examples
    assert flu.kind == "free" and flu.reference and flu.reference.startswith("It sounds like influenza")
    assert flu.gold_question_entities == ("KG:Fever", "KG:Cough")
    assert flu.gold_answer_entities == ("KG:Influenza", "KG:Oseltamivir")
    assert asthma.kind == "choice" and asthma.gold_letter == "A" and asthma.options[0] == "Salbutamol"
    assert asthma.gold_question_entities == ("KG:Asthma",)
    # options keyed by letter; the answer given as the option's text
    assert diabetes.options == ("Chest X-ray", "Blood glucose test", "Electrocardiogram")
    assert diabetes.gold_letter == "B"
    assert diabetes.gold_answer_entities == ("KG:Blood_glucose_test",)
    # a free question's "answer" is its reference; numeric ids become strings
    assert migraine.reference == "Rest in a dark room; sumatriptan can help." and migraine.kind == "free"


def test_jsonl_errors_name_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"bad_missing_question.jsonl:2: 'question'"):
        load_dataset("jsonl", FIXTURES / "eval" / "bad_missing_question.jsonl")
    with pytest.raises(InputError, match="neither one of the letters AB"):
        load_dataset("jsonl", FIXTURES / "eval" / "bad_letter.jsonl")
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join(json.dumps({"id": "a", "question": "q"}) for _ in range(2)), encoding="utf-8")
    with pytest.raises(InputError, match=r"dup.jsonl:2: duplicate id 'a'"):
        load_dataset("jsonl", dup)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "fine"}\n{"question": \n', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken.jsonl:2: invalid JSON"):
        load_dataset("jsonl", broken)
    with pytest.raises(InputError, match="needs --data"):
        load_dataset("jsonl")
    with pytest.raises(InputError, match="unknown dataset 'cmcqa'"):
        load_dataset("cmcqa", TINY)
    with pytest.raises(InputError, match="--limit must be at least 1"):
        load_dataset("jsonl", TINY, limit=0)


@pytest.mark.parametrize(("given", "curie"), [
    ("Panic_disorder", "KG:Panic_disorder"),
    ("Panic disorder", "KG:Panic_disorder"),
    ("KG:Panic_disorder", "KG:Panic_disorder"),
    ("HP:0001945", "HP:0001945"),
    ("http://purl.obolibrary.org/obo/HP_0001945", "HP:0001945"),
    ("Other_diagnostic_procedures_(interview;_evaluation;_consultation)",
     "KG:Other_diagnostic_procedures_(interview;_evaluation;_consultation)"),
    ("Vitamin: B12", "KG:Vitamin:_B12"),
])
def test_entity_curie(given: str, curie: str) -> None:
    assert entity_curie(given) == curie
