"""Graph-augmented reasoning chains: the search-block parser, the graph searcher and the chain runner.

A chain generates until the model closes a search block (the stop string ``<|KG_QUERY_END|>``) or ends. A closed
block is linked to KG entities, answered in anchor or bridge mode, verbalised and inserted between the result tags,
and the chain goes on. Every turn is its own request to the backend, asking for at most the chain's remaining token
budget, and a chain submits its next turn as soon as its search returns: no chain waits for another, so wall time
follows the longest chain. Whatever the model writes (an unclosed or empty block, a paragraph instead of an entity, a name the
KG does not know) is recorded in the chain's trace and answered with a note, never raised.

A chain runs in one of two modes that share the searcher, its caches, the budgets and the trace: ``markers``, the
paper's free-text search blocks, and ``structured``, where every turn is one JSON action the engine constrains (an
anchor search on an entity, a bridge search between two, or the answer) whose entity slots can only name what the
chain can reach: the question's entities, the seed facts' and every result's (a list that grows with each result).
Every search block a chain writes counts toward ``n_r``, a repeat or a garbled block included, and every completion
is a turn: a model that repeats one search forever is stopped by the budget, and its chain is flagged.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mirage_kg import Entity, Evidence, MirageError, Path

from mirage_reason.pipeline import prompts
from mirage_reason.backends.base import (
    THINK_CLOSE,
    Backend,
    Completion,
    CompletionRequest,
    OutputConstraint,
    derive_seed,
    sample_seed,
    split_think,
    submit_all,
)
from mirage_reason.pipeline.choices import LETTERS, parse_options
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.decomposer import link_entities
from mirage_reason.errors import ReasonerError
from mirage_reason.pipeline.prompts import QUERY_BEGIN, QUERY_END, RESULT_BEGIN, RESULT_END

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraphLike

__all__ = [
    "Chain",
    "ChainResult",
    "ChainRunner",
    "ChainSpec",
    "GraphSearcher",
    "Search",
    "SearchBlock",
    "extract_answer",
    "parse_search_block",
    "path_json",
]

Mode = Literal["anchor", "bridge"]
STOP = (QUERY_END,)
#: ``listener(kind, data)``: a chain's progress, JSON-ready: "search_issued" (the block, before the KG runs it),
#: "search" (what it found), "chain_done" (its answer and why it stopped)
Listener = Callable[[str, dict[str, Any]], None]


def path_json(path: Path) -> dict[str, Any]:
    """A path as the CLI prints citations and results: nodes, steps (as in ``query bridge``) and text."""
    data = path.to_json()
    return {"nodes": data["nodes"], "steps": data["steps"], "text": data["text"]}


# -- parsing --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchBlock:
    """What the model asked for. ``problem`` is set when the block cannot be run (then ``terms`` may be empty)."""

    raw: str
    mode: Mode
    terms: tuple[str, ...]
    problem: str | None = None
    note: str | None = None  # a usable block with something odd about it (three terms, a repeated term)


_TERM_TRIM = " \t\r\n\"'`“”‘’«»[](){}<>.,;:!?*"


def parse_search_block(region: str, max_chars: int = 200) -> SearchBlock:
    """Parse the search block that ends ``region`` (the chain text since the last result, stop string cut off).

    The last ``<|KG_QUERY_BEGIN|>`` opens the block; ``a||b`` asks for a bridge, anything else for an anchor.
    """
    start = region.rfind(QUERY_BEGIN)
    if start < 0:
        return SearchBlock(region[-max_chars:], "anchor", (), f"{QUERY_END} without {QUERY_BEGIN}")
    raw = region[start + len(QUERY_BEGIN):]
    text = raw.strip()
    if not text:
        return SearchBlock(raw, "anchor", (), "empty search block")
    if len(text) > max_chars or text.count("\n") > 1:
        return SearchBlock(raw[:max_chars], "anchor", (),
                           f"search block too long ({len(text)} characters); expected an entity name")
    parts = [p.strip(_TERM_TRIM) for p in text.split("||")]
    terms = [p for p in parts if p]
    if not terms:
        return SearchBlock(raw, "anchor", (), "empty search block")
    note = None
    if len(terms) > 2:
        note = f"{len(terms)} entities given; bridging the first two"
        terms = terms[:2]
    if len(terms) == 2 and terms[0].casefold() == terms[1].casefold():
        note, terms = "the same entity on both sides; anchoring it", terms[:1]
    mode: Mode = "bridge" if len(terms) == 2 else "anchor"
    return SearchBlock(text, mode, tuple(terms), None, note)


_QUERY_BLOCK = re.compile(re.escape(QUERY_BEGIN) + r".*?(?:" + re.escape(QUERY_END) + r"|$)", re.DOTALL)
_RESULT_BLOCK = re.compile(re.escape(RESULT_BEGIN) + r".*?(?:" + re.escape(RESULT_END) + r"|$)", re.DOTALL)
_TAGS = re.compile("|".join(re.escape(t) for t in (QUERY_BEGIN, QUERY_END, RESULT_BEGIN, RESULT_END,
                                                     "<think>", "</think>")))
_ANSWER_LEAD = re.compile(r"(?:final answer|answer)\s*[:：]\s*", re.IGNORECASE)


def _clean(text: str) -> str:
    text = _RESULT_BLOCK.sub(" ", text)
    text = _QUERY_BLOCK.sub(" ", text)
    text = _TAGS.sub(" ", text)
    return re.sub(r"[ \t]+", " ", re.sub(r"\n{3,}", "\n\n", text)).strip()


def extract_answer(text: str) -> str:
    """The chain's final answer: after ``</think>`` if the model thought, else what follows the last result block;
    search and result blocks and stray tags removed, a trailing "Answer:" lead-in honoured."""
    if THINK_CLOSE in text:
        body = split_think(text)[1]
    else:
        end = text.rfind(RESULT_END)
        body = text[end + len(RESULT_END):] if end >= 0 else text
    body = _clean(body)
    leads = list(_ANSWER_LEAD.finditer(body))
    if leads and body[leads[-1].end():].strip():
        body = body[leads[-1].end():].strip()
    if body:
        return body
    paragraphs = [p for p in _clean(text).split("\n\n") if p.strip()]
    return paragraphs[-1].strip() if paragraphs else ""


# -- searching ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Search:
    """One search a chain ran (or tried): the block, what it linked to, the paths shown and why if nothing was."""

    query: str
    mode: Mode
    terms: tuple[str, ...]
    entities: tuple[Entity, ...] = ()
    paths: tuple[Path, ...] = ()
    note: str | None = None
    cached: bool = False
    counted: bool = True
    signature: tuple[Any, ...] = ()  # what makes two searches of one chain "the same"

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(p.text for p in self.paths)

    def to_json(self) -> dict[str, Any]:
        return {"query": self.query, "mode": self.mode, "results": [path_json(p) for p in self.paths]}


@dataclass(frozen=True)
class _Found:
    entities: tuple[Entity, ...]
    paths: tuple[Path, ...]
    total: int
    note: str | None


class GraphSearcher:
    """Links search terms to KG entities and answers anchor and bridge queries, with caches shared by all chains."""

    def __init__(self, kg: KnowledgeGraphLike, config: MirageConfig) -> None:
        self.kg = kg
        self.config = config
        self._links: dict[str, Entity | None] = {}
        self._results: dict[tuple[str, ...], _Found] = {}
        self.kg_queries = 0  # queries that actually reached the graph (cache misses)

    def resolve(self, term: str) -> Entity | None:
        """The best KG entity for ``term`` among the top candidates, if it scores at least the match threshold."""
        key = term.casefold()
        if key not in self._links:
            try:
                candidates = list(self.kg.linker.link_one(term, top=self.config.match_top))
            except MirageError:  # unknown CURIE, malformed IRI: the term simply does not link
                candidates = []
            good = [c for c in candidates[: self.config.match_top] if c.score >= self.config.match_threshold]
            self._links[key] = max(good, key=lambda c: c.score).entity if good else None
        return self._links[key]

    def search(self, block: SearchBlock, question: str = "",
               entities: Sequence[Entity | None] | None = None) -> tuple[Search, bool]:
        """Run a parsed, usable block; returns the search and whether it came from the cache. ``entities`` are the
        terms' entities where the caller knows them (a structured action names reachable entities), else each
        term is linked."""
        entities = list(entities) if entities is not None else [self.resolve(t) for t in block.terms]
        known = [e for e in entities if e is not None]
        unknown = [t for t, e in zip(block.terms, entities) if e is None]
        if not known:
            note = "No knowledge-graph entity matches " + " or ".join(repr(t) for t in block.terms) + "."
            return Search(block.raw, block.mode, block.terms, note=note), False
        notes = [block.note] if block.note else []
        if block.mode == "bridge" and len(known) == 2 and known[0].iri != known[1].iri:
            key: tuple[str, ...] = ("bridge", known[0].iri, known[1].iri)
        else:
            if block.mode == "bridge":
                notes.append(f"{unknown[0]!r} is not in the knowledge graph; showing facts about {known[0].label}"
                             if unknown else "both terms are the same entity; showing its facts")
            key = ("anchor", known[0].iri, question if self.config.rank_by_question else "")
        cached = key in self._results
        if not cached:
            self._results[key] = self._query(key, known, question)
        found = self._results[key]
        if found.note:
            notes.append(found.note)
        mode: Mode = "bridge" if key[0] == "bridge" else "anchor"  # what ran, after any fallback
        search = Search(block.raw, mode, block.terms, found.entities, found.paths, " ".join(notes) or None, cached)
        return search, cached

    def _query(self, key: tuple[str, ...], known: list[Entity], question: str) -> _Found:
        self.kg_queries += 1
        cfg = self.config
        try:
            if key[0] == "bridge":
                a, b = known[0], known[1]
                paths = tuple(self.kg.bridge(a, b, max_hops=cfg.max_hops, max_paths=cfg.max_paths))
                note = None if paths else f"No path of at most {cfg.max_hops} steps connects {a.label} and {b.label}."
                return _Found((a, b), paths[: cfg.max_result_lines], len(paths), note)
            entity = known[0]
            steps = list(self.kg.anchor(entity, k=cfg.k, rank_by=key[2] or None))
        except MirageError as exc:
            return _Found(tuple(known[:2]), (), 0, f"The knowledge graph could not answer: {exc}")
        chosen = _round_robin(steps, cfg.max_result_lines)
        note = None
        if not steps:
            note = f"The knowledge graph holds no facts about {entity.label}."
        elif len(chosen) < len(steps):
            note = f"Showing {len(chosen)} of {len(steps)} facts about {entity.label}."
        return _Found((entity,), tuple(Path((s,)) for s in chosen), len(steps), note)


def _round_robin(steps: Sequence[Any], limit: int) -> list[Any]:
    """Up to ``limit`` steps, taken in turn from each (relation, direction) group so every kind of fact shows."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for step in steps:
        groups.setdefault((step.relation.iri, step.direction), []).append(step)
    chosen: list[Any] = []
    depth = 0
    while len(chosen) < min(limit, len(steps)):
        for group in groups.values():
            if depth < len(group) and len(chosen) < limit:
                chosen.append(group[depth])
        depth += 1
    order = {id(s): i for i, s in enumerate(steps)}
    return sorted(chosen, key=lambda s: order[id(s)])  # keep the graph's ranking within the shown set


