"""The coordinator: every piece of model work its own request, submitted as soon as its inputs exist (chains of
every question in flight together), progress events, seeds and budgets, the pipelines of the ablations, the Answer
record (JSON and HTML), and the whole loop on the demo KG with a scripted model and with the real SmolLM2."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator

import pytest
from fake_kg import FakeKG, ent

from mirage_reason.backends import ScriptedBackend
from mirage_reason.pipeline.config import PIPELINES, MirageConfig
from mirage_reason.answer import STAGES, Answer
from mirage_reason.render.html import render_answer
from mirage_reason.pipeline.coordinator import Mirage
from mirage_reason.pipeline.prompts import QUERY_BEGIN as QB
from mirage_reason.pipeline.prompts import QUERY_END as QE
from mirage_reason.pipeline.prompts import RESULT_END

FLU = "What are the symptoms of the flu?"
FEVER_WHEEZE = "I have a fever and wheezing. What is it?"


def turn_of(prompt: str) -> int:
    return prompt.rsplit("<|im_start|>assistant\n", 1)[-1].count(RESULT_END)


def question_of(prompt: str) -> str:
    found = re.findall(r"Question: (.*?)(?:<\|im_end\|>|$)", prompt, re.MULTILINE)
    return found[-1] if found else ""


def model(prompt: str) -> str:
    """A scripted model that plays every role the pipeline gives it."""
    if "Write at most" in prompt:  # decomposer
        return "1. What does a fever suggest?\n2. What does wheezing suggest?"
    if "Answers to its sub-questions" in prompt:  # no-synthesizer merge
        return "Merged: influenza or asthma."
    if "Facts:\n[1]" in prompt:  # synthesizer wording
        return "It looks like influenza [1]. See a doctor."
    if "one or two paragraphs" in prompt:  # LLM only
        return "Probably a virus."
    sub = question_of(prompt)
    if sub == FLU:  # answers at once from its seed facts
        return "Influenza causes fever and cough."
    target = "Influenza" if "fever" in sub.lower() else "Asthma"
    return f"Let me look. {QB}{target}{QE}" if turn_of(prompt) == 0 else f"It is {target.lower()}."


def chain_calls(backend: ScriptedBackend) -> list[int]:
    return [len(c.prompts) for c in backend.calls if c.stop == (QE,)]


def other_calls(backend: ScriptedBackend) -> list[int]:
    return [len(c.prompts) for c in backend.calls if c.stop != (QE,)]


def test_answer_many_runs_every_chain_of_every_question_as_its_own_requests() -> None:
    kg, backend = FakeKG(), ScriptedBackend(model)
    mirage = Mirage(kg, backend, MirageConfig(samples=2, rank_by_question=False))
    finished: list[int] = []
    answers = mirage.answer_many([FLU, FEVER_WHEEZE], on_answer=lambda i, a: finished.append(i))
    # 2 flu chains answer at once; 2 sub-questions x 2 samples search once, then answer: 2 + 4 x 2 turns
    assert chain_calls(backend) == [1] * 10
    assert other_calls(backend) == [1, 1, 1]  # decomposition of question 2, then one wording per question
    assert finished == [0, 1]
    flu, other = answers
    assert flu.sub_questions == (FLU,) and len(flu.chains) == 2
    assert other.sub_questions == ("What does a fever suggest?", "What does wheezing suggest?")
    assert [c.sub_question for c in other.chains] == ["What does a fever suggest?"] * 2 + \
        ["What does wheezing suggest?"] * 2
    assert other.text == "It looks like influenza [1]. See a doctor."
    assert not other.abstained
    # Influenza and Asthma searched once each: the samples share the search cache
    assert mirage.runner.searcher.kg_queries == 2


def test_slow_work_on_one_question_does_not_hold_up_another() -> None:
    """Question 2's decomposition is slow; question 1 is answered meanwhile, and its chains never wait for it."""
    backend = ScriptedBackend(model, delay=lambda p: 0.5 if "Write at most" in p else 0.0)
    finished: list[int] = []
    Mirage(FakeKG(), backend, MirageConfig(rank_by_question=False)).answer_many(
        [FEVER_WHEEZE, FLU], on_answer=lambda i, a: finished.append(i))
    assert finished == [1, 0]
    kinds = ["decompose" if "Write at most" in c.prompts[0] else "chain" if c.stop == (QE,) else "word"
             for c in backend.calls]
    assert kinds[:3] == ["decompose", "chain", "word"]  # question 2's chain and wording went out meanwhile


