"""The chain runner with a scripted model: the search-block parser, result insertion, the N_r budget, the caches,
turn and token limits (never exceeded, each turn asks for at most what is left), garbled output, seeds, and the
scheduling (every turn its own request; a chain submits its next turn as soon as its search returns)."""

from __future__ import annotations

import re
import time
from concurrent.futures import Future

import pytest
from fake_kg import FakeKG, ent

from mirage_reason.backends import Completion, CompletionRequest, ScriptedBackend
from mirage_reason.pipeline.chain import ChainRunner, ChainSpec, extract_answer, parse_search_block
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.prompts import QUERY_BEGIN as QB
from mirage_reason.pipeline.prompts import QUERY_END as QE
from mirage_reason.pipeline.prompts import RESULT_BEGIN, RESULT_END


def turn_of(prompt: str) -> int:
    """How many result blocks the prompt already holds (= which turn of its chain this is)."""
    return prompt.rsplit("<|im_start|>assistant\n", 1)[-1].count(RESULT_END)


def scripted(turns: list[str], **kwargs: object) -> ScriptedBackend:
    """Every chain replays ``turns``: turn i gets turns[i] (the last one repeats)."""
    return ScriptedBackend(lambda p: turns[min(turn_of(p), len(turns) - 1)], **kwargs)


def run(kg: FakeKG, backend: ScriptedBackend, specs: list[ChainSpec], **cfg: object):
    runner = ChainRunner(kg, backend, MirageConfig(**{"rank_by_question": False, **cfg}))
    return runner, runner.run(specs)


# -- parser -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("region, mode, terms", [
    (f"I should look it up. {QB}Influenza", "anchor", ("Influenza",)),
    (f"{QB}  \"fever\". ", "anchor", ("fever",)),
    (f"{QB}Influenza||Cough", "bridge", ("Influenza", "Cough")),
    (f"{QB} Influenza || [Cough] ", "bridge", ("Influenza", "Cough")),
    (f"{QB}old{RESULT_END} text {QB}Asthma", "anchor", ("Asthma",)),  # the last block counts
    (f"{QB}Influenza||", "anchor", ("Influenza",)),
])
def test_parse_usable_blocks(region: str, mode: str, terms: tuple[str, ...]) -> None:
    block = parse_search_block(region)
    assert block.problem is None
    assert (block.mode, block.terms) == (mode, terms)


def test_parse_three_terms_and_same_twice_are_noted() -> None:
    block = parse_search_block(f"{QB}a thing||b thing||c thing")
    assert block.terms == ("a thing", "b thing") and block.mode == "bridge" and "first two" in (block.note or "")
    block = parse_search_block(f"{QB}Flu||flu")
    assert block.mode == "anchor" and block.terms == ("Flu",)


@pytest.mark.parametrize("region, problem", [
    ("no opening tag at all", "without"),
    (f"{QB}   ", "empty"),
    (f"{QB} || ", "empty"),
    (f"{QB}" + "word " * 100, "too long"),
    (f"{QB}line one\nline two\nline three", "too long"),
])
def test_parse_garbled_blocks(region: str, problem: str) -> None:
    block = parse_search_block(region)
    assert block.problem is not None and problem in block.problem and block.terms == ()


def test_extract_answer() -> None:
    text = f"thinking {QB}Flu{QE}\n\n{RESULT_BEGIN}\nInfluenza has symptom Fever\n{RESULT_END}\n\nIt is the flu."
    assert extract_answer(text) == "It is the flu."
    assert extract_answer("<think>hmm, maybe cold</think>\n\nFinal answer: influenza") == "influenza"
    assert extract_answer(f"Answer: rest well. {QB}Influenza") == "rest well."  # a dangling block is dropped
    trailing = f"Reasoning here.\n\n{QB}x{QE}\n\n{RESULT_BEGIN}\nfacts\n{RESULT_END}\n\n"
    assert extract_answer(trailing) == "Reasoning here."
    assert extract_answer("") == ""


# -- the loop ---------------------------------------------------------------------------------------------------------

