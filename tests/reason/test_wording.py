"""The pipeline on an engine that constrains output, end to end with a scripted model that plays one (its replies
must fit each request's schema, or the double fails them): the decomposition, the chains' actions, the cited
wording and the multiple-choice letter; and the rendering of a structured reply into cited sentences."""

from __future__ import annotations

import json
import random
import re

from fake_kg import FakeKG, ent

from mirage_kg import Path
from mirage_reason.backends import ScriptedBackend
from mirage_reason.pipeline.chain import ChainResult
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.coordinator import Mirage
from mirage_reason.pipeline.synthesis import Synthesis
from mirage_reason.pipeline.synthesizer import Synthesizer
from mirage_reason.pipeline import sentence_check
from mirage_reason.pipeline.wording import FRAMES, fact_readings, render

QUESTION = "I have a fever and wheezing. What could it be?"
CONSTRAINED = ("json_schema", "choice")


def _between(prompt: str, lead: str) -> list[str]:
    line = next(ln for ln in prompt.splitlines() if ln.startswith(lead))
    return [p.strip() for p in line[len(lead):].split(",") if p.strip() and p.strip() != "..."]


def small_model(prompt: str) -> str:
    """A small model on a constraining engine: a JSON split, one search then an answer, cited sentences."""
    turn = prompt.rsplit("<|im_start|>assistant\n", 1)[-1]
    if "You split medical questions" in prompt:
        labels = _between(prompt, "Medical entities in it:")
        return json.dumps({"sub_questions": [{"entity": e, "question": f"What does {e.lower()} point to?"}
                                             for e in labels]})
    if "reply with one JSON action" in prompt:
        if '{"action"' not in turn:
            return json.dumps({"action": "anchor", "entity": _between(prompt, "Entities you can search:")[0]})
        answer = {"action": "answer", "answer": "It may be asthma."}
        if "Options:" in prompt:
            answer = {"action": "answer", "choice": "B", "answer": "Asthma fits."}
        return json.dumps(answer)
    facts = dict(re.findall(r"^\[(\d+)\] (.+)$", prompt, re.MULTILINE))
    lead = re.findall(r'\{"cite": (\d+), "text": "\.\.\. ([^"]+) \.\.\."\}', prompt)
    reply: dict[str, object] = {"sentences": [{"cite": 1, "text": facts["1"]}]}
    if lead:  # it frames each lead fact for the patient, in the fact's words
        # (the fever-and-wheezing question: the lead fact is Asthma's wheezing)
        reply = {"lead": [{"cite": int(n), "text": f"you may have {label}, which has symptom wheezing"}
                          for n, label in lead], "sentences": []}
    if '"choice"' in prompt:
        reply = {"choice": "B", **reply}
    return json.dumps(reply)


def test_render_cites_every_sentence_and_keeps_finished_ones_of_a_cut_reply() -> None:
    whole = json.dumps({"choice": "C", "sentences": [{"text": "asthma causes wheezing [2].", "cite": 1},
                                                     {"text": "See a doctor", "cite": 2}]})
    assert render(whole, 2) == "Answer: C\n\nAsthma causes wheezing [1]. See a doctor [2]."
    cut = whole[: whole.index("See a")]
    assert render(cut, 2) == "Answer: C\n\nAsthma causes wheezing [1]."
    assert render("Plain text from an engine that cannot constrain.", 2).startswith("Plain text")
    # SmolLM2 repeated a sentence word for word ("Saliva Substitutes is a medication for ... [1]." twice)
    twice = json.dumps({"sentences": [{"cite": 1, "text": "asthma has symptom Wheezing"},
                                      {"cite": 1, "text": "Asthma has symptom Wheezing"}]})
    assert render(twice, 1) == "Asthma has symptom Wheezing [1]."


def test_the_whole_loop_runs_on_structured_output() -> None:
    backend = ScriptedBackend(small_model, constraints=CONSTRAINED, model_params=135_000_000)
    mirage = Mirage(FakeKG(), backend, MirageConfig(rank_by_question=False, seed=0))
    answer = mirage.answer(QUESTION)
    data = answer.to_json()
    assert data["decomposition"] == {"source": "model", "constrained": True, "note": "",
                                     "origins": ["model", "model"]}
    assert data["sub_questions"] == ["What does fever point to?", "What does wheezing point to?"]
    assert all(c["mode"] == "structured" and c["search_count"] >= 1 for c in data["chains"])
    assert all(call.constraint is not None for call in backend.calls)  # every request held to its schema
    # the wording: every sentence ends with its citation, then the advice; it survived the claim check
    assert re.fullmatch(r"(?:[^.\[\]]+ \[\d+\]\. )+Please see a doctor about your situation\.",
                        answer.text.split("\n\n")[0]), answer.text
    assert "From the knowledge graph:" not in answer.text  # not the fallback
    assert answer.text.startswith("You may have Asthma, which has symptom wheezing [1].")
    assert answer.support.verdict == "grounded"
    # the writer's schema: a lead sentence on the diagnosis's fact, naming it and saying something in its words
    wording = backend.calls[-1].constraint
    lead = wording.json_schema["properties"]["lead"]["prefixItems"]
    assert [item["properties"]["cite"] for item in lead] == [{"const": 1}]

    def reply(text: str) -> str:
        return json.dumps({"lead": [{"cite": 1, "text": text}], "sentences": []})

    for said in ("Asthma has symptom Wheezing", "wheezing is a symptom of asthma",
                 "you may have asthma, which has symptom wheezing"):
        assert wording.check(reply(said)) is None, said
    for unsaid in ("Asthma", "Asthma ................", "Asthma causes the wheezing", "Wheezing comes from asthma",
                   "Asthma is the fastest heart rhythm", "you may have Asthma", "Asthma wheezing",
                   "Asthma has symptom Cough"):
        assert wording.check(reply(unsaid)), unsaid