def test_progress_events_tell_each_step_as_it_happens() -> None:
    events: list[tuple[int, dict[str, object]]] = []
    answer = Mirage(FakeKG(), ScriptedBackend(model), MirageConfig(rank_by_question=False)).answer(
        FEVER_WHEEZE, on_progress=lambda i, e: events.append((i, e)))
    kinds = [e["type"] for _, e in events]
    assert kinds[:2] == ["entities", "sub_questions"] and kinds[-2:] == ["claims", "answer"]
    assert kinds.count("chain_done") == 2 and kinds.count("search_issued") == kinds.count("search") == 2
    for n, (_, event) in enumerate(events):  # each search is announced before its result, both before chain_done
        if event["type"] == "search_issued":
            result = next(e for _, e in events[n:] if e["type"] == "search" and e["chain"] == event["chain"])
            assert result["search"]["query"] == event["query"]  # type: ignore[index]
    searches = [e for _, e in events if e["type"] == "search"]
    assert sorted(s["search"]["query"] for s in searches) == ["Asthma", "Influenza"]  # type: ignore[index]
    assert all(s["search"]["results"] for s in searches)  # type: ignore[index]
    assert all(i == 0 for i, _ in events)
    json.dumps([e for _, e in events])
    assert events[-1][1]["answer"] == answer.to_json()
    started = next(e for _, e in events if e["type"] == "sub_questions")
    assert started["sub_questions"] == list(answer.sub_questions) and len(started["chains"]) == 2  # type: ignore[arg-type]


def test_no_chain_exceeds_max_chain_tokens() -> None:
    """Each turn asks for at most what is left of the chain's budget, so the limit holds exactly."""
    endless = ScriptedBackend(lambda p: "word " * 40 if QB in p.rsplit("assistant", 1)[-1] else f"x {QB}Flu{QE}")
    cfg = MirageConfig(samples=3, max_new_tokens=7, max_chain_tokens=17, max_turns=50, n_r=50, rank_by_question=False)
    answer = Mirage(FakeKG(), endless, cfg).answer(FEVER_WHEEZE)
    assert answer.chains and all(c.completion_tokens <= 17 for c in answer.chains)
    assert any(c.completion_tokens == 17 and c.finish_reason == "max_tokens" for c in answer.chains)


def test_samples_get_distinct_seeds_from_the_run_seed() -> None:
    def chain_seeds(seed: int | None) -> list[int | None]:
        backend = ScriptedBackend(model)
        Mirage(FakeKG(), backend, MirageConfig(samples=3, seed=seed, rank_by_question=False)).answer(FLU)
        return [c.params.seed for c in backend.calls if c.stop == (QE,)]

    seeds = chain_seeds(11)
    assert len(seeds) == 3 and len(set(seeds)) == 3 and chain_seeds(11) == seeds and chain_seeds(12) != seeds
    assert chain_seeds(None) == [None] * 3


def test_answer_record_and_json_shape() -> None:
    mirage = Mirage(FakeKG(), ScriptedBackend(model), MirageConfig(rank_by_question=False))
    answer = mirage.answer(FEVER_WHEEZE)
    data = json.loads(json.dumps(answer.to_json()))
    assert list(data)[:11] == ["question", "answer", "abstained", "support", "flags", "unsupported_text", "sentences",
                               "sub_questions", "claims", "conflicts", "dropped_claims"]
    assert {"chains", "notes", "timings", "tokens"} <= set(data)
    assert data["support"]["verdict"] in ("grounded", "partial", "unsupported") and data["support"]["reason"]
    assert all(set(f) == {"code", "message", "sentence"} for f in data["flags"])
    assert data["sentences"] and all(set(s) == {"text", "claims", "supported", "reason"} for s in data["sentences"])
    assert data["claims"] and all(set(c) == {"text", "citations"} for c in data["claims"])
    for citation in (c for claim in data["claims"] for c in claim["citations"]):
        assert set(citation) == {"nodes", "steps", "text", "sources"}
        assert all(set(s) == {"subject", "relation", "object", "direction"} for s in citation["steps"])
    for chain in data["chains"]:
        assert set(chain) >= {"sub_question", "searches", "answer", "trace", "kept", "kept_claims", "dropped_claims"}
        assert all(set(s) == {"query", "mode", "results"} and s["mode"] in ("anchor", "bridge")
                   for s in chain["searches"])
    assert set(STAGES) | {"total"} == set(data["timings"])
    assert data["tokens"]["total"] == sum(data["tokens"][s] for s in ("decompose", "chains", "synthesize", "llm"))
    assert data["tokens"]["chains"] > 0 and data["tokens"]["synthesize"] > 0 and data["tokens"]["prompt"] > 0
    full = answer.to_json(full=True)
    assert full["pipeline"] == "mirage" and "conflicts" in full and full["evidence"]
    assert answer.evidence_entities() >= {"KG:Influenza", "KG:Asthma"}
    assert set(answer.cited_paths()) <= set(answer.evidence_paths())