def test_search_result_is_inserted_and_the_chain_continues() -> None:
    kg = FakeKG()
    backend = scripted([f"Let me check. {QB}flu{QE}", "Influenza causes fever and cough."])
    _, [result] = run(kg, backend, [ChainSpec("What causes fever?", "What causes fever?")])
    assert result.answer == "Influenza causes fever and cough."
    assert result.finish_reason == "answered" and result.turns == 2
    [search] = result.searches
    assert search.mode == "anchor" and search.entities == (ent("Influenza"),) and search.terms == ("flu",)
    assert "Influenza has symptom Fever" in search.lines
    second_prompt = backend.calls[1].prompts[0]
    assert second_prompt.endswith(f"{RESULT_END}\n\n") and "Influenza has symptom Fever" in second_prompt
    assert backend.calls[0].stop == (QE,)
    assert [e["event"] for e in result.trace] == ["generate", "search", "generate", "finish"]
    assert result.to_json()["searches"][0]["results"][0]["steps"][0]["direction"] in ("forward", "backward")


def test_a_server_that_does_not_say_which_stop_fired_still_gets_its_searches_run() -> None:
    # llama.cpp's server ends on "stop" for both EOS and a stop string and names neither: a block left open at the
    # end of the text is then the closed search, and text that ends outside a block is the answer.
    kg = FakeKG()
    backend = scripted([f"Let me check. {QB}flu{QE}", "Influenza causes fever."], silent_stops=True)
    _, [result] = run(kg, backend, [ChainSpec("What causes fever?")])
    first = backend.generate(["x"], stop=[QE], params=backend.calls[0].params)  # what the chain was handed
    assert first[0].stop is None and first[0].stop_unknown
    assert [s.terms for s in result.searches] == [("flu",)] and result.answer == "Influenza causes fever."
    assert result.finish_reason == "answered" and result.turns == 2
    # a server that reports its stops is taken at its word: an open block that EOS ended is garbled, not run
    _, [known] = run(kg, scripted([f"It may be the flu. {QB}Influenza and then some"]), [ChainSpec("q")])
    assert known.searches == () and known.answer == "It may be the flu."


def test_bridge_mode_returns_paths() -> None:
    kg = FakeKG()
    backend = scripted([f"{QB}Ibuprofen||stomach ulcer{QE}", "Avoid it."])
    _, [result] = run(kg, backend, [ChainSpec("q")])
    [search] = result.searches
    assert search.mode == "bridge" and [e.label for e in search.entities] == ["Ibuprofen", "Peptic ulcer disease"]
    assert search.lines[0] == "Ibuprofen is contraindicated in Peptic ulcer disease"
    assert all(p.nodes[0].label == "Ibuprofen" and p.nodes[-1].label == "Peptic ulcer disease" for p in search.paths)


def test_bridge_with_one_unknown_side_falls_back_to_anchor() -> None:
    kg = FakeKG()
    backend = scripted([f"{QB}Asthma||xyzzy plugh{QE}", "done"])
    _, [result] = run(kg, backend, [ChainSpec("q")])
    [search] = result.searches
    assert search.entities == (ent("Asthma"),) and "not in the knowledge graph" in (search.note or "")
    assert search.mode == "anchor"  # what actually ran
    assert "Asthma has symptom Wheezing" in search.lines


def test_unknown_entity_is_answered_with_a_note_and_counts() -> None:
    kg = FakeKG()
    backend = scripted([f"{QB}zzzqqq{QE}", "I do not know."])
    _, [result] = run(kg, backend, [ChainSpec("q")], n_r=3)
    [search] = result.searches
    assert search.entities == () and search.paths == () and "No knowledge-graph entity matches" in (search.note or "")
    assert "No knowledge-graph entity matches 'zzzqqq'" in backend.calls[1].prompts[0]
    assert result.answer == "I do not know."


def test_fuzzy_match_below_threshold_does_not_link() -> None:
    kg = FakeKG()
    runner = ChainRunner(kg, scripted(["x"]), MirageConfig(match_threshold=0.7))
    assert runner.searcher is not None
    assert runner.searcher.resolve("Influensa") == ent("Influenza")  # ratio ~0.89
    assert runner.searcher.resolve("Inf") is None  # nothing scores 0.7


