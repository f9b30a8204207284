"""The decomposer with a scripted model: when it splits, how it checks the split against the KG (link, repair,
drop, fill gaps), the fallback for unusable output, and one batched call for many questions; and the structured split
an engine constrains (JSON whose entity field is an enum of the question's entities), with its fallback and notes."""

from __future__ import annotations

from fake_kg import FakeKG, ent

from mirage_reason.backends import ScriptedBackend
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.decomposer import Decomposer, parse_sub_questions

MULTI = "I have a fever and wheezing, and I take propranolol. What is going on?"


def make(script: list[str] | None = None, **cfg: object) -> tuple[Decomposer, ScriptedBackend]:
    """A decomposer over a model whose engine cannot constrain output: the free-text split and its parser."""
    backend = ScriptedBackend(script or [], cycle=bool(script))
    return Decomposer(FakeKG(), backend, MirageConfig(**cfg)), backend  # type: ignore[arg-type]


def test_single_entity_question_is_not_split_and_the_model_not_asked() -> None:
    decomposer, backend = make()
    d = decomposer.decompose("What are the symptoms of the flu?")
    assert d.texts == ("What are the symptoms of the flu?",)
    assert d.sub_questions[0].origin == "question" and d.sub_questions[0].entities == (ent("Influenza"),)
    assert backend.calls == []


def test_question_with_no_entity_is_kept_whole() -> None:
    decomposer, backend = make()
    d = decomposer.decompose("How are you today?")
    assert d.texts == ("How are you today?",) and d.entities == () and backend.calls == []


def test_model_split_is_linked_and_kept() -> None:
    decomposer, backend = make(["1. What does a fever suggest?\n2. What causes wheezing?\n3. What is propranolol for?"])
    d = decomposer.decompose(MULTI)
    assert d.texts == ("What does a fever suggest?", "What causes wheezing?", "What is propranolol for?")
    assert [s.origin for s in d.sub_questions] == ["model"] * 3
    assert [s.entities[0].label for s in d.sub_questions] == ["Fever", "Wheezing", "Propranolol"]
    [call] = backend.calls
    assert "Fever, Wheezing, Propranolol" in call.prompts[0]
    assert (call.params.temperature, call.params.top_p) == (0.6, 0.95)


def test_vague_sub_question_is_repaired_with_an_uncovered_entity() -> None:
    decomposer, _ = make(["1. What does a fever suggest?\n2. What causes it?\n3. What is propranolol for?"])
    d = decomposer.decompose(MULTI)
    assert d.texts[1] == "What causes Wheezing?"
    assert d.sub_questions[1].origin == "repaired" and d.sub_questions[1].entities == (ent("Wheezing"),)
    assert any("repaired" in n for n in d.notes)


def test_unlinkable_sub_question_is_dropped_when_everything_is_covered() -> None:
    decomposer, _ = make(["1. Fever and wheezing together?\n2. Is it serious at all?\n3. And propranolol?"])
    d = decomposer.decompose(MULTI)
    assert d.texts == ("Fever and wheezing together?", "And propranolol?")
    assert any("dropped 'Is it serious at all?'" in n for n in d.notes)


def test_uncovered_entity_gets_its_own_sub_question() -> None:
    decomposer, _ = make(["1. Why do I have a fever?"])
    d = decomposer.decompose(MULTI)
    assert [s.origin for s in d.sub_questions] == ["model", "fallback", "fallback"]
    assert d.sub_questions[1].text.startswith("Regarding Wheezing:")


def test_unusable_output_falls_back_to_entity_groups() -> None:
    for garbage in ["", "Sure! Happy to help.", "<think>let me think about this for a long"]:
        decomposer, _ = make([garbage])
        d = decomposer.decompose(MULTI)
        assert [s.origin for s in d.sub_questions] == ["fallback"] * 3, garbage
        assert [s.entities for s in d.sub_questions] == [(ent("Fever"),), (ent("Wheezing"),), (ent("Propranolol"),)]
        assert any("one sub-question per linked entity group" in n for n in d.notes)


def test_fallback_groups_respect_n_q() -> None:
    decomposer, _ = make(["nothing useful"], n_q=2)
    question = "Fever, cough, wheezing, headache and nausea: what is it?"
    d = decomposer.decompose(question)
    assert [[e.label for e in s.entities] for s in d.sub_questions] == [
        ["Fever", "Cough", "Wheezing"], ["Headache", "Nausea"]]


def test_at_most_n_q_sub_questions() -> None:
    lines = "\n".join(f"{i}. What about the fever, case {i}?" for i in range(1, 8))
    decomposer, _ = make([lines], n_q=4)
    d = decomposer.decompose(MULTI)
    assert len(d.sub_questions) == 4