def test_conflicting_chains_are_resolved_in_the_answer() -> None:
    mirage = Mirage(FakeKG(), ScriptedBackend(model), MirageConfig(rank_by_question=False))
    answer = mirage.answer(FEVER_WHEEZE)
    # the fever chain says influenza, the wheezing chain asthma: one diagnosis wins the vote
    assert [c.kind for c in answer.conflicts] == ["diagnosis"]
    assert {c.entity.label for c in answer.claims} | {c.entity.label for c in answer.dropped} >= {"Influenza", "Asthma"}
    assert len([c for c in answer.claims if c.kind == "disease"]) == 1


def test_llm_only_never_touches_the_kg() -> None:
    kg, backend = FakeKG(), ScriptedBackend(model)
    answer = Mirage(kg, backend, MirageConfig.pipeline("llm")).answer(FEVER_WHEEZE)
    assert answer.text == "Probably a virus." and answer.chains == () and answer.claims == ()
    assert set(kg.counts.values()) == {0}
    assert len(backend.calls) == 1 and answer.tokens["llm"] > 0 and answer.pipeline == "llm"


def test_single_chain_is_one_chain_on_the_whole_question_with_no_seed() -> None:
    kg, backend = FakeKG(), ScriptedBackend(model)
    cfg = MirageConfig.pipeline("single-chain", rank_by_question=False)
    answer = Mirage(kg, backend, cfg).answer(FEVER_WHEEZE)
    assert answer.sub_questions == (FEVER_WHEEZE,) and len(answer.chains) == 1
    assert answer.text == "It is influenza." and kg.counts["retrieve"] == 0
    assert "Facts from the knowledge graph" not in backend.calls[0].prompts[0]
    assert other_calls(backend) == []  # no decomposer, no synthesizer


def test_no_decomposer_keeps_the_question_whole() -> None:
    backend = ScriptedBackend(model)
    cfg = MirageConfig.pipeline("mirage-no-decomposer", rank_by_question=False)
    answer = Mirage(FakeKG(), backend, cfg).answer(FEVER_WHEEZE)
    assert answer.sub_questions == (FEVER_WHEEZE,) and not any("Write at most" in p for p in backend.prompts)


def test_no_synthesizer_merges_the_chain_answers_with_one_prompt() -> None:
    backend = ScriptedBackend(model)
    cfg = MirageConfig.pipeline("mirage-no-synthesizer", rank_by_question=False)
    answer = Mirage(FakeKG(), backend, cfg).answer(FEVER_WHEEZE)
    merge = next(p for p in backend.prompts if "Answers to its sub-questions" in p)
    assert "Answer 1: It is influenza." in merge and "Answer 2: It is asthma." in merge
    assert answer.text == "Merged: influenza or asthma." and answer.conflicts == () and not answer.abstained