# -- budgets ----------------------------------------------------------------------------------------------------------

def test_search_budget_is_enforced_and_announced() -> None:
    kg = FakeKG()
    turns = [f"{QB}Influenza{QE}", f"{QB}Asthma{QE}", f"{QB}Migraine{QE}", f"{QB}Hypertension{QE}", "Answer: rest."]
    backend = scripted(turns)
    _, [result] = run(kg, backend, [ChainSpec("q")], n_r=2)
    assert [s.entities[0].label for s in result.searches] == ["Influenza", "Asthma"]
    assert kg.counts["anchor"] == 2
    assert "That was your last search of 2" in backend.calls[2].prompts[0]
    spent = [e for e in result.trace if e["event"] == "budget_spent"]
    assert [e["query"] for e in spent] == ["Migraine", "Hypertension"]
    assert "search budget of 2 searches is spent" in backend.calls[3].prompts[0]
    assert result.answer == "rest."


def test_zero_budget_chain_is_told_searching_is_spent() -> None:
    kg = FakeKG()
    backend = scripted([f"{QB}Influenza{QE}", "ok"])
    _, [result] = run(kg, backend, [ChainSpec("q")], n_r=0)
    assert result.searches == () and kg.counts["anchor"] == 0
    assert QB not in backend.calls[0].prompts[0].split("<|im_start|>user")[0]  # not advertised in the system turn


def test_turn_limit() -> None:
    kg = FakeKG()
    backend = ScriptedBackend(lambda p: f"again {QB}Influenza{QE}")
    _, [result] = run(kg, backend, [ChainSpec("q")], max_turns=4, n_r=10)
    assert result.turns == 4 and result.finish_reason == "max_turns"
    assert len(backend.calls) == 4
    assert result.trace[-2]["event"] == "garbled" and "turns limit" in result.trace[-2]["problem"]


def test_token_limit_and_step_cap() -> None:
    kg = FakeKG()
    backend = ScriptedBackend(lambda p: "word " * 50)  # never stops by itself
    _, [result] = run(kg, backend, [ChainSpec("q")], max_new_tokens=10, max_chain_tokens=25, max_turns=50)
    assert result.finish_reason == "max_tokens"
    assert [c.params.max_new_tokens for c in backend.calls] == [10, 10, 5]
    assert result.completion_tokens == 25 and result.turns == 3


class PiecesBackend(ScriptedBackend):
    """Hands out fixed completions with their finish reasons, as a model cut by max_new_tokens would."""

    def __init__(self, pieces: list[Completion]) -> None:
        super().__init__(["unused"], cycle=True)
        self.pieces = iter(pieces)

    def submit(self, request: CompletionRequest) -> Future[Completion]:
        super().submit(request)  # records the call
        future: Future[Completion] = Future()
        future.set_result(next(self.pieces))
        return future


def test_length_cut_continues_the_same_text() -> None:
    kg = FakeKG()
    # the first step runs out inside the block; the next step closes it: the block spans two steps
    backend = PiecesBackend([Completion(f"thinking {QB}Influ", 5, 2, "length"),
                             Completion("enza", 9, 1, "stop", QE), Completion("It is influenza.", 20, 3, "stop")])
    runner = ChainRunner(kg, backend, MirageConfig(rank_by_question=False, max_new_tokens=3))
    [result] = runner.run([ChainSpec("q")])
    assert [s.entities[0].label for s in result.searches] == ["Influenza"]
    assert result.answer == "It is influenza." and result.turns == 3 and result.completion_tokens == 6


# -- caches -----------------------------------------------------------------------------------------------------------

def test_cache_is_shared_between_chains_and_repeats_are_not_rerun() -> None:
    kg = FakeKG()
    backend = scripted([f"{QB}Influenza{QE}", f"{QB}flu{QE}", "done"])
    _, results = run(kg, backend, [ChainSpec("q", tag=i) for i in range(3)], n_r=2)
    assert kg.counts["anchor"] == 1  # three chains, the same entity, one graph query
    for result in results:
        first, again = result.searches
        assert first.counted and again.counted and again.cached  # a repeat is not rerun, but it is a search
        assert "already ran this search" in (again.note or "")
        assert result.answer == "done" and result.flags == ()
    assert kg.counts["link_one"] == 2  # "Influenza" and "flu" each linked once for all chains