def test_decompose_many_asks_the_model_once() -> None:
    decomposer, backend = make(["1. What does a fever suggest?\n2. What does wheezing suggest?"])
    questions = ["Fever and wheezing?", "Symptoms of the flu?", "Cough and headache, what now?"]
    out = decomposer.decompose_many(questions)
    assert backend.batch_sizes == [2]
    assert [d.question for d in out] == questions
    assert out[1].sub_questions[0].origin == "question"


def test_parse_sub_questions_formats() -> None:
    raw = ("Here you go:\n1) What is asthma?\n- **What treats asthma?**\nSub-question 3: Is it genetic?\n"
           "1. What is asthma?")
    assert parse_sub_questions(raw, 4) == ["What is asthma?", "What treats asthma?", "Is it genetic?"]
    assert parse_sub_questions("What is asthma?\nWhy?\nmore words here", 4) == ["What is asthma?"]
    assert parse_sub_questions("<think>plan</think>\n1. What is asthma?", 4) == ["What is asthma?"]


def test_off_topic_and_unrepairable_sub_questions_are_dropped() -> None:
    # one copies an example about asthma (not in the question), one is chatter with no vague reference to repair
    decomposer, _ = make(["1. Why do I have a fever?\n2. What treats asthma?\n"
                          "3. Use bullet points for clarity.\n4. Is propranolol safe?"])
    d = decomposer.decompose(MULTI)
    assert d.texts[:2] == ("Why do I have a fever?", "Is propranolol safe?")
    assert any("names no entity of the question" in n for n in d.notes)
    assert any("dropped 'Use bullet points for clarity.'" in n for n in d.notes)


# -- the structured split ---------------------------------------------------------------------------------------------

def structured(script: list[str], **cfg: object) -> tuple[Decomposer, ScriptedBackend]:
    backend = ScriptedBackend(script, cycle=True, constraints=("json_schema", "choice"))  # a constraining engine
    return Decomposer(FakeKG(), backend, MirageConfig(**cfg)), backend  # type: ignore[arg-type]


def test_structured_split_is_held_to_the_question_entities() -> None:
    import json

    items = [{"entity": "Fever", "question": "What does a fever suggest?"},
             {"entity": "Propranolol", "question": "Why would someone take this drug?"},
             {"entity": "Fever", "question": "What does a fever suggest?"}]
    decomposer, backend = structured([json.dumps({"sub_questions": items})])
    d = decomposer.decompose(MULTI)
    schema = backend.calls[0].constraint.json_schema
    item = schema["properties"]["sub_questions"]
    assert item["items"]["properties"]["entity"]["enum"] == ["Fever", "Wheezing", "Propranolol"]
    assert item["maxItems"] == 4 and item["minItems"] == 3
    # the model's own sub-questions, anchored on the entity the engine held it to (one that says "this drug" gets
    # the entity's name: the chain's seed facts are retrieved for what its sub-question names)
    assert d.texts[:2] == ("What does a fever suggest?", "Propranolol: Why would someone take this drug?")
    assert [s.origin for s in d.sub_questions] == ["model", "model", "fallback"]
    assert [s.entities[0].label for s in d.sub_questions] == ["Fever", "Propranolol", "Wheezing"]
    assert d.constrained and d.source == "model" and d.to_json()["constrained"] is True
    assert any("Wheezing" in n for n in d.notes) and any("wrote it twice" in n for n in d.notes)


def test_structured_split_outside_the_enum_cannot_come_back() -> None:
    import json

    from mirage_reason.errors import BackendError

    bad = json.dumps({"sub_questions": [{"entity": "Asthma", "question": "What is asthma?"}] * 3})
    decomposer, _ = structured([bad])
    try:
        decomposer.decompose(MULTI)
    except BackendError as exc:
        assert "outside" in str(exc)
    else:  # pragma: no cover - the double would be dishonest
        raise AssertionError("an entity outside the enum came back")


def test_structured_split_cut_by_max_tokens_falls_back_and_says_so() -> None:
    decomposer, _ = structured(['{"sub_questions": [{"entity": "Fever", "question": "What does a fever ' + "x " * 50],
                               decomposer_max_new_tokens=6)
    d = decomposer.decompose(MULTI)
    assert d.source == "template" and all(s.origin == "fallback" for s in d.sub_questions)
    assert any("structured split was unusable (cut by its max tokens)" in n for n in d.notes)


def test_template_fallback_says_the_engine_cannot_constrain() -> None:
    decomposer, _ = make(["sure, happy to help"])
    d = decomposer.decompose(MULTI)
    assert d.source == "template" and not d.constrained
    assert any("cannot constrain the model's output" in n for n in d.notes)