def test_nothing_relevant_in_the_kg_means_abstention_or_a_flagged_answer_by_policy() -> None:
    backend = ScriptedBackend(lambda p: "You should drink some water.")
    config = MirageConfig(no_support="abstain")
    answer = Mirage(FakeKG(), backend, config).answer("How do I fix my car?")
    assert answer.abstained and answer.text.startswith("Nothing in the question links to the knowledge graph.")
    assert "will not guess" in answer.text and answer.verdict == "unsupported" and answer.unsupported_text == ""
    assert other_calls(backend) == []  # nothing to word: no synthesis call
    answer = Mirage(FakeKG(), backend, MirageConfig()).answer("How do I fix my car?")
    # the model's text is never the graph's answer: it comes apart, under its label
    assert not answer.abstained and answer.text.startswith("No claim of the knowledge graph supports an answer")
    assert answer.unsupported_text == "You should drink some water." and answer.verdict == "unsupported"
    assert answer.flags == ("the answer is the model's own, not supported by the knowledge graph",)
    data = answer.to_json()
    assert data["flags"] == [{"code": "unsupported_text", "sentence": None,
                              "message": "the answer is the model's own, not supported by the knowledge graph"}]
    assert data["unsupported_text"] == "You should drink some water." and data["support"]["verdict"] == "unsupported"


def test_every_pipeline_runs() -> None:
    for name in PIPELINES:
        answer = Mirage(FakeKG(), ScriptedBackend(model),
                        MirageConfig.pipeline(name, rank_by_question=False)).answer(FEVER_WHEEZE)
        assert answer.pipeline == name and answer.text


def test_empty_batch() -> None:
    backend = ScriptedBackend(model)
    assert Mirage(FakeKG(), backend).answer_many([]) == [] and backend.calls == []


def test_html_view_is_self_contained_and_escaped() -> None:
    mirage = Mirage(FakeKG(), ScriptedBackend(model), MirageConfig(rank_by_question=False))
    answer = mirage.answer(FEVER_WHEEZE + " <script>alert(1)</script>")
    page = render_answer(answer)
    assert page.startswith("<!DOCTYPE html>") and "<script>" not in page and "&lt;script&gt;" in page
    assert "src=" not in page and "href=" not in page
    assert "Influenza" in page and "Chain 1" in page
    # how grounded it is comes first, before the answer
    assert page.index('id="verdict"') < page.index('class="answer"') and answer.support.reason in page


# -- the demo KG -------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_kg() -> Iterator[object]:
    from mirage_kg import KnowledgeGraph, demo_store

    yield KnowledgeGraph(demo_store())


DEMO_Q = "I have palpitations and feel dizzy and anxious. What could it be?"


def test_demo_kg_with_a_scripted_model(demo_kg: object) -> None:
    def demo_model(prompt: str) -> str:
        if "Write at most" in prompt:
            return "1. What do palpitations suggest?\n2. What does dizziness suggest?"
        if "Facts:\n[1]" in prompt:
            return "Panic disorder matches these symptoms [1]."
        if turn_of(prompt) == 0:
            return f"{QB}Panic disorder||Palpitations{QE}"
        return "It could be panic disorder."

    backend = ScriptedBackend(demo_model)
    answer = Mirage(demo_kg, backend, MirageConfig(n_r=2)).answer(DEMO_Q)
    assert [e.label for e in answer.question_entities][:2] == ["Palpitations", "Dizziness"]
    assert answer.chains[0].searches[0].mode == "bridge" and answer.chains[0].searches[0].paths
    assert answer.chains[0].seed_paths  # retrieve() seeded it
    assert "Panic disorder" in {c.entity.label for c in answer.claims}
    assert all(demo_kg.path_exists(p) for p in answer.cited_paths())  # type: ignore[attr-defined]
    assert answer.text == "Panic disorder matches these symptoms [1]."


@pytest.mark.llm
def test_whole_loop_with_smollm2(demo_kg: object, smollm2_backend: object) -> None:
    cfg = MirageConfig(n_q=2, n_r=2, max_new_tokens=48, max_chain_tokens=64, max_turns=3,
                       decomposer_max_new_tokens=48, synthesizer_max_new_tokens=48, seed_facts=8, seed=0)
    mirage = Mirage(demo_kg, smollm2_backend, cfg)  # type: ignore[arg-type]  # the fixture is typed object
    answers = mirage.answer_many([DEMO_Q, "What medication treats asthma?"])
    for answer in answers:
        assert isinstance(answer, Answer) and answer.text.strip()
        assert answer.chains and all(c.turns >= 1 and c.completion_tokens > 0 for c in answer.chains)
        assert all(c.completion_tokens <= cfg.max_chain_tokens for c in answer.chains)
        assert answer.tokens["chains"] > 0 and answer.timings["chains"] > 0
        assert all(demo_kg.path_exists(p) for p in answer.cited_paths())  # type: ignore[attr-defined]
        json.dumps(answer.to_json())
    assert answers[0].chains[0].seed_paths