# -- chains ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainSpec:
    """What one chain works on. ``tag`` is the caller's (question index, sub-question index); ``sample`` numbers
    the chains of one tag and sub-question: sample ``i`` gets sample 0's seed plus ``i`` at every turn
    (:func:`~mirage_reason.backends.base.sample_seed`), so an engine may run the samples' identical first turns as
    one request that evaluates the prompt once (llama.cpp's server seeds n completions of one request that way)."""

    sub_question: str
    question: str = ""
    seed: tuple[Evidence, ...] = ()
    tag: Any = None
    search: bool = True  # False: the model is not told about search blocks (nor are blocks run)
    sample: int = 0
    entities: tuple[Entity, ...] = ()  # the sub-question's linked entities (linked by the runner when empty)
    mode: str = "auto"  # "markers" | "structured" | "auto": the runner picks (MirageConfig.constrains)


@dataclass(frozen=True)
class ChainResult:
    """A finished chain: its answer, searches, everything the model saw from the KG, and its trace."""

    sub_question: str
    question: str
    answer: str
    text: str  # everything generated, with the inserted result blocks
    searches: tuple[Search, ...]
    seed_paths: tuple[Path, ...]
    trace: tuple[dict[str, Any], ...]
    finish_reason: str  # answered | max_turns | max_tokens
    turns: int
    completion_tokens: int
    prompt_tokens: int
    search_seconds: float
    tag: Any = None
    sample: int = 0
    mode: str = "markers"  # "markers" (free-text search blocks) | "structured" (constrained JSON actions)
    actions: tuple[dict[str, Any], ...] = ()  # structured: the actions the model chose, in order
    flags: tuple[str, ...] = ()  # "repeated_search", "budget_spent", "unusable_action"

    @property
    def evidence_paths(self) -> tuple[Path, ...]:
        """Every path put in front of the model: the seed facts and the search results, without repeats."""
        seen: dict[str, Path] = {}
        for path in (*self.seed_paths, *(p for s in self.searches for p in s.paths)):
            seen.setdefault(_path_key(path), path)
        return tuple(seen.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "sub_question": self.sub_question,
            "mode": self.mode,
            "search_count": len(self.searches),
            "searches": [s.to_json() for s in self.searches],
            "actions": list(self.actions),
            "flags": list(self.flags),
            "answer": self.answer,
            "trace": list(self.trace),
        }


