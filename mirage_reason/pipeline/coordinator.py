"""The coordinator: one shared workspace per question, and a scheduler that starts each step as soon as its inputs
exist.

Every piece of model work (a decomposition, one turn of one chain, an answer's wording) is its own request to the
backend, with its own max tokens and seed, submitted the moment its inputs exist; the engine batches whatever is in
flight. When a completion comes back the coordinator does the CPU work it unlocks (a chain's KG search, seed
retrieval, claim analysis) and submits the next request at once, while the engine keeps decoding the others: no
lockstep rounds, so a chain never waits for the slowest of a batch, and ``answer_many`` over an evaluation set keeps
the engine full. ``on_progress`` reports each step as it happens (see :data:`ProgressHook`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mirage_kg import Entity, Evidence, MirageError

from mirage_reason.pipeline import prompts
from mirage_reason.backends.base import Backend, Completion, CompletionRequest, derive_seed, strip_think, submit_all
from mirage_reason.pipeline.chain import Chain, ChainResult, ChainRunner, ChainSpec, path_json
from mirage_reason.pipeline.citing import cite_releases
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.decomposer import Decomposer, Decomposition
from mirage_reason.answer import STAGES, TOKEN_STAGES, Answer
from mirage_reason.errors import ReasonerError
from mirage_reason.pipeline.support import Flag, SentenceCheck, Support, valid_text
from mirage_reason.pipeline.sentences import normalise_units, whole_sentences
from mirage_reason.pipeline.synthesis import Synthesis
from mirage_reason.pipeline.synthesizer import Synthesizer

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraphLike

__all__ = ["AskCancelled", "Mirage", "ProgressHook", "Workspace", "split_evidence"]

#: ``on_progress(question_index, event)``: one JSON-ready dict per step a question makes, as it happens.
#: ``event["type"]`` is one of "entities", "sub_questions", "search_issued", "search", "chain_done", "claims",
#: "answer" (see ``Mirage.answer_many``).
ProgressHook = Callable[[int, dict[str, Any]], None]


class AskCancelled(ReasonerError):
    """The caller cancelled the run (a client that went away); nothing more was asked of the model."""


def _forged(result: ChainResult) -> bool:
    """Whether the model wrote a result block itself (only the chain runner may insert one)."""
    return any(e.get("event") == "generate" and (prompts.RESULT_BEGIN in str(e.get("text", ""))
                                                  or prompts.RESULT_END in str(e.get("text", "")))
               for e in result.trace)


def _chain_flags(results: Sequence[ChainResult], n_r: int) -> list[Flag]:
    """Flags for chains whose answer is not to be trusted: a forged result block, a budget spent before the
    answer (the model kept searching, or repeating a search)."""
    flags = []
    for i, result in enumerate(results, start=1):
        if _forged(result):
            flags.append(Flag(f"chain {i} wrote a knowledge-graph result block itself; nothing in it is evidence, "
                              "and its answer was not used", "forged_result_block"))
        refused = sum(1 for e in result.trace if e.get("event") == "budget_spent")
        repeated = sum(1 for e in result.trace if e.get("event") == "search" and e.get("repeated"))
        if result.finish_reason in ("max_turns", "max_tokens") or refused:
            limit = result.finish_reason.replace("_", " ") if result.finish_reason != "answered" else "search"
            flags.append(Flag(f"chain {i} spent its {limit} budget ({len(result.searches)} search block(s), "
                              f"{repeated} repeated, {refused} refused past n_r = {n_r}) before it answered; its "
                              "answer may be unfinished", "budget_spent"))
    return flags


@dataclass
class Workspace:
    """What is known about one question so far. Each step reads what it needs here and writes what it makes."""

    index: int
    question: str
    started: float
    stage: str = "link"  # link -> [decompose] -> seed -> chains -> [synthesize] -> done; or link -> llm -> done
    entities: tuple[Entity, ...] = ()
    decomposition: Decomposition | None = None
    chains: list[Chain] = field(default_factory=list)
    results: list[ChainResult] = field(default_factory=list)
    synthesis: Synthesis | None = None
    prompt: str | None = None  # the model prompt the current stage waits on
    text: str = ""
    abstained: bool = False
    flags: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    tokens: dict[str, int] = field(default_factory=lambda: {**dict.fromkeys(TOKEN_STAGES, 0), "prompt": 0})
    engine: dict[str, float] = field(default_factory=dict)  # the engine's own timings, summed (count_engine)
    answer: Answer | None = None
    reported: bool = False  # on_answer has been told
    chains_started: float = 0.0
    on_progress: ProgressHook | None = None

    def emit(self, kind: str, **payload: Any) -> None:
        if self.on_progress is not None:
            self.on_progress(self.index, {"type": kind, **payload})

    def charge(self, stage: str, seconds: float, completion: Completion | None = None) -> None:
        self.timings[stage] = self.timings.get(stage, 0.0) + seconds
        if completion is not None:
            self.tokens[stage] = self.tokens.get(stage, 0) + completion.completion_tokens
            self.tokens["prompt"] += completion.prompt_tokens

    def count_engine(self, completion: Completion) -> None:
        """Add what the engine timed of one completion. Completions decoded together (a server's slots) overlap,
        so ``generated_tokens / generation_s`` is the rate of one sequence, what ``llama-bench``'s tg measures."""
        if completion.generation_seconds is not None:
            self.engine["generated_tokens"] = self.engine.get("generated_tokens", 0) + completion.completion_tokens
            self.engine["generation_s"] = self.engine.get("generation_s", 0.0) + completion.generation_seconds
        if completion.prompt_seconds is not None:
            self.engine["prompt_evaluated"] = (self.engine.get("prompt_evaluated", 0)
                                               + (completion.prompt_evaluated or 0))
            self.engine["prompt_eval_s"] = self.engine.get("prompt_eval_s", 0.0) + completion.prompt_seconds


class Mirage:
    """The MIRAGE pipeline (or one of its ablations, by ``config``) over a knowledge graph and a backend."""

    def __init__(self, kg: KnowledgeGraphLike, backend: Backend, config: MirageConfig | None = None) -> None:
        self.kg = kg
        self.backend = backend
        self.config = config or MirageConfig()
        self.decomposer = Decomposer(kg, backend, self.config)
        self.synthesizer = Synthesizer(kg, backend, self.config)
        self.runner = ChainRunner(kg, backend, self.config)  # its search cache is shared by every question

    def answer(self, question: str, on_progress: ProgressHook | None = None,
               cancel: threading.Event | None = None) -> Answer:
        return self.answer_many([question], on_progress=on_progress, cancel=cancel)[0]

    def answer_many(self, questions: Sequence[str], on_answer: Callable[[int, Answer], None] | None = None,
                    on_progress: ProgressHook | None = None, cancel: threading.Event | None = None) -> list[Answer]:
        """Answer every question, all their model work in flight together; ``on_answer(i, answer)`` fires as each
        question finishes (in finishing order), the list comes back in input order.

        ``on_progress(i, event)`` sees each question's steps as they happen (what a live view streams): the linked
        ``entities``; the ``sub_questions`` with the ``chains`` started for them (index, sub-question, sample, seed
        facts); each chain's ``search_issued`` (the block, before the KG runs it) and ``search`` (the block, mode,
        results, note); ``chain_done`` (its answer and why it stopped); the synthesizer's ``claims`` with their
        cited paths; the final ``answer`` (``Answer.to_json``). Events of one question come in this order; events
        of different chains interleave as the chains run.

        Setting ``cancel`` stops the run: no new request goes out, every request in flight is cancelled (a queued
        one never runs; a server's request is closed), and ``AskCancelled`` is raised."""
        run = _Run(self, on_answer)
        spaces = [Workspace(i, valid_text(q), run.started, on_progress=on_progress) for i, q in enumerate(questions)]
        try:
            for ws in spaces:  # linking question 2 overlaps the engine's work on question 1
                run.advance(ws)
            while run.pending:
                if cancel is not None and cancel.is_set():
                    raise AskCancelled(f"cancelled with {len(run.pending)} request(s) in flight")
                done, _ = wait(run.pending, timeout=None if cancel is None else 0.05, return_when=FIRST_COMPLETED)
                for future in [f for f in run.pending if f in done]:  # submission order: deterministic
                    if cancel is not None and cancel.is_set():
                        break
                    run.complete(future)
        finally:
            for future in run.pending:
                future.cancel()
        stuck = [(ws.index, ws.stage) for ws in spaces if ws.stage != "done"]
        if stuck:
            raise ReasonerError(f"the coordinator made no progress (question, stage): {stuck}")
        return [ws.answer for ws in spaces if ws.answer is not None]

    def _seed_shares(self, ws: Workspace, subs: Sequence[Any]) -> list[tuple[Evidence, ...]]:
        """Each sub-question's seed facts: the retriever's evidence for the whole question (the ``retrieve``
        pipeline's budget) split between the sub-questions, plus each one's own best facts."""
        cfg = self.config

        def retrieve(text: str) -> tuple[Evidence, ...]:
            try:
                return tuple(self.kg.retrieve(text, budget=cfg.retrieve_budget).evidence)
            except MirageError as exc:
                ws.notes.append(f"retrieval failed for {text!r}: {exc}")
                return ()

        whole = retrieve(ws.question)
        own = [whole if sub.text == ws.question else retrieve(sub.text) for sub in subs]
        return split_evidence(whole, own, [{e.iri for e in sub.entities} for sub in subs], cfg.seed_facts)

    def _engine_record(self, ws: Workspace) -> dict[str, Any]:
        info = getattr(self.backend, "engine_info", None)
        record: dict[str, Any] = dict(info) if isinstance(info, Mapping) else {}
        record.update({k: round(v, 4) if isinstance(v, float) else v for k, v in ws.engine.items()})
        if ws.engine.get("generation_s"):
            record["generated_tokens_per_s"] = round(ws.engine["generated_tokens"] / ws.engine["generation_s"], 2)
        return record

    def _finish(self, ws: Workspace) -> None:
        ws.stage = "done"
        ws.timings["total"] = time.perf_counter() - ws.started
        tokens = dict(ws.tokens)
        tokens["total"] = sum(tokens[s] for s in TOKEN_STAGES)
        synthesis = ws.synthesis
        sub_questions = ws.decomposition.texts if ws.decomposition is not None else ()
        ws.flags = (*ws.flags, *_chain_flags(ws.results, self.config.n_r))
        support, sentences = self._review(ws)
        ws.answer = Answer(
            question=ws.question,
            text=ws.text,
            abstained=ws.abstained,
            sub_questions=sub_questions,
            claims=synthesis.claims if synthesis is not None else (),
            chains=tuple(ws.results),
            timings=dict(ws.timings),
            tokens=tokens,
            pipeline=self.config.pipeline_name,
            question_entities=ws.entities,
            dropped=synthesis.dropped if synthesis is not None else (),
            conflicts=synthesis.conflicts if synthesis is not None else (),
            flags=ws.flags,
            notes=tuple(ws.notes),
            engine=self._engine_record(ws),
            support=support,
            sentences=sentences,
            decomposition=ws.decomposition.to_json() if ws.decomposition is not None else {},
            differential=tuple(c.to_json() for c in synthesis.differential.candidates[:5])
            if synthesis is not None and synthesis.differential is not None else (),
            findings=synthesis.findings if synthesis is not None else {"explained": [], "unexplained": []},
        )
        ws.emit("answer", answer=ws.answer.to_json())

    def _review(self, ws: Workspace) -> tuple[Support, tuple[SentenceCheck, ...]]:
        """How grounded the finished text is. Only the synthesizer checks an answer against the claims; the
        pipelines without it say so (their claims are still extracted and checked per sentence where they exist)."""
        if ws.synthesis is None:
            return Support("unsupported", "the model's own answer: this pipeline does not consult the knowledge "
                                          "graph"), ()
        support, sentences = self.synthesizer.review(ws.synthesis, ws.text, ws.flags, ws.abstained)
        if not self.config.use_synthesizer or self.config.single_chain:
            factual = [c for c in sentences if c.claims or not c.supported]
            named = sum(1 for c in factual if c.supported)
            return Support("partial" if named else "unsupported",
                           f"the model's own answer: this pipeline ({self.config.pipeline_name}) does not check it "
                           f"against the claims; {named} of {len(factual)} sentences name a claim of the knowledge "
                           "graph"), sentences
        return support, sentences


class _Run:
    """The state of one ``answer_many`` call: the requests in flight and what each one is for."""

    def __init__(self, mirage: Mirage, on_answer: Callable[[int, Answer], None] | None) -> None:
        self.mirage = mirage
        self.config = mirage.config
        self.backend = mirage.backend
        self.on_answer = on_answer
        self.started = time.perf_counter()
        self.pending: dict[Future[Completion], tuple[Workspace, str, Chain | None, float]] = {}

    def submit(self, ws: Workspace, stage: str, request: CompletionRequest, chain: Chain | None = None) -> None:
        self.pending[self.backend.submit(request)] = (ws, stage, chain, time.perf_counter())

    def seed(self, ws: Workspace, stage: str) -> int | None:
        return derive_seed(self.config.seed, stage, ws.index)

    def advance(self, ws: Workspace) -> None:
        """Do every CPU step whose inputs exist; stop where the model is needed or the question is done."""
        cfg, mirage = self.config, self.mirage
        while True:
            if ws.stage == "link":
                if cfg.llm_only:  # the model alone: the KG is never touched
                    prompt = self.backend.format_chat(prompts.llm_only_messages(ws.question))
                    self.submit(ws, "llm", CompletionRequest(
                        prompt, (), cfg.chain_params(cfg.max_chain_tokens, self.seed(ws, "llm"))))
                    ws.stage = "llm"
                    continue
                t = time.perf_counter()
                ws.entities = mirage.decomposer.link(ws.question)
                ws.charge("link", time.perf_counter() - t)
                ws.emit("entities", entities=[e.to_json() for e in ws.entities])
                if cfg.use_decomposer and not cfg.single_chain and mirage.decomposer.needs_model(ws.entities):
                    self.submit(ws, "decompose", mirage.decomposer.request(ws.question, ws.entities,
                                                                           self.seed(ws, "decompose")))
                    ws.stage = "decompose"
                else:
                    ws.decomposition = mirage.decomposer.whole(ws.question, ws.entities)
                    ws.stage = "seed"
            elif ws.stage == "seed":
                self._start_chains(ws)
                ws.stage = "chains"
            elif ws.stage == "chains":
                if any(not c.done for c in ws.chains):
                    return
                ws.timings["chains"] += time.perf_counter() - ws.chains_started
                ws.results = [c.result() for c in ws.chains]
                self._after_chains(ws)
            else:  # decompose / synthesize / llm wait for the model; done is done
                if ws.stage == "done" and ws.answer is not None and not ws.reported:
                    ws.reported = True
                    if self.on_answer is not None:
                        self.on_answer(ws.index, ws.answer)
                return

    def complete(self, future: Future[Completion]) -> None:
        """Take one finished request: feed a chain (and submit its next turn at once) or finish a stage."""
        ws, stage, chain, submitted = self.pending.pop(future)
        completion = future.result()
        if valid_text(completion.text) != completion.text:  # a lone surrogate: replaced, never a crash downstream
            completion = dataclasses.replace(completion, text=valid_text(completion.text))
        ws.count_engine(completion)
        cfg, mirage = self.config, self.mirage
        if chain is not None:
            ws.timings["search"] += mirage.runner.advance(chain, completion)
            ws.tokens["chains"] += completion.completion_tokens
            ws.tokens["prompt"] += completion.prompt_tokens
            if not chain.done:
                self.submit(ws, "chains", chain.next_request(), chain)
            self.advance(ws)
            return
        if stage == "decompose":
            ws.decomposition = mirage.decomposer.parse(ws.question, ws.entities, completion)
            ws.stage = "seed"
        elif stage == "llm":
            ws.text = _final(completion)
        elif cfg.use_synthesizer:
            assert ws.synthesis is not None
            ws.text, ws.flags = mirage.synthesizer.finish(ws.synthesis, completion)
        else:
            ws.text = normalise_units(_final(completion))
        ws.charge(stage, time.perf_counter() - submitted, completion)
        if stage != "decompose":
            mirage._finish(ws)
        self.advance(ws)

    def _start_chains(self, ws: Workspace) -> None:
        cfg = self.config
        assert ws.decomposition is not None
        ws.notes.extend(ws.decomposition.notes)
        ws.chains_started = time.perf_counter()
        subs = ws.decomposition.sub_questions
        shares: list[tuple[Evidence, ...]] = [()] * len(subs)
        if cfg.seed_evidence:
            t = time.perf_counter()
            shares = self.mirage._seed_shares(ws, subs)
            ws.charge("retrieve", time.perf_counter() - t)
        samples = cfg.samples_for(ws.question)
        for j, sub in enumerate(subs):
            for s in range(samples):
                spec = ChainSpec(sub.text, ws.question, shares[j], tag=(ws.index, j), search=cfg.n_r > 0, sample=s,
                                 entities=sub.entities)
                chain = self.mirage.runner.start(spec)
                chain.listener = self._chain_listener(ws, len(ws.chains))
                ws.chains.append(chain)
        ws.emit("sub_questions", sub_questions=list(ws.decomposition.texts), chains=[
            {"chain": n, "sub_question": c.spec.tag[1], "sample": c.spec.sample, "text": c.spec.sub_question,
             "seed": [path_json(p) for p in c.seed_paths]} for n, c in enumerate(ws.chains)])
        # the engine starts on every chain at once, and may share the evaluation of the samples' identical prompts
        futures = submit_all(self.backend, [chain.next_request() for chain in ws.chains])
        for future, chain in zip(futures, ws.chains, strict=True):
            self.pending[future] = (ws, "chains", chain, time.perf_counter())

    @staticmethod
    def _chain_listener(ws: Workspace, number: int) -> Callable[[str, dict[str, Any]], None]:
        def listen(kind: str, data: dict[str, Any]) -> None:
            ws.emit(kind, chain=number, **data)

        return listen

    def _after_chains(self, ws: Workspace) -> None:
        cfg, mirage = self.config, self.mirage
        t = time.perf_counter()
        resolve = cfg.use_synthesizer and not cfg.single_chain
        # a chain that wrote a result block itself leans on what it made up: its answer is no evidence of anything
        inputs = [dataclasses.replace(r, answer="") if _forged(r) else r for r in ws.results]
        synthesis = mirage.synthesizer.analyse(ws.question, ws.entities, inputs, resolve=resolve)
        if resolve:
            synthesis = mirage.synthesizer.answer_safety(synthesis)
        ws.synthesis, failed = cite_releases(synthesis, mirage.kg)
        if failed:
            ws.notes.append(failed)
        ws.emit("claims", claims=[c.to_json(full=True) for c in ws.synthesis.claims])
        if cfg.single_chain:
            first = ws.results[0] if ws.results else None
            answer = first.answer if first is not None else ""
            cut = first is not None and first.finish_reason == "max_tokens"
            ws.text = normalise_units(whole_sentences(answer) if cut else answer)
            ws.charge("synthesize", time.perf_counter() - t)
            mirage._finish(ws)
            return
        prompt = (mirage.synthesizer.merge_prompt(ws.question, ws.results) if not cfg.use_synthesizer
                  else mirage.synthesizer.prompt(ws.synthesis))
        ws.charge("synthesize", time.perf_counter() - t)
        if prompt is None:
            ws.text, ws.flags = mirage.synthesizer.finish(ws.synthesis, None)
            ws.abstained = ws.synthesis.abstained
            mirage._finish(ws)
            return
        constraint = mirage.synthesizer.constraint(ws.synthesis) if cfg.use_synthesizer else None
        self.submit(ws, "synthesize", CompletionRequest(prompt, (), cfg.synthesizer_params(self.seed(ws, "synthesize")),
                                                        constraint))
        ws.stage = "synthesize"


def split_evidence(whole: Sequence[Evidence], own: Sequence[Sequence[Evidence]], anchors: Sequence[set[str]],
                   own_facts: int) -> list[tuple[Evidence, ...]]:
    """Split the question's ranked evidence between sub-questions so that together they hold all of it: a fact goes
    to the sub-question whose entities it touches (the least loaded of several), one touching none to the least
    loaded; each share then leads with up to ``own_facts`` of the sub-question's own best facts."""
    n = len(own)
    if n == 0:
        return []
    shares: list[list[Evidence]] = [[] for _ in range(n)]
    for ev in whole:
        nodes = {node.iri for node in ev.path.nodes}
        touching = [j for j in range(n) if anchors[j] & nodes] or list(range(n))
        shares[min(touching, key=lambda j: (len(shares[j]), j))].append(ev)
    out = []
    for j in range(n):
        keys = {_evidence_key(ev) for ev in shares[j]}
        lead = [ev for ev in own[j] if _evidence_key(ev) not in keys][:own_facts]
        out.append(tuple(lead + shares[j]))
    return out


def _evidence_key(ev: Evidence) -> tuple[tuple[str, str, str], ...]:
    return tuple((s.subject.iri, s.relation.iri, s.object.iri) for s in ev.path.steps)


def _final(completion: Completion) -> str:
    """A final answer as the model wrote it, minus its reasoning and any sentence cut off by the token limit."""
    text = strip_think(completion.text)
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    text = text.strip()
    return whole_sentences(text) if completion.finish_reason == "length" else text
