"""The pipeline on an engine that constrains output, end to end with a scripted model that plays one (its replies
must fit each request's schema, or the double fails them): the decomposition, the chains' actions, the cited
wording and the multiple-choice letter; and the rendering of a structured reply into cited sentences."""

from __future__ import annotations

import json
import re

from fake_kg import FakeKG

from mirage_reason.backends import ScriptedBackend
from mirage_reason.config import MirageConfig
from mirage_reason.coordinator import Mirage
from mirage_reason.wording import render

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
    lead = re.findall(r'\{"text": "([^"]+) is \.\.\.", "cite": (\d+)\}', prompt)
    reply: dict[str, object] = {"sentences": [{"text": facts["1"], "cite": 1}]}
    if lead:  # it opens each with the entity, then says the fact
        # (the fever-and-wheezing question: the lead fact is Asthma's wheezing)
        reply = {"lead": [{"text": f"{label} is likely; wheezing is one of its symptoms", "cite": int(n)}
                          for label, n in lead], "sentences": []}
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


def test_the_whole_loop_runs_on_structured_output() -> None:
    backend = ScriptedBackend(small_model, constraints=CONSTRAINED, model_params=135_000_000)
    mirage = Mirage(FakeKG(), backend, MirageConfig(rank_by_question=False, seed=0))  # type: ignore[arg-type]
    answer = mirage.answer(QUESTION)
    data = answer.to_json()
    assert data["decomposition"] == {"source": "model", "constrained": True, "note": "",
                                     "origins": ["model", "model"]}
    assert data["sub_questions"] == ["What does fever point to?", "What does wheezing point to?"]
    assert all(c["mode"] == "structured" and c["search_count"] >= 1 for c in data["chains"])
    assert all(call.constraint is not None for call in backend.calls)  # every request held to its schema
    # the wording: every sentence ends with its citation, and it survived the claim check
    assert re.fullmatch(r"(?:[^.\[\]]+ \[\d+\]\. ?)+", answer.text.split("\n\n")[0]), answer.text
    assert "From the knowledge graph:" not in answer.text  # not the fallback
    # the writer's schema: a lead sentence on the diagnosis's fact, opening with its name and saying something
    wording = backend.calls[-1].constraint
    lead = wording.json_schema["properties"]["lead"]["prefixItems"]
    assert [item["properties"]["cite"] for item in lead] == [{"const": 1}]
    bare = json.dumps({"lead": [{"text": "Asthma", "cite": 1}], "sentences": []})
    dots = json.dumps({"lead": [{"text": "Asthma ................", "cite": 1}], "sentences": []})
    said = json.dumps({"lead": [{"text": "Asthma causes the wheezing", "cite": 1}], "sentences": []})
    other = json.dumps({"lead": [{"text": "Wheezing comes from asthma", "cite": 1}], "sentences": []})
    assert wording.check(said) is None and wording.check(bare) and wording.check(other) and wording.check(dots)


def test_a_multiple_choice_letter_is_a_constrained_choice() -> None:
    backend = ScriptedBackend(small_model, constraints=CONSTRAINED, model_params=135_000_000)
    mirage = Mirage(FakeKG(), backend, MirageConfig(rank_by_question=False, seed=0, choice_samples=1))  # type: ignore[arg-type]
    question = "I wheeze and cough. What is it?\nOptions:\nA. Influenza\nB. Asthma\nC. Migraine"
    answer = mirage.answer(question)
    chain_schemas = [c.constraint.json_schema for c in backend.calls if "reply with one JSON action" in c.prompts[0]]
    answers = [o for s in chain_schemas for o in s.get("anyOf", [s]) if o["properties"]["action"]["const"] ==
               "answer"]
    assert answers and all(o["properties"]["choice"] == {"enum": ["A", "B", "C"]} for o in answers)
    assert answer.text.startswith("Answer: B. Asthma")