def test_a_repeat_spends_the_search_budget() -> None:
    kg = FakeKG()
    backend = scripted([f"{QB}Influenza{QE}", f"{QB}flu{QE}", "done"])
    _, [result] = run(kg, backend, [ChainSpec("q")], n_r=1)
    assert len(result.searches) == 1 and result.answer == "done"
    assert [e["event"] for e in result.trace].count("budget_spent") == 1 and result.flags == ("budget_spent",)
    assert "search budget of 1 searches is spent" in backend.calls[2].prompts[0]


def test_a_model_repeating_one_search_forever_is_bounded_and_flagged() -> None:
    kg = FakeKG()
    backend = scripted([f"Let me check. {QB}Influenza{QE}"])  # every turn, the same search
    _, [result] = run(kg, backend, [ChainSpec("q")], n_r=3, max_turns=8, max_new_tokens=16, max_chain_tokens=400)
    assert result.finish_reason == "max_turns" and result.turns == 8 and len(backend.calls) == 8
    assert len(result.searches) == 3 and kg.counts["anchor"] == 1  # n_r bounds the blocks, repeats included
    assert set(result.flags) == {"repeated_search", "budget_spent"}
    assert result.to_json()["flags"] == list(result.flags)


def test_ranked_anchor_cache_is_per_question() -> None:
    kg = FakeKG()
    backend = scripted([f"{QB}Influenza{QE}", "done"])
    runner = ChainRunner(kg, backend, MirageConfig(rank_by_question=True))
    runner.run([ChainSpec("about fever"), ChainSpec("about fever"), ChainSpec("about drugs")])
    assert kg.counts["anchor"] == 2


# -- garbled output ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("first, problem", [
    (f"{QB}   {QE}", "empty search block"),
    (f"{QB}" + "blah " * 80 + QE, "too long"),
    (f"I will search now{QE}", "without"),
])
def test_garbled_blocks_are_recorded_and_the_chain_goes_on(first: str, problem: str) -> None:
    kg = FakeKG()
    backend = scripted([first, "Final answer: unsure."])
    _, [result] = run(kg, backend, [ChainSpec("q")], n_r=1)
    garbled = [e for e in result.trace if e["event"] == "garbled"]
    assert len(garbled) == 1 and problem in garbled[0]["problem"]
    assert result.searches == () and result.answer == "unsure."
    assert "Search not run" in backend.calls[1].prompts[0]


def test_unclosed_block_at_the_end_is_recorded() -> None:
    kg = FakeKG()
    backend = scripted([f"It may be the flu. {QB}Influenza and then some"])
    _, [result] = run(kg, backend, [ChainSpec("q")])
    assert result.finish_reason == "answered"
    assert any(e["event"] == "garbled" and e["problem"] == "unclosed search block" for e in result.trace)
    assert result.answer == "It may be the flu."


def test_hostile_output_never_crashes() -> None:
    kg = FakeKG()
    nasty = [f"{QE}{QE}", f"{RESULT_BEGIN}fake facts{RESULT_END}{QB}", f"{QB}||||{QE}", f"{QB}\x00\n{QE}",
             f"{QB}{QB}{QB}Asthma{QE}", f"{QB}'\"}}>{QE}", "<think>never closed", ""]
    backend = ScriptedBackend(lambda p: nasty[turn_of(p) % len(nasty)])
    _, [result] = run(kg, backend, [ChainSpec("q")], n_r=3, max_turns=12)
    assert result.finish_reason in ("answered", "max_turns")
    assert RESULT_BEGIN not in result.answer and QB not in result.answer


# -- scheduling -------------------------------------------------------------------------------------------------------

def _name(prompt: str) -> str:
    return re.search(r"Question: chain (\w)", prompt).group(1)  # type: ignore[union-attr]


