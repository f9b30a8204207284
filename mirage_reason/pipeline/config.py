"""Every knob of the MIRAGE pipeline in one frozen value object, with presets for the ablation pipelines.

Defaults are the paper reference code's (DESIGN section 2): N_q=4, N_r=5, k=10, h=3, entity match cosine >= 0.7
over the top 3 candidates, chains sampled at 0.7/0.8/20/1.05, the decomposer at 0.6/0.95.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mirage_reason.backends.base import ConstraintKind, GenerationParams, can_constrain
from mirage_reason.pipeline.choices import parse_options

__all__ = ["LARGE_MODEL_PARAMS", "PIPELINES", "SMALL_MODEL_BUDGETS", "STRUCTURED_PARTS", "MirageConfig",
           "parse_settings"]

#: the parts of the pipeline whose model output can be constrained by the engine
STRUCTURED_PARTS = ("decompose", "chains", "choice", "wording")
#: ``structured="auto"``: chains and wording of a model this large (or of unknown size) use the paper's free text;
#: smaller models, which cannot follow a free-text protocol they were never trained on, get constrained actions
LARGE_MODEL_PARAMS = 10_000_000_000

#: pipeline name -> the flags that make it (the evaluation's baselines and ablations)
PIPELINES: dict[str, dict[str, Any]] = {
    "mirage": {},
    "mirage-no-decomposer": {"use_decomposer": False},
    "mirage-no-synthesizer": {"use_synthesizer": False},
    # Search-o1 style: one chain on the whole question, searching on its own, no seed evidence, its answer as is.
    "single-chain": {"single_chain": True, "use_decomposer": False, "use_synthesizer": False, "seed_evidence": False},
    "llm": {"llm_only": True, "use_decomposer": False, "use_synthesizer": False, "seed_evidence": False},
}

#: length budgets for a ~100M-parameter model on a laptop CPU (SmolLM2-135M: tens of tokens per second), used by
#: ``mirage-kg ask`` when it falls back to SmolLM2; the defaults above suit QwQ-32B, which thinks at length.
SMALL_MODEL_BUDGETS: dict[str, int] = {
    "max_new_tokens": 96,
    "max_chain_tokens": 192,
    "max_turns": 3,  # at most two searches, then the answer (each turn is prompt and decoding the CPU pays for)
    "max_result_lines": 10,  # each result block is prompt the CPU evaluates: ten facts per search
    "decomposer_max_new_tokens": 160,
    "synthesizer_max_new_tokens": 160,
    "seed_facts": 10,
}


@dataclass(frozen=True)
class MirageConfig:
    """Budgets, sampling settings and pipeline flags. Build an ablation with :meth:`pipeline`."""

    # -- the method's budgets
    n_q: int = 4  # at most this many sub-questions
    n_r: int = 5  # at most this many KG searches per chain
    k: int = 10  # anchor mode: neighbours per (relation, direction)
    max_hops: int = 3  # bridge mode: path length h
    max_paths: int = 5  # bridge mode: paths shown per search
    samples: int = 1  # chains per sub-question (they vote in the synthesizer)
    # chains per sub-question of a multiple-choice question (at least ``samples``): its letter is their majority
    # vote (self-consistency), a discrete answer where one sampled chain is a coin toss; 1 turns it off
    choice_samples: int = 5
    match_threshold: float = 0.7  # a mention links only to a candidate scoring at least this
    match_top: int = 3  # ... among this many candidates
    # -- chain sampling (the paper's QwQ-32B settings)
    temperature: float = 0.7
    top_p: float = 0.8
    top_k: int = 20
    repetition_penalty: float = 1.05
    # -- decomposer sampling
    decomposer_temperature: float = 0.6
    decomposer_top_p: float = 0.95
    # -- length bounds
    max_new_tokens: int = 2048  # per generation step of a chain
    max_chain_tokens: int = 8192  # per chain, all steps together
    max_turns: int = 12  # generation steps per chain
    decomposer_max_new_tokens: int = 512
    synthesizer_max_new_tokens: int = 1024
    # -- evidence put in front of the model
    seed_evidence: bool = True  # start every chain with retrieve()'s evidence for its sub-question
    retrieve_budget: int = 100  # retrieve(question, budget)
    seed_facts: int = 15  # a chain's own sub-question facts, ahead of its share of the question's evidence
    max_result_lines: int = 30  # facts per search result block
    max_query_chars: int = 200  # a longer search block is garbled output, not a query
    rank_by_question: bool = True  # anchor ranks neighbours by similarity to the chain's (sub-)question
    max_citations: int = 3  # paths cited per claim
    max_claims: int = 12  # surviving claims handed to the writer, strongest first
    # -- answers the knowledge graph does not support (free text; multiple choice always gets a letter)
    no_support: str = "flag"  # "flag": the chains' own answer, flagged; "abstain": decline to answer
    kinds: tuple[str, ...] = ()  # extra Turtle files of kinds and roles (MKG:entityKind, MKG:clinicalRole)
    # -- structured output (the engines' own constraints): "auto", "always" or "never". "auto": the decomposition
    # and a multiple-choice letter are constrained wherever the engine can; chains (JSON actions: anchor, bridge,
    # answer) and the cited wording too when the model is known to be smaller than LARGE_MODEL_PARAMS; else the
    # paper's free-text search markers. "always" constrains every part the engine can; "never" none.
    structured: str = "auto"
    min_searches: int = 1  # constrained chains: searches a chain makes before it may answer (when n_r allows)
    max_action_entities: int = 40  # constrained chains: entities a search action may name (question's first)
    # -- pipeline flags
    use_decomposer: bool = True
    use_synthesizer: bool = True
    single_chain: bool = False
    llm_only: bool = False
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("n_q", "samples", "choice_samples", "k", "max_hops", "max_paths", "match_top", "max_new_tokens",
                     "max_chain_tokens", "max_turns", "decomposer_max_new_tokens", "synthesizer_max_new_tokens",
                     "max_result_lines", "max_query_chars", "max_citations", "max_claims"):
            if getattr(self, name) < 1:
                raise ValueError(f"MirageConfig.{name} must be at least 1, not {getattr(self, name)}")
        for name in ("n_r", "seed_facts", "retrieve_budget"):
            if getattr(self, name) < 0:
                raise ValueError(f"MirageConfig.{name} must not be negative, not {getattr(self, name)}")
        if self.structured not in ("auto", "always", "never"):
            raise ValueError(f"MirageConfig.structured must be 'auto', 'always' or 'never', not {self.structured!r}")
        if self.min_searches < 0 or self.max_action_entities < 1:
            raise ValueError("MirageConfig.min_searches must not be negative and max_action_entities must be at least 1")
        if self.no_support not in ("flag", "abstain"):
            raise ValueError(f"MirageConfig.no_support must be 'flag' or 'abstain', not {self.no_support!r}")
        if isinstance(self.kinds, (str, bytes)):
            object.__setattr__(self, "kinds", (str(self.kinds),))
        object.__setattr__(self, "kinds", tuple(str(k) for k in self.kinds))
        if not 0.0 <= self.match_threshold <= 1.0:
            raise ValueError(f"MirageConfig.match_threshold must be in [0, 1], not {self.match_threshold}")

    @classmethod
    def pipeline(cls, name: str, **overrides: Any) -> MirageConfig:
        """The config of a named pipeline (see ``PIPELINES``), with any field overridden."""
        if name not in PIPELINES:
            raise ValueError(f"unknown pipeline {name!r}; choose one of {', '.join(PIPELINES)}")
        return cls(**{**PIPELINES[name], **overrides})

    @property
    def pipeline_name(self) -> str:
        """The name of the pipeline these flags make ("custom" when they match none)."""
        if self.llm_only:
            return "llm"
        if self.single_chain:
            return "single-chain"
        if not self.use_decomposer and self.use_synthesizer:
            return "mirage-no-decomposer"
        if self.use_decomposer and not self.use_synthesizer:
            return "mirage-no-synthesizer"
        if self.use_decomposer and self.use_synthesizer:
            return "mirage"
        return "custom"

    def samples_for(self, question: str) -> int:
        """Chains per sub-question for ``question``: ``choice_samples`` for a multiple-choice question answered by
        the synthesizer's vote, else ``samples``."""
        if self.use_synthesizer and not (self.single_chain or self.llm_only) and parse_options(question):
            return max(self.samples, self.choice_samples)
        return self.samples

    def constrains(self, backend: Any, part: str) -> bool:
        """Whether ``part`` (one of ``STRUCTURED_PARTS``) of the pipeline asks ``backend``'s engine for constrained
        output: the setting ``structured``, what the engine can enforce, and for "auto" the model's size
        (``backend.model_params`` where the backend knows it)."""
        if part not in STRUCTURED_PARTS:
            raise ValueError(f"unknown part {part!r}; one of {', '.join(STRUCTURED_PARTS)}")
        kind: ConstraintKind = "choice" if part == "choice" else "json_schema"
        if self.structured == "never" or not can_constrain(backend, kind):
            return False
        if self.structured == "always" or part in ("decompose", "choice"):
            return True
        params = getattr(backend, "model_params", None)
        return isinstance(params, int) and 0 < params < LARGE_MODEL_PARAMS

    def replace(self, **changes: Any) -> MirageConfig:
        return dataclasses.replace(self, **changes)

    def chain_params(self, max_new_tokens: int | None = None, seed: int | None = None) -> GenerationParams:
        return GenerationParams(
            max_new_tokens=max_new_tokens or self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            repetition_penalty=self.repetition_penalty,
            seed=seed,
        )

    def decomposer_params(self, seed: int | None = None) -> GenerationParams:
        return GenerationParams(
            max_new_tokens=self.decomposer_max_new_tokens,
            temperature=self.decomposer_temperature,
            top_p=self.decomposer_top_p,
            top_k=self.top_k,
            repetition_penalty=self.repetition_penalty,
            seed=seed,
        )

    def synthesizer_params(self, seed: int | None = None) -> GenerationParams:
        # Wording only: the claims are fixed already, so the chain settings are fine here.
        return self.chain_params(self.synthesizer_max_new_tokens, seed)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_settings(pairs: Any) -> dict[str, Any]:
    """``KEY=VALUE`` strings (``--set samples=3``) -> MirageConfig fields, typed by the field's default (int, float,
    bool, or None for the seed). Raises ``ValueError`` naming the pair and what is expected."""
    fields = {f.name for f in dataclasses.fields(MirageConfig)}
    defaults = MirageConfig()
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = str(pair).partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in fields:
            raise ValueError(f"--set {pair!r}: expected KEY=VALUE with KEY one of {', '.join(sorted(fields))}")
        default = getattr(defaults, key)
        raw = raw.strip()
        try:
            if isinstance(default, bool):
                if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(raw)
                value: Any = raw.lower() in ("true", "1", "yes")
            elif isinstance(default, int) or (default is None and key == "seed"):
                value = None if raw.lower() == "none" else int(raw)
            elif isinstance(default, float):
                value = float(raw)
            else:
                value = raw
        except ValueError:
            raise ValueError(f"--set {pair!r}: {raw!r} is not a valid {type(default).__name__}") from None
        out[key] = value
    return out