def _path_key(path: Path) -> str:
    return "|".join(f"{s.subject.iri} {s.relation.iri} {s.object.iri}" for s in path.steps)


class Chain:
    """The mutable state of one running chain; :class:`ChainRunner` advances it, :meth:`result` freezes it."""

    def __init__(self, spec: ChainSpec, prefix: str, seed_paths: tuple[Path, ...], config: MirageConfig,
                 mode: str = "markers", reach: Sequence[Entity] = ()) -> None:
        if mode not in ("markers", "structured"):
            raise ReasonerError(f"a chain's mode is 'markers' or 'structured', not {mode!r}")
        self.spec = spec
        self.mode = mode
        self.prefix = prefix
        self.config = config
        self.text = ""
        self.seed_paths = seed_paths
        self.searches: list[Search] = []
        self.trace: list[dict[str, Any]] = []
        self.turns = 0
        self.completion_tokens = 0
        self.prompt_tokens = 0
        self.search_seconds = 0.0
        self.finish_reason: str | None = None
        self.listener: Listener | None = None
        self._seen: set[tuple[Any, ...]] = set()
        self._asked: int | None = None  # max tokens of the request in flight
        self.blocks = 0  # search blocks written (every one counts toward n_r)
        self.repeats = 0
        self.flags: list[str] = []
        self.actions: list[dict[str, Any]] = []
        self._answer: str | None = None  # structured: the answer action's text
        self._constraint: OutputConstraint | None = None  # structured: the action schema of the turn in flight
        self._reach: dict[str, Entity] = {}  # structured: entities a search may name, by label
        for entity in reach:
            self._reachable(entity)
        for path in seed_paths:
            for entity in path.nodes:
                self._reachable(entity)
        if seed_paths:
            self.trace.append({"event": "seed", "facts": [p.text for p in seed_paths]})

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    @property
    def prompt(self) -> str:
        return self.prefix + self.text

    @property
    def remaining_tokens(self) -> int:
        return max(0, self.config.max_chain_tokens - self.completion_tokens)

    @property
    def counted_searches(self) -> int:
        return sum(1 for s in self.searches if s.counted)

    @property
    def reachable(self) -> tuple[str, ...]:
        """Structured mode: the entity labels a search action may name now."""
        return tuple(e.label for e in self._reach.values())

    def _reachable(self, entity: Entity) -> None:
        if len(self._reach) < self.config.max_action_entities and entity.label.strip():
            self._reach.setdefault(entity.label.casefold(), entity)

    def next_request(self) -> CompletionRequest:
        """The chain's next turn: at most ``max_new_tokens`` and never more than what is left of its token budget,
        so no chain ever exceeds ``max_chain_tokens``; its seed comes from the run's seed, the chain's tag, its
        sub-question and the turn, plus its sample number (samples of one sub-question differ by it). A structured
        chain's turn carries the JSON schema of the actions open to it."""
        if self.done:
            raise ReasonerError("a finished chain has no next turn")
        self._asked = min(self.config.max_new_tokens, self.remaining_tokens)
        group = derive_seed(self.config.seed, "chain", self.spec.tag, self.spec.sub_question, self.turns)
        seed = sample_seed(group, self.spec.sample)
        params = self.config.chain_params(self._asked, seed)
        if self.mode == "markers":
            return CompletionRequest(self.prompt, STOP, params)
        self._constraint = OutputConstraint(json_schema=self._action_schema(self._asked))
        return CompletionRequest(self.prompt, (), params, self._constraint)

    def _action_schema(self, asked: int) -> dict[str, Any]:
        """The actions open this turn: a search while the budgets leave room for it and an answer after it (only
        a search until ``min_searches`` were made), else only the answer."""
        cfg = self.config
        labels = list(self.reachable)
        searchable = (self.spec.search and bool(labels) and self.blocks < cfg.n_r and self.turns + 1 < cfg.max_turns
                      and self.remaining_tokens >= 2 * _ACTION_TOKENS + min(cfg.max_new_tokens, _ANSWER_RESERVE))
        # at most two characters a token: medical words split finely, and an answer cut by its max tokens is
        # garbled (SmolLM2 overran three characters a token on 3 of 61 chains)
        text = {"type": "string", "minLength": min(8, asked),
                "maxLength": max(40, _CHARS_PER_TOKEN * (asked - _ACTION_OVERHEAD))}
        options = parse_options(self.spec.question or self.spec.sub_question)
        if options:  # a multiple-choice question: the letter is a constrained choice, then the reasons
            answer = _action("answer", choice={"enum": list(LETTERS[: len(options)])}, answer=text)
        else:
            answer = _action("answer", answer=text)
        if not searchable:
            return answer
        actions = [_action("anchor", entity={"enum": labels})]
        if len(labels) > 1:
            actions.append(_action("bridge", entity={"enum": labels}, other={"enum": labels}))
        if self.blocks >= min(cfg.min_searches, cfg.n_r):
            actions.append(answer)
        return actions[0] if len(actions) == 1 else {"anyOf": actions}

    def _emit(self, kind: str, **data: Any) -> None:
        if self.listener is not None:
            self.listener(kind, data)

    def feed(self, completion: Completion, searcher: GraphSearcher) -> None:
        """Take one turn's completion: run a closed search block, or finish the chain."""
        if self.done:
            raise ReasonerError("a finished chain was fed another completion")
        if self._asked is not None and completion.completion_tokens > self._asked:
            raise ReasonerError(f"the backend returned {completion.completion_tokens} tokens for a request of at most "
                                f"{self._asked}: it does not honour max tokens, so the chain's budget cannot hold")
        self._asked = None
        self.turns += 1
        self.completion_tokens += completion.completion_tokens
        self.prompt_tokens += completion.prompt_tokens
        self.trace.append({"event": "generate", "turn": self.turns, "text": completion.text,
                           "finish": completion.finish_reason, "tokens": completion.completion_tokens})
        self.text += completion.text
        if self.mode == "structured":
            self._feed_action(completion, searcher)
            return
        # A server that does not say which stop fired (stop_unknown) stopped on QUERY_END if a block is left open.
        if completion.stop == QUERY_END or (completion.stop_unknown and self._open_block() is not None):
            self.text += QUERY_END
            limit = self._limit_reason()
            if limit is not None:
                self._garbled(f"search not run: the chain reached its {limit.replace('_', ' ')} limit")
                self._finish(limit)
                return
            started = time.perf_counter()
            self.text += self._answer_block(searcher)
            self.search_seconds += time.perf_counter() - started
            return
        if completion.finish_reason == "length":
            limit = self._limit_reason()
            if limit is None:
                return  # the step's token cap cut it, not the chain's: the next step continues the text
            self._finish(limit)
            return
        self._finish("answered")

    def _limit_reason(self) -> str | None:
        if self.turns >= self.config.max_turns:
            return "max_turns"
        if self.completion_tokens >= self.config.max_chain_tokens:
            return "max_tokens"
        return None

    def _open_block(self) -> str | None:
        """The search block the text ends inside (after the last result), from its opening tag; None if none."""
        end = self.text.rfind(RESULT_END)
        region = self.text[end + len(RESULT_END):] if end >= 0 else self.text
        start = region.rfind(QUERY_BEGIN)
        return region[start:] if start >= 0 and QUERY_END not in region[start:] else None

    def _garbled(self, problem: str, text: str | None = None) -> None:
        event: dict[str, Any] = {"event": "garbled", "turn": self.turns, "problem": problem}
        if text is not None:
            event["text"] = text
        self.trace.append(event)

    def _feed_action(self, completion: Completion, searcher: GraphSearcher) -> None:
        """Structured mode: run the turn's action (a search, whose results go into the text) or take its answer."""
        assert self._constraint is not None
        raw = completion.text.strip()
        try:
            action = self._constraint.parse(raw)
        except ValueError as exc:  # the engine held the schema, so only a token cap can leave it unfinished
            problem = "cut by its max tokens" if completion.finish_reason == "length" else str(exc)
            self._garbled(f"unusable action: {problem}", raw[: self.config.max_query_chars])
            self._flag("unusable_action")
            self._answer = _partial_answer(raw)
            self._finish(self._limit_reason() or ("max_tokens" if completion.finish_reason == "length" else
                                                  "answered"))
            return
        self.actions.append(action)
        if action.get("action") == "answer":
            self._answer = str(action.get("answer", "")).strip()
            if action.get("choice"):
                self._answer = f"Answer: {action['choice']}. {self._answer}"
            self._finish("answered")
            return
        terms = (action["entity"],) if action["action"] == "anchor" else (action["entity"], action["other"])
        entities = [self._reach.get(t.casefold()) for t in terms]
        note = None
        if len(terms) == 2 and terms[0].casefold() == terms[1].casefold():
            note, terms, entities = "the same entity on both sides; anchoring it", terms[:1], entities[:1]
        block = SearchBlock(json.dumps(action, ensure_ascii=False), "bridge" if len(terms) == 2 else "anchor",
                            tuple(terms), None, note)
        started = time.perf_counter()
        self.text += self._run_block(block, searcher, entities)
        self.search_seconds += time.perf_counter() - started
        if self.searches:
            for path in self.searches[-1].paths:
                for entity in path.nodes:
                    self._reachable(entity)

    def _flag(self, flag: str) -> None:
        if flag not in self.flags:
            self.flags.append(flag)

    def _answer_block(self, searcher: GraphSearcher) -> str:
        cfg = self.config
        region = self.text[: -len(QUERY_END)]
        last_result = region.rfind(RESULT_END)
        region = region[last_result + len(RESULT_END):] if last_result >= 0 else region
        return self._run_block(parse_search_block(region, cfg.max_query_chars), searcher)

    def _run_block(self, block: SearchBlock, searcher: GraphSearcher,
                   entities: Sequence[Entity | None] | None = None) -> str:
        """Answer one search block, either mode's: every block counts toward ``n_r`` (a garbled one or a repeat
        too); a repeat is answered from the chain's own earlier search, a block past the budget with a note."""
        cfg = self.config
        self.blocks += 1
        if block.problem is not None:
            self._garbled(block.problem, block.raw[:cfg.max_query_chars])
            hint = (f"Write one entity name as {QUERY_BEGIN}name{QUERY_END}, "
                    f"or two as {QUERY_BEGIN}first||second{QUERY_END}.")
            return prompts.result_block([], f"Search not run: {block.problem}. {hint}")
        if not self.spec.search:
            self._garbled("search block in a chain without search")
            return prompts.result_block([], "Searching is not available here; answer from what you know.")
        if self.blocks > cfg.n_r:
            self._flag("budget_spent")
            self.trace.append({"event": "budget_spent", "turn": self.turns, "query": block.raw})
            return prompts.result_block([], prompts.budget_spent_note(cfg.n_r))
        resolved = list(entities) if entities is not None else [searcher.resolve(t) for t in block.terms]
        signature = (block.mode, tuple(e.iri if e is not None else t.casefold() for t, e in zip(block.terms, resolved)))
        if signature in self._seen:
            self.repeats += 1
            if self.repeats > 1:
                self._flag("repeated_search")
            note = "You already ran this search; its facts are above."
            if self.blocks >= cfg.n_r:
                note = f"{note} {prompts.last_search_note(cfg.n_r)}"
            previous = next(s for s in reversed(self.searches) if s.signature == signature)
            self.searches.append(Search(block.raw, previous.mode, block.terms, previous.entities, previous.paths,
                                        note, cached=True, counted=True, signature=signature))
            self.trace.append({"event": "search", "turn": self.turns, "query": block.raw, "mode": previous.mode,
                               "entities": [e.id for e in previous.entities], "results": len(previous.paths),
                               "cached": True, "repeated": True, "note": note})
            return prompts.result_block([], note)
        self._emit("search_issued", query=block.raw, mode=block.mode, turn=self.turns)
        found, cached = searcher.search(block, self.spec.sub_question, resolved)
        search = dataclasses.replace(found, signature=signature)
        self._emit("search", turn=self.turns, search={**search.to_json(), "note": search.note, "cached": cached})
        self._seen.add(signature)
        self.searches.append(search)
        self.trace.append({
            "event": "search", "turn": self.turns, "query": block.raw, "mode": search.mode,
            "entities": [e.id for e in search.entities], "results": len(search.paths),
            "cached": cached, "repeated": False, "note": search.note,
        })
        result_note = search.note
        if self.blocks >= cfg.n_r:
            last = prompts.last_search_note(cfg.n_r)
            result_note = f"{result_note} {last}" if result_note else last
        return prompts.result_block(search.lines, result_note)

    def _finish(self, reason: str) -> None:
        block = self._open_block()
        if block is not None:
            self._garbled("unclosed search block", block[:self.config.max_query_chars])
        self.finish_reason = reason
        self.trace.append({"event": "finish", "turn": self.turns, "reason": reason})
        self._emit("chain_done", answer=self.answer, finish_reason=reason, turns=self.turns,
                   completion_tokens=self.completion_tokens)

    @property
    def answer(self) -> str:
        """The chain's answer: a structured chain's answer action, else what :func:`extract_answer` reads."""
        if self.mode == "structured":
            return self._answer or ""
        return extract_answer(self.text)

    def result(self) -> ChainResult:
        if not self.done:
            raise ReasonerError("the chain has not finished")
        return ChainResult(
            sub_question=self.spec.sub_question,
            question=self.spec.question or self.spec.sub_question,
            answer=self.answer,
            text=self.text,
            searches=tuple(self.searches),
            seed_paths=self.seed_paths,
            trace=tuple(self.trace),
            finish_reason=self.finish_reason or "",
            turns=self.turns,
            completion_tokens=self.completion_tokens,
            prompt_tokens=self.prompt_tokens,
            search_seconds=self.search_seconds,
            tag=self.spec.tag,
            sample=self.spec.sample,
            mode=self.mode,
            actions=tuple(self.actions),
            flags=tuple(self.flags),
        )