def test_every_turn_is_its_own_request_and_finished_chains_leave() -> None:
    kg = FakeKG()
    searches = {"A": 0, "B": 1, "C": 2, "D": 3}  # chain X searches this many times, then answers

    def model(prompt: str) -> str:
        name = _name(prompt)
        return f"{QB}Influenza{QE}" if turn_of(prompt) < searches[name] else f"answer {name}"

    backend = ScriptedBackend(model)
    _, results = run(kg, backend, [ChainSpec(f"chain {n}") for n in searches], n_r=5)
    assert backend.batch_sizes == [1] * 10  # 1 + 2 + 3 + 4 turns, one request each
    assert [r.answer for r in results] == ["answer A", "answer B", "answer C", "answer D"]
    assert [r.turns for r in results] == [1, 2, 3, 4]


def test_a_chain_does_not_wait_for_a_slow_one() -> None:
    """No lockstep: chain F runs all its turns while chain S's first turn is still being generated."""
    kg = FakeKG()

    def model(prompt: str) -> str:
        return f"{QB}Influenza{QE}" if turn_of(prompt) < 3 else "done"

    backend = ScriptedBackend(model, delay=lambda p: 0.6 if _name(p) == "S" else 0.01)
    started = time.perf_counter()
    _, results = run(kg, backend, [ChainSpec("chain S"), ChainSpec("chain F")], n_r=5)
    order = [_name(c.prompts[0]) for c in backend.calls]
    assert order[:5] == ["S", "F", "F", "F", "F"]  # F's four turns went out before S's second
    assert [r.turns for r in results] == [4, 4]
    assert time.perf_counter() - started < 4 * 0.6 + 1.0  # S's four turns, F hidden behind them


def test_each_turn_asks_for_at_most_the_remaining_budget_and_the_chain_never_exceeds_it() -> None:
    kg = FakeKG()
    backend = ScriptedBackend(lambda p: "x " * 30 if turn_of(p) == 0 and QB not in p else f"{QB}Flu{QE}")
    runner = ChainRunner(kg, backend, MirageConfig(max_new_tokens=100, max_chain_tokens=40, n_r=50, max_turns=50))
    chain = runner.start(ChainSpec("a"))
    chain.completion_tokens = 30  # as if it had already generated 30
    assert chain.next_request().params.max_new_tokens == 10
    [result] = runner.run([ChainSpec("b")])
    assert result.completion_tokens <= 40 and result.finish_reason == "max_tokens"
    assert all(c.params.max_new_tokens <= 40 - used for c, used in
               zip(backend.calls, [0, *[t["tokens"] for t in result.trace if t["event"] == "generate"]]))


def test_a_backend_that_overshoots_max_tokens_is_an_error() -> None:
    from mirage_reason.errors import ReasonerError

    backend = PiecesBackend([Completion("far too long", 5, 50, "length")])
    runner = ChainRunner(FakeKG(), backend, MirageConfig(max_new_tokens=10))
    with pytest.raises(ReasonerError, match="does not honour max tokens"):
        runner.run([ChainSpec("q")])


def test_samples_of_one_sub_question_get_distinct_reproducible_seeds() -> None:
    def seeds(run_seed: int) -> list[int | None]:
        backend = scripted([f"{QB}Influenza{QE}", "done"])
        specs = [ChainSpec("q", tag=(0, 0, s)) for s in range(3)]
        run(FakeKG(), backend, specs, seed=run_seed)
        return [c.params.seed for c in backend.calls]

    first = seeds(7)
    assert len(first) == 6 and len(set(first)) == 6  # 3 samples x 2 turns, all different
    assert seeds(7) == first and seeds(8) != first


def test_seed_evidence_is_in_the_prompt_and_in_the_evidence() -> None:
    kg = FakeKG()
    seed = kg.retrieve("I have the flu").evidence
    backend = scripted(["It is influenza."])
    _, [result] = run(kg, backend, [ChainSpec("What is it?", "I have the flu. What is it?", seed[:2])])
    prompt = backend.calls[0].prompts[0]
    assert "Facts from the knowledge graph:\n- Influenza has symptom Fever" in prompt
    assert "This is part of a larger question: I have the flu. What is it?" in prompt
    assert len(result.seed_paths) == 2 and set(result.seed_paths) <= set(result.evidence_paths)
    assert result.trace[0]["event"] == "seed"