def test_chains_start_from_all_of_the_retrievers_evidence_split_between_them() -> None:
    kg, backend = FakeKG(), ScriptedBackend(model)
    mirage = Mirage(kg, backend, MirageConfig(seed_facts=1, rank_by_question=False))
    answer = mirage.answer(FEVER_WHEEZE)
    whole = kg.retrieve(FEVER_WHEEZE).evidence
    seeds = [set(c.seed_paths) for c in answer.chains]
    assert len(seeds) == 2 and set(e.path for e in whole) <= seeds[0] | seeds[1]  # nothing of it is lost
    assert not seeds[0] <= seeds[1] and not seeds[1] <= seeds[0]  # split, not copied
    # so the pipeline's evidence is at least the retriever's
    assert {n.id for e in whole for n in e.path.nodes} <= answer.evidence_entities()


def test_split_evidence_by_sub_question_entities() -> None:
    from mirage_reason.pipeline.coordinator import split_evidence

    kg = FakeKG()
    flu, asthma = kg.retrieve("flu").evidence, kg.retrieve("asthma").evidence
    whole = flu + asthma
    shares = split_evidence(whole, [flu, asthma], [{ent("Influenza").iri}, {ent("Asthma").iri}], own_facts=0)
    assert shares == [flu, asthma]
    [single] = split_evidence(whole, [whole], [set()], own_facts=5)
    assert single == whole


def test_the_readme_question_gets_the_drugs_the_kg_links_to_the_diagnosis(demo_kg: object) -> None:
    question = ("I have palpitations, feel dizzy and short of breath. What could it be and what should I take?")

    def demo_model(prompt: str) -> str:
        if "Write at most" in prompt:
            return "1. What do palpitations suggest?\n2. What does dizziness suggest?"
        if "Facts:\n[1]" in prompt:
            return "You may have panic disorder."  # names no medication: the claims are listed instead
        return "It could be panic disorder."

    answer = Mirage(demo_kg, ScriptedBackend(demo_model), MirageConfig(n_r=0)).answer(question)
    drugs = {c.entity.label for c in answer.claims if c.kind == "drug"}
    assert {"Sertraline", "Fluoxetine"} <= drugs and all(d in answer.text for d in drugs)
    assert all(demo_kg.path_exists(p) for p in answer.cited_paths())  # type: ignore[attr-defined]
    # said of the text shown, which names them: the wording left them out and was replaced
    assert any("wording left out" in f and "cited claims instead" in f for f in answer.flags)
    assert not any("leaves out" in f for f in answer.flags)


def test_a_multiple_choice_question_votes_over_choice_samples_chains() -> None:
    """A letter is a discrete answer: the question gets ``choice_samples`` sampled chains per sub-question and the
    answer is their majority letter, not one sample's coin toss; a free-text question keeps ``samples``."""
    question = "Which drug treats the flu?\n\nOptions:\nA. Salbutamol\nB. Oseltamivir\n"
    picks = itertools.cycle(["Answer: A", "Answer: B", "Answer: B", "Answer: A", "Answer: B"])

    def voter(prompt: str) -> str:
        if "Write at most" in prompt:  # decomposer
            return "1. Which drug treats the flu?"
        if "Start with 'Answer" in prompt:  # the writer
            return "Answer: A"
        return next(picks)  # the chains

    config = MirageConfig(rank_by_question=False, n_r=0, seed=0, choice_samples=5)
    answer = Mirage(FakeKG(), ScriptedBackend(voter), config).answer(question)
    assert len(answer.chains) == 5 * len(answer.sub_questions)
    assert answer.text.startswith("Answer: B. Oseltamivir")  # 3 of every 5 chains pick B; the writer's A loses
    free = Mirage(FakeKG(), ScriptedBackend(model), config).answer(FLU)
    assert len(free.chains) == 1
    assert MirageConfig(choice_samples=5).pipeline("single-chain").samples_for(question) == 1
