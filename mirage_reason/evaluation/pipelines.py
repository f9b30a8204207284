"""The answer pipelines an evaluation compares, behind one interface: ``run(examples) -> outputs``.

``retrieve`` is the LLM-free retriever (its answer is the verbalised evidence, its diagnosis the differential that
leads it); ``llm``, ``single-chain``,
``mirage``, ``mirage-no-decomposer`` and ``mirage-no-synthesizer`` are the reasoner with the flags of
``MirageConfig.pipeline``. All share one KG and one backend, built once and only when a pipeline needs them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from mirage_kg import Path

from mirage_reason.pipeline.config import PIPELINES as REASONER_PIPELINES
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.evaluation.datasets import LETTERS, Example
from mirage_reason.evaluation.metrics import linked_ids

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraph

    from mirage_reason.backends.base import Backend

__all__ = ["PIPELINE_NAMES", "EvalResources", "Pipeline", "PipelineOutput", "build_pipeline", "question_text"]

PIPELINE_NAMES: tuple[str, ...] = ("llm", "retrieve", "single-chain", "mirage", "mirage-no-decomposer",
                                   "mirage-no-synthesizer")
LINK_TOP = 5  # linking recall is measured at 5 candidates per mention


@dataclass
class PipelineOutput:
    """What a pipeline produced for one example, before scoring.

    ``evidence_entities``/``evidence_facts``/``linked`` are ``None`` when the pipeline shows the model no KG facts;
    ``cited`` holds the paths the answer cites (``None``: the pipeline cannot cite); ``letter`` is set by a pipeline
    that picks an option itself (``picks_letter``), otherwise the runner extracts it from the answer text."""

    answer: str
    abstained: bool = False
    evidence_entities: frozenset[str] | None = None
    evidence_facts: int | None = None
    linked: frozenset[str] | None = None
    cited: list[Path | dict[str, Any]] | None = None
    tokens: dict[str, int] = field(default_factory=dict)  # generated tokens per stage
    prompt_tokens: int | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # per stage
    latency: float | None = None  # seconds from the batch's start until this answer was ready
    picks_letter: bool = False
    letter: str | None = None
    trace: dict[str, Any] | None = None
    #: the conditions the pipeline ranks itself (ids, best first); None: the runner reads them off the answer text
    conditions: tuple[str, ...] | None = None


class Pipeline(Protocol):
    """Answers a batch of examples; one call lets a batched reasoner share generate steps across questions."""

    name: str
    uses_model: bool

    def run(self, examples: Sequence[Example]) -> list[PipelineOutput]: ...


def question_text(example: Example) -> str:
    """The text every pipeline answers: the question, and for multiple choice its lettered options and the ask."""
    if example.kind != "choice":
        return example.question
    letters = LETTERS[: len(example.options)]
    lines = [example.question, "", "Options:"]
    lines += [f"{letter}. {option}" for letter, option in zip(letters, example.options)]
    lines += ["", f"Answer with the letter ({letters[0]}-{letters[-1]}) of the one correct option, "
                  "as 'Answer: X'."]
    return "\n".join(lines)


@dataclass
class EvalResources:
    """The KG and the backend, built lazily once and shared by every pipeline of a run."""

    kg_factory: Callable[[], KnowledgeGraph]
    backend_factory: Callable[[], Backend]
    config: MirageConfig = field(default_factory=MirageConfig)
    _kg: KnowledgeGraph | None = None
    _backend: Backend | None = None

    @property
    def kg(self) -> KnowledgeGraph:
        if self._kg is None:
            kg = self.kg_factory()
            kg.link("fever")  # builds the linker's indexes now, so no question's timing pays for them
            self._kg = kg
        return self._kg

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            self._backend = self.backend_factory()
        return self._backend


def _option_picked(evidence: str, options: Sequence[str]) -> str | None:
    """The option the evidence names most often (ties and no mention: none), for the model-free baseline."""
    lowered = evidence.casefold()
    counts = [lowered.count(o.strip().casefold()) if o.strip() else 0 for o in options]
    best = max(counts, default=0)
    if best == 0 or counts.count(best) > 1:
        return None
    return LETTERS[counts.index(best)]


class RetrievePipeline:
    """No model: link the question, retrieve evidence, and answer with the evidence verbalised."""

    name = "retrieve"
    uses_model = False

    def __init__(self, resources: EvalResources) -> None:
        self.resources = resources

    def run(self, examples: Sequence[Example]) -> list[PipelineOutput]:
        kg = self.resources.kg
        budget = self.resources.config.retrieve_budget
        outputs = []
        for example in examples:
            started = time.perf_counter()
            result = kg.retrieve(question_text(example), budget=budget)
            elapsed = time.perf_counter() - started
            text = result.to_text()
            outputs.append(PipelineOutput(
                answer=text,
                abstained=not result.evidence,
                evidence_entities=frozenset(result.evidence_entities()),
                evidence_facts=len(result.evidence),
                linked=frozenset(linked_ids(result.mentions, LINK_TOP)),
                cited=[e.path for e in result.evidence],
                seconds={"retrieve": elapsed},
                latency=elapsed,
                picks_letter=example.kind == "choice",
                letter=_option_picked(text, example.options) if example.kind == "choice" else None,
                conditions=tuple(c.entity.id for c in result.differential.candidates) if result.differential else (),
            ))
        return outputs


class ReasonerPipeline:
    """The MIRAGE reasoner with the flags of one named pipeline (``MirageConfig.pipeline(name)``)."""

    uses_model = True

    def __init__(self, name: str, resources: EvalResources) -> None:
        if name not in REASONER_PIPELINES:
            raise ValueError(f"unknown reasoner pipeline {name!r}")
        self.name = name
        self.resources = resources
        self.config = MirageConfig.pipeline(name, **_settings(resources.config))
        self._mirage: Any = None

    def _reasoner(self) -> Any:
        if self._mirage is None:
            from mirage_reason.pipeline.coordinator import Mirage

            self._mirage = Mirage(self.resources.kg, self.resources.backend, self.config)
        return self._mirage

    def run(self, examples: Sequence[Example]) -> list[PipelineOutput]:
        mirage = self._reasoner()  # loads the model and the KG outside the timed part
        started = time.perf_counter()
        answers = mirage.answer_many([question_text(e) for e in examples])
        elapsed = time.perf_counter() - started
        uses_kg = not self.config.llm_only
        outputs = []
        for example, answer in zip(examples, answers):
            data = answer.to_json()
            # every path any chain had in front of it: its seed facts and its search results
            evidence = answer.evidence_paths() if uses_kg else None
            linked = None
            if uses_kg:
                mentions = self.resources.kg.link(question_text(example), top=LINK_TOP)
                linked = frozenset(linked_ids(mentions, LINK_TOP))
            timings = dict(answer.timings)
            latency = timings.pop("total", None)
            outputs.append(PipelineOutput(
                answer=answer.text,
                abstained=bool(answer.abstained),
                evidence_entities=frozenset(answer.evidence_entities()) if uses_kg else None,
                evidence_facts=len(evidence) if evidence is not None else None,
                linked=linked,
                cited=list(answer.cited_paths()) if uses_kg else None,
                tokens={k: int(v) for k, v in answer.tokens.items() if k not in ("total", "prompt")},
                prompt_tokens=int(answer.tokens.get("prompt", 0)),
                seconds={k: float(v) for k, v in timings.items()},
                latency=float(latency) if latency is not None else elapsed / max(1, len(examples)),
                trace=data,
            ))
        return outputs


def _settings(base: MirageConfig) -> dict[str, Any]:
    """The run's settings (budgets, sampling, seed) without the pipeline flags, which the name decides."""
    flags = {"use_decomposer", "use_synthesizer", "single_chain", "llm_only", "seed_evidence"}
    defaults = MirageConfig()
    changed = {k: v for k, v in base.to_json().items() if k not in flags and getattr(defaults, k) != v}
    return changed


def build_pipeline(name: str, resources: EvalResources) -> Pipeline:
    """The pipeline called ``name`` (one of ``PIPELINE_NAMES``)."""
    if name == "retrieve":
        return RetrievePipeline(resources)
    if name in REASONER_PIPELINES:
        return ReasonerPipeline(name, resources)
    raise ValueError(f"unknown pipeline {name!r}; choose from {', '.join(PIPELINE_NAMES)}")