def test_sampling_settings_and_seed_reach_the_backend() -> None:
    kg = FakeKG()
    backend = scripted(["done"])
    run(kg, backend, [ChainSpec("q")], seed=7)
    params = backend.calls[0].params
    assert (params.temperature, params.top_p, params.top_k, params.repetition_penalty) == (0.7, 0.8, 20, 1.05)
    assert params.seed is not None
    backend = scripted(["done"])
    run(kg, backend, [ChainSpec("q")])
    assert backend.calls[0].params.seed is None  # no run seed: the engine's own randomness


def test_seed_facts_of_one_entity_and_relation_share_a_line() -> None:
    from mirage_kg import Path
    from mirage_reason.pipeline.prompts import fact_lines

    kg = FakeKG()
    paths = [e.path for e in kg.retrieve("I have the flu").evidence]
    lines = fact_lines(paths)
    assert lines[0] == "Influenza has symptom Fever, Cough and Fatigue"
    assert "Influenza is treated with the medication Oseltamivir and Ibuprofen" in lines
    backward = [p for p in (Path((s,)) for s in kg._steps(ent("Cough")))]
    assert fact_lines(backward) == ["Cough is a symptom of Influenza, Common cold and Asthma"]


def test_sample_seeds_count_up_from_the_first_sample_at_every_turn() -> None:
    """Sample i of a sub-question has sample 0's seed plus i (llama.cpp's server seeds the n completions of one
    request that way, so shared and separate requests sample the same), and its first turns are submitted at once."""
    backend = scripted([f"{QB}Influenza{QE}", "done"])
    run(FakeKG(), backend, [ChainSpec("q", tag=(0, 0), sample=s) for s in range(3)], seed=7)
    first, second = [c.params.seed for c in backend.calls[:3]], [c.params.seed for c in backend.calls[3:]]
    assert first == [first[0], first[0] + 1, first[0] + 2]
    later = sorted(second)
    assert later == [later[0], later[0] + 1, later[0] + 2] and not set(later) & set(first)


# -- structured chains (constrained JSON actions) ---------------------------------------------------------------------

CONSTRAINED = ("json_schema", "choice")


def _actions(turns: list[dict[str, object]]) -> ScriptedBackend:
    """A constraining engine whose chains choose ``turns`` in order (the last one repeats); it plays a small model,
    so ``structured="auto"`` gives it structured chains."""
    import json

    def reply(prompt: str) -> str:
        done = prompt.rsplit("<|im_start|>assistant\n", 1)[-1].count('{"action"')
        return json.dumps(turns[min(done, len(turns) - 1)])

    return ScriptedBackend(reply, model_params=135_000_000, constraints=CONSTRAINED)


def _schema_actions(schema: dict) -> dict[str, dict]:
    options = schema.get("anyOf", [schema])
    return {o["properties"]["action"]["const"]: o for o in options}


def test_structured_chain_searches_through_the_same_searcher_and_answers() -> None:
    kg = FakeKG()
    backend = _actions([{"action": "anchor", "entity": "Influenza"},
                        {"action": "bridge", "entity": "Influenza", "other": "Oseltamivir"},
                        {"action": "answer", "answer": "Influenza; oseltamivir treats it."}])
    runner, [result] = run(kg, backend, [ChainSpec("What treats the flu?")], n_r=3)
    assert result.mode == "structured" and result.finish_reason == "answered" and result.turns == 3
    assert result.answer == "Influenza; oseltamivir treats it."
    assert [s.mode for s in result.searches] == ["anchor", "bridge"] and kg.counts["anchor"] == 1
    assert [a["action"] for a in result.actions] == ["anchor", "bridge", "answer"]
    assert RESULT_BEGIN in result.text and "Influenza has symptom Fever" in result.text
    first, second, _ = (call.constraint.json_schema for call in backend.calls)
    # the first turn must search (min_searches=1), only on what the chain can reach: the question's entity
    assert set(_schema_actions(first)) == {"anchor"} and _schema_actions(first)["anchor"]["properties"]["entity"][
        "enum"] == ["Influenza"]
    # ... then the results' entities are reachable too, and the chain may answer
    grown = _schema_actions(second)["anchor"]["properties"]["entity"]["enum"]
    assert {"Influenza", "Fever", "Oseltamivir"} <= set(grown) and set(_schema_actions(second)) == {
        "anchor", "bridge", "answer"}
    data = result.to_json()
    assert data["mode"] == "structured" and data["search_count"] == 2 and len(data["actions"]) == 3