@dataclass
class ChainRunner:
    """Starts chains and runs them, each turn its own request, each chain's next turn submitted as soon as its
    search returns (searches run here while the engine decodes the other chains)."""

    kg: KnowledgeGraphLike
    backend: Backend
    config: MirageConfig = field(default_factory=MirageConfig)
    searcher: GraphSearcher | None = None

    def __post_init__(self) -> None:
        if self.searcher is None:
            self.searcher = GraphSearcher(self.kg, self.config)

    def mode_for(self, spec: ChainSpec) -> str:
        """The chain's mode: the spec's, else structured where the config has the engine constrain chains."""
        if spec.mode != "auto":
            return spec.mode
        return "structured" if self.config.constrains(self.backend, "chains") else "markers"

    def start(self, spec: ChainSpec) -> Chain:
        """A chain ready to run: its prompt holds the instructions, the seed facts and the (sub-)question."""
        shown = _dedupe_paths([e.path for e in spec.seed])  # the coordinator sizes each chain's share
        question = spec.question or spec.sub_question
        mode = self.mode_for(spec)
        if mode == "markers":
            messages = prompts.chain_messages(spec.sub_question, question, prompts.fact_lines(shown),
                                              self.config.n_r, search=spec.search)
            return Chain(spec, self.backend.format_chat(messages), tuple(shown), self.config)
        reach = list(spec.entities)
        if not reach:
            reach = list(link_entities(self.kg, spec.sub_question, self.config))
        if question != spec.sub_question:
            reach.extend(link_entities(self.kg, question, self.config))
        chain = Chain(spec, "", tuple(shown), self.config, "structured", reach)
        messages = prompts.structured_chain_messages(spec.sub_question, question, prompts.fact_lines(shown),
                                                     self.config.n_r, chain.reachable)
        chain.prefix = self.backend.format_chat(messages)
        return chain

    def run(self, specs: Sequence[ChainSpec], listener: Listener | None = None) -> list[ChainResult]:
        """Run chains to the end; results in the order of ``specs``. A spec without a tag gets its index as tag,
        so identical specs still sample with distinct seeds."""
        chains = [self.start(spec if spec.tag is not None else dataclasses.replace(spec, tag=i))
                  for i, spec in enumerate(specs)]
        pending: dict[Future[Completion], Chain] = {}
        try:
            for number, chain in enumerate(chains):
                if listener is not None:
                    chain.listener = _numbered(listener, number)
            # all first turns at once: the engine may share the evaluation of identical prompts (samples)
            first = submit_all(self.backend, [chain.next_request() for chain in chains])
            pending.update(zip(first, chains, strict=True))
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in [f for f in pending if f in done]:  # in submission order: deterministic
                    chain = pending.pop(future)
                    self.advance(chain, future.result())
                    if not chain.done:
                        pending[self.backend.submit(chain.next_request())] = chain
        finally:
            for future in pending:
                future.cancel()
        return [c.result() for c in chains]

    def advance(self, chain: Chain, completion: Completion) -> float:
        """Feed ``completion`` to ``chain`` (running its search, if it closed one); returns the search seconds."""
        assert self.searcher is not None
        before = chain.search_seconds
        chain.feed(completion, self.searcher)
        return chain.search_seconds - before