def test_a_multiple_choice_letter_is_a_constrained_choice() -> None:
    backend = ScriptedBackend(small_model, constraints=CONSTRAINED, model_params=135_000_000)
    mirage = Mirage(FakeKG(), backend, MirageConfig(rank_by_question=False, seed=0, choice_samples=1))
    question = "I wheeze and cough. What is it?\nOptions:\nA. Influenza\nB. Asthma\nC. Migraine"
    answer = mirage.answer(question)
    chain_schemas = [c.constraint.json_schema for c in backend.calls if "reply with one JSON action" in c.prompts[0]]
    answers = [o for s in chain_schemas for o in s.get("anyOf", [s]) if o["properties"]["action"]["const"] ==
               "answer"]
    assert answers and all(o["properties"]["choice"] == {"enum": ["A", "B", "C"]} for o in answers)
    assert answer.text.startswith("Answer: B. Asthma")


def _grammar_sentence(readings: list[tuple[str, tuple[str, ...]]], rng: random.Random) -> str:
    """A sentence the wording schema of one fact allows, drawn at random: a reading, its names in either case,
    its "is" hedged or not, a frame before it or not."""
    text, names = rng.choice(readings)
    first = next((name for name in names if text.startswith(name)), None)
    framed = rng.random() < 0.5
    if framed and first is not None:
        text = f"{first}, which{text[len(first):]}"
    text = re.sub(r"(?<= )is(?= )", lambda _: rng.choice(["is", "can be", "may be", "is often"]), text)
    for name in names:
        text = text.replace(name, rng.choice([name, name.lower()]))
    return f"{rng.choice(FRAMES)} {text}" if framed else text


def _heart_synthesis() -> tuple[Synthesizer, Synthesis]:
    """The palpitations question's claims (atrial fibrillation, warfarin, apixaban) on an engine that constrains."""
    from test_sentence_check import QUESTION, heart_kg

    kg = heart_kg()
    backend = ScriptedBackend(lambda prompt: "", constraints=CONSTRAINED, model_params=135_000_000)
    synth = Synthesizer(kg, backend, MirageConfig())
    paths = tuple(Path((s,)) for s in kg._steps(ent("Atrial fibrillation")))
    result = ChainResult(sub_question="q", question="q", answer="Atrial fibrillation; warfarin or apixaban.",
                         text="", searches=(), seed_paths=paths, trace=(), finish_reason="answered", turns=1,
                         completion_tokens=3, prompt_tokens=10, search_seconds=0.0)
    return synth, synth.analyse(QUESTION, [ent("Palpitations")], [result])


def test_every_sentence_the_wording_schema_allows_passes_the_claim_check() -> None:
    # The grammar keeps a sentence on its fact's words, so whatever the model picks within it, the claim check
    # (which still runs and decides) finds nothing unstated: no stray word, no other entity, the cited name said.
    synth, synthesis = _heart_synthesis()
    schema = synth.constraint(synthesis)
    assert schema is not None
    lead = [item["properties"]["cite"]["const"]
            for item in schema.json_schema["properties"]["lead"]["prefixItems"]]
    rng = random.Random(0)
    forms = fact_readings(synthesis)
    assert all(len(readings) == 2 for readings in forms)  # each fact also read from its other end
    for _ in range(25):
        items = [{"cite": n, "text": _grammar_sentence(forms[n - 1], rng)} for n in lead]
        extra = rng.randint(1, len(synthesis.facts))
        reply = json.dumps({"lead": items, "sentences": [{"cite": extra, "text": _grammar_sentence(
            forms[extra - 1], rng)}][: 3 - len(lead)]})
        assert schema.check(reply) is None, reply
        text, flags = synth.finish(synthesis, reply)
        support, checks = synth.review(synthesis, text, flags)
        assert "From the knowledge graph:" not in text, (reply, flags)
        assert support.verdict == "grounded", (text, [(c.text, c.reason) for c in checks if not c.supported])


def test_the_wording_schema_holds_a_sentence_to_a_reading_of_its_fact() -> None:
    synth, synthesis = _heart_synthesis()
    schema = synth.constraint(synthesis)
    assert schema is not None
    facts = synthesis.facts
    drug = facts.index(next(f for f in facts if "Warfarin" in f)) + 1

    def reply(text: str) -> str:
        return json.dumps({"lead": [{"cite": n, "text": text if n == drug else facts[n - 1]}
                                    for n in (i["properties"]["cite"]["const"] for i in
                                              schema.json_schema["properties"]["lead"]["prefixItems"])],
                           "sentences": [{"cite": drug, "text": text}]})

    for said in ("Atrial fibrillation is treated with the medication Warfarin",
                 "you may have atrial fibrillation, which can be treated with the medication warfarin",
                 "Warfarin is a medication for Atrial fibrillation"):
        assert schema.check(reply(said)) is None, said
    for unsaid in ("Atrial fibrillation is not treated with the medication Warfarin",
                   "Warfarin is treated with the medication Atrial fibrillation",  # the names swapped
                   "Atrial fibrillation is treated with the medication Apixaban",  # another fact's drug
                   "Warfarin", "you may have Warfarin"):
        assert schema.check(reply(unsaid)), unsaid
    assert all(sentence_check.fold(w) in sentence_check.CONNECTIVES for frame in FRAMES for w in frame.split())