def test_structured_chain_cannot_name_what_it_cannot_reach() -> None:
    from mirage_reason.errors import BackendError

    backend = _actions([{"action": "anchor", "entity": "Asthma"}])  # not in the question, no seed fact names it
    with pytest.raises(BackendError, match="outside its request's json_schema constraint"):
        run(FakeKG(), backend, [ChainSpec("What treats the flu?")], n_r=3)


def test_structured_chain_budget_leaves_only_the_answer() -> None:
    backend = _actions([{"action": "anchor", "entity": "Influenza"}, {"action": "anchor", "entity": "Fever"},
                        {"action": "answer", "answer": "It is the flu."}])
    _, [result] = run(FakeKG(), backend, [ChainSpec("What treats the flu?")], n_r=2)
    assert len(result.searches) == 2 and result.answer == "It is the flu."
    last = backend.calls[-1].constraint.json_schema
    assert set(_schema_actions(last)) == {"answer"}  # n_r spent: the grammar only allows the answer
    assert "last search of 2" in backend.calls[-1].prompts[0]


def test_structured_chain_cut_by_its_tokens_is_flagged_and_keeps_what_it_wrote() -> None:
    backend = ScriptedBackend(lambda p: '{"action": "answer", "answer": "Influenza is likely and rest helps a lot '
                                        'more words here"}', model_params=135_000_000,
                              constraints=CONSTRAINED)
    _, [result] = run(FakeKG(), backend, [ChainSpec("What is it?")], n_r=0, max_new_tokens=8, max_chain_tokens=8)
    assert result.finish_reason == "max_tokens" and "unusable_action" in result.flags
    assert result.answer.startswith("Influenza is likely")
    assert any(e["event"] == "garbled" and "max tokens" in e["problem"] for e in result.trace)


def test_a_structured_answer_at_its_longest_fits_its_turn_at_two_characters_a_token() -> None:
    # SmolLM2 writes medical words in short tokens: an answer the schema lets run to three characters a token
    # was cut by its max tokens (an unusable action) on 3 of 61 chains
    backend = _actions([{"action": "anchor", "entity": "Influenza"}, {"action": "answer", "answer": "The flu."}])
    run(FakeKG(), backend, [ChainSpec("What treats the flu?")], n_r=2, max_new_tokens=96, max_chain_tokens=192)
    call = backend.calls[-1]
    answer = _schema_actions(call.constraint.json_schema)["answer"]["properties"]["answer"]
    assert answer["maxLength"] / 2 + 12 <= call.params.max_new_tokens


def test_markers_stay_for_large_models_and_engines_without_constraints() -> None:
    turns = [f"{QB}Influenza{QE}", "done"]
    for backend in (scripted(turns, model_params=32_000_000_000, constraints=CONSTRAINED),
                    scripted(turns, model_params=135_000_000),
                    scripted(turns, constraints=CONSTRAINED)):  # large, unconstrainable, size unknown
        _, [result] = run(FakeKG(), backend, [ChainSpec("q")], n_r=2)
        assert result.mode == "markers" and result.answer == "done" and len(result.searches) == 1
        assert all(call.constraint is None for call in backend.calls)
    _, [forced] = run(FakeKG(), scripted(turns, model_params=135_000_000, constraints=CONSTRAINED),
                      [ChainSpec("q")], n_r=2, structured="never")
    assert forced.mode == "markers"