_ACTION_TOKENS = 40  # what a search action takes, at most (its JSON and entity names)
_ANSWER_RESERVE = 64  # tokens kept for the answer action after a search
_ACTION_OVERHEAD = 12  # the answer action's JSON around its text
_CHARS_PER_TOKEN = 2  # the answer text's characters per token it may take, at most


def _action(name: str, **fields: Any) -> dict[str, Any]:
    """The JSON schema of one action: ``{"action": name, **fields}``, all required, nothing else."""
    return {"type": "object", "properties": {"action": {"const": name}, **fields},
            "required": ["action", *fields], "additionalProperties": False}


_PARTIAL_ANSWER = re.compile(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)')


def _partial_answer(raw: str) -> str:
    """The answer text of an answer action cut before its end (a token cap), unescaped; empty if none."""
    match = _PARTIAL_ANSWER.search(raw)
    if match is None:
        return ""
    text = match.group(1)
    try:
        return str(json.loads(f'"{text}"'))
    except ValueError:
        return text.replace('\\"', '"')


def _numbered(listener: Listener, number: int) -> Listener:
    return lambda kind, data: listener(kind, {"chain": number, **data})


def _dedupe_paths(paths: Sequence[Path]) -> list[Path]:
    seen: dict[str, Path] = {}
    for path in paths:
        seen.setdefault(_path_key(path), path)
    return list(seen.values())
