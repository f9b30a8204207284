"""The contract every LLM backend meets, and the text rules they all share.

A backend takes :class:`CompletionRequest` s, each with its own prompt, stop strings and sampling settings (max
tokens and seed included), and hands back a :class:`~concurrent.futures.Future` per request that completes when that
completion is done: the engine (llama.cpp, transformers, vLLM, a server) decides how to batch what is in flight.
The chain runner works on raw prompts (it appends search results and submits the next turn), so completion is the
core operation; chat is only a way to build the first prompt. Stop-string trimming and ``<think>`` handling live
here so that a local model, a remote server and a scripted test double cut text in exactly the same way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from mirage_reason.backends.cores import free_cores, usable_cores
from mirage_reason.errors import BackendError

__all__ = [
    "THINK_CLOSE",
    "THINK_OPEN",
    "Backend",
    "BackendBase",
    "Completion",
    "CompletionRequest",
    "EngineThread",
    "GenerationParams",
    "OutputConstraint",
    "ThinkMode",
    "can_constrain",
    "check_honoured",
    "apply_stop",
    "chatml",
    "derive_seed",
    "normalize_stop",
    "refuse_constraint",
    "parse_chatml",
    "split_think",
    "strip_think",
    "free_cores",
    "sample_seed",
    "submit_all",
    "usable_cores",
    "whitespace_tokens",
]

ThinkMode = Literal["keep", "strip"]

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


@dataclass(frozen=True)
class GenerationParams:
    """Sampling settings; the defaults are the paper's chain settings (QwQ-32B)."""

    max_new_tokens: int = 256
    temperature: float = 0.7  # 0 => greedy
    top_p: float = 0.8
    top_k: int = 20
    repetition_penalty: float = 1.05
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class Completion:
    text: str  # generated text, with the stop string itself NOT included
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (a stop string fired or EOS) | "length"
    stop: str | None = None  # which stop string fired, if any
    # True when the generation ended on "stop" but the server does not say whether a stop string or the end of
    # sequence ended it (llama.cpp's and Ollama's servers): ``stop`` is then None even if a stop string fired.
    stop_unknown: bool = False
    # What the engine itself timed, where it says (llama.cpp): the prompt tokens it evaluated (not reused from its
    # cache) and the seconds that took, and the seconds spent generating ``completion_tokens``. None: not reported.
    prompt_evaluated: int | None = None
    prompt_seconds: float | None = None
    generation_seconds: float | None = None


ConstraintKind = Literal["json_schema", "choice"]


@dataclass(frozen=True, eq=False)
class OutputConstraint:
    """What a completion's text must be: a JSON value that matches ``json_schema``, or exactly one of ``choices``.

    The engine enforces it while it decodes, each with its own feature (llama.cpp grammars and JSON schemas, vLLM's
    structured outputs, xgrammar's logits processor for transformers, ``response_format`` on OpenAI-compatible
    servers); a backend that cannot lists no such kind in ``constraints`` and fails the request, never decoding
    unconstrained. A completion cut by max tokens (``finish_reason == "length"``) may still be unfinished JSON:
    :meth:`check` says so. Two constraints are equal when their schemas or choices are.
    """

    json_schema: Mapping[str, Any] | None = None
    choices: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", tuple(self.choices))
        if (self.json_schema is None) == (not self.choices):
            raise ValueError("an OutputConstraint takes either json_schema or choices, exactly one of them")
        if self.choices and (len(set(self.choices)) != len(self.choices) or not all(self.choices)):
            raise ValueError(f"choices must be distinct non-empty strings, not {self.choices!r}")
        if self.json_schema is not None:
            if not isinstance(self.json_schema, Mapping):
                raise ValueError(f"json_schema must be a JSON object, not {type(self.json_schema).__name__}")
            object.__setattr__(self, "json_schema", json.loads(json.dumps(self.json_schema)))

    @property
    def kind(self) -> ConstraintKind:
        return "choice" if self.choices else "json_schema"

    @property
    def key(self) -> str:
        """A canonical string of the constraint (equality, hashing, engine-side grammar caches)."""
        return json.dumps({"schema": self.json_schema, "choices": list(self.choices)}, sort_keys=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputConstraint) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def schema(self) -> dict[str, Any]:
        """The constraint as a JSON schema, for engines that only take schemas: choices become a string enum (the
        completion is then the chosen string as JSON, ``"B"``; :meth:`unwrap` turns it back into ``B``)."""
        if self.json_schema is not None:
            return dict(self.json_schema)
        return {"type": "string", "enum": list(self.choices)}

    def gbnf(self) -> str:
        """Choices as a GBNF grammar (llama.cpp's, also xgrammar's EBNF): one alternation of literals."""
        if not self.choices:
            raise ValueError("only a choice constraint has a literal grammar; give a JSON schema to the engine")
        return "root ::= " + " | ".join(_gbnf_literal(c) for c in self.choices) + "\n"

    def unwrap(self, text: str) -> str:
        """Text an engine decoded under :meth:`schema` as this constraint's text (a choice's JSON string back to
        the choice itself); anything else is returned as it is."""
        if self.choices:
            try:
                value = json.loads(text)
            except ValueError:
                return text
            if isinstance(value, str) and value in self.choices:
                return value
        return text

    def check(self, text: str) -> str | None:
        """Why ``text`` is not inside the constraint, or None when it is. A JSON schema is checked with the
        ``jsonschema`` library; without it this raises :class:`BackendError` (a check that cannot run never passes)."""
        schema = self.json_schema
        if schema is None:  # choices: a constraint holds exactly one of the two
            return None if text in self.choices else f"{text[:80]!r} is none of {', '.join(self.choices)}"
        try:
            # a raw line break inside a string is content, not a broken reply: llama-cpp-python's schema
            # converter lets a string hold control characters (llama.cpp's own excludes them)
            value = json.loads(text, strict=False)
        except ValueError as exc:
            return f"not JSON ({exc})"
        try:
            import jsonschema
        except ImportError as exc:
            raise BackendError("cannot check a completion against its JSON schema: jsonschema is not installed",
                               hint="pip install jsonschema (in the [llm] and [test] extras)") from exc
        error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
        return None if error is None else f"does not match the schema: {error.message}"

    def parse(self, text: str) -> Any:
        """The completion's value: the chosen string, or the parsed JSON; ``ValueError`` naming the problem when
        it is outside the constraint."""
        problem = self.check(text)
        if problem is not None:
            raise ValueError(problem)
        return text if self.choices else json.loads(text, strict=False)


def _gbnf_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def can_constrain(backend: Any, kind: ConstraintKind) -> bool:
    """Whether ``backend`` enforces ``kind`` of constraint ("json_schema", "choice") with its engine."""
    return kind in getattr(backend, "constraints", frozenset())


def check_honoured(name: str, constraint: OutputConstraint, text: str, finish_reason: str, where: str) -> None:
    """For an engine across a wire (a server may ignore a field it does not know): a finished completion outside its
    constraint raises :class:`BackendError`, so text the engine did not constrain never passes as constrained."""
    if finish_reason == "length":
        return
    problem = constraint.check(text)
    if problem is not None:
        raise BackendError(f"{where} did not hold {name}'s completion to its {constraint.kind} constraint ({problem}); "
                           "the server may ignore the field it was sent", endpoint=where,
                           hint="pick the structured= setting the server understands ('response_format' for vLLM, "
                                "SGLang and llama-server's chat API, 'llama.cpp' for llama-server), or 'none'")


def refuse_constraint(name: str, constraint: OutputConstraint, why: str) -> BackendError:
    """The error of a backend that cannot honour ``constraint``: the request fails, it is never run unconstrained."""
    return BackendError(f"backend {name!r} cannot honour a {constraint.kind} output constraint: {why}",
                        hint="check can_constrain(backend, kind) first and fall back to free text where it is False")


@dataclass(frozen=True)
class CompletionRequest:
    """One completion to make: a raw prompt, its stop strings, its own sampling settings (max tokens, seed) and
    optionally an :class:`OutputConstraint` the engine must keep the text inside."""

    prompt: str
    stop: tuple[str, ...] = ()
    params: GenerationParams = GenerationParams()
    constraint: OutputConstraint | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", normalize_stop(self.stop))


@runtime_checkable
class Backend(Protocol):
    """Takes completion requests and hands each completion back when it is done.

    ``submit`` must not block on the generation: it queues the request with the engine and returns a future, so the
    caller can run KG searches while the engine decodes. A completion never holds more than
    ``request.params.max_new_tokens`` tokens. Failures surface from ``future.result()`` as :class:`BackendError`
    (with ``retryable``). ``generate`` is the blocking convenience over ``submit`` for a list of prompts.
    """

    name: str

    def submit(self, request: CompletionRequest) -> Future[Completion]: ...

    def generate(
        self,
        prompts: Sequence[str],
        stop: Sequence[str] = (),
        params: GenerationParams = GenerationParams(),
        constraint: OutputConstraint | None = None,
    ) -> list[Completion]: ...

    def format_chat(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str: ...

    def close(self) -> None: ...


class BackendBase:
    """What every backend shares: ``generate`` over ``submit``, ChatML chat formatting, ``close`` and ``with``."""

    name: str = "backend"
    #: the kinds of :class:`OutputConstraint` the engine enforces ("json_schema", "choice"); none by default
    constraints: frozenset[str] = frozenset()

    def submit(self, request: CompletionRequest) -> Future[Completion]:  # pragma: no cover - abstract
        raise NotImplementedError

    def generate(
        self,
        prompts: Sequence[str],
        stop: Sequence[str] = (),
        params: GenerationParams = GenerationParams(),
        constraint: OutputConstraint | None = None,
    ) -> list[Completion]:
        """Submit every prompt, wait for all; with a seed, prompt ``i`` gets ``seed + i`` so that identical prompts
        still sample differently (and reproducibly). ``constraint`` applies to every prompt."""
        batch = [prompts] if isinstance(prompts, str) else list(prompts)
        stops = normalize_stop(stop)
        futures = self.submit_many([CompletionRequest(p, stops, _row_params(params, i), constraint)
                                    for i, p in enumerate(batch)])
        return [f.result() for f in futures]

    def submit_many(self, requests: Sequence[CompletionRequest]) -> list[Future[Completion]]:
        """Submit several requests at once, futures in the same order. The default submits each; an engine that
        can share work between them overrides it (llama.cpp's server: samples of one prompt as one request with
        n completions that share the prompt's evaluation). Each completion is what ``submit`` would give."""
        return [self.submit(r) for r in requests]

    def format_chat(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        return chatml(messages, add_generation_prompt=add_generation_prompt)

    def close(self) -> None:
        """Release the engine (threads, connections); the default has nothing to release."""

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _row_params(params: GenerationParams, row: int) -> GenerationParams:
    if params.seed is None or row == 0:
        return params
    return dataclasses.replace(params, seed=sample_seed(params.seed, row))


def derive_seed(base: int | None, *parts: Any) -> int | None:
    """A seed for one request, derived from the run's seed and what the request is (question, sub-question,
    sample, turn): reproducible whatever order requests finish in, and distinct for distinct ``parts``."""
    if base is None:
        return None
    digest = hashlib.blake2b(repr((base, *parts)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def sample_seed(seed: int | None, sample: int) -> int | None:
    """The seed of sample ``sample`` of a group of samples whose first has ``seed``: ``seed + sample``, the way
    llama.cpp's server seeds the completions of one request with n of them, so that the samples give the same
    seeds whether they go to the engine as one shared request or as separate ones."""
    return None if seed is None else seed + sample


def submit_all(backend: Backend, requests: Sequence[CompletionRequest]) -> list[Future[Completion]]:
    """``backend.submit_many(requests)`` where the backend has it, else one ``submit`` each."""
    many = getattr(backend, "submit_many", None)
    if many is None:
        return [backend.submit(r) for r in requests]
    futures = list(many(requests))
    if len(futures) != len(requests):
        raise BackendError(f"backend {backend.name!r} handed back {len(futures)} futures for {len(requests)} requests",
                           hint="this is a bug in the backend's submit_many; retrying will not help")
    return futures


class EngineThread:
    """One worker thread in front of an in-process engine that is not thread-safe (llama.cpp, a torch model).

    Requests queue in submission order; the thread takes the oldest and, up to ``max_batch``, the queued requests
    that ``compatible(first, other)`` allows in the same engine call, runs ``run_batch`` on them and completes their
    futures. An engine error fails the futures of that batch only, as a :class:`BackendError`.
    """

    def __init__(
        self,
        run_batch: Callable[[list[CompletionRequest]], list[Completion]],
        *,
        name: str,
        max_batch: int = 1,
        compatible: Callable[[CompletionRequest, CompletionRequest], bool] | None = None,
    ) -> None:
        self._run_batch = run_batch
        self._name = name
        self._max_batch = max(1, max_batch)
        self._compatible = compatible or (lambda a, b: True)
        self._queue: list[tuple[CompletionRequest, Future[Completion]]] = []
        self._wake = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=f"mirage-{name}", daemon=True)
        self._thread.start()

    def submit(self, request: CompletionRequest) -> Future[Completion]:
        future: Future[Completion] = Future()
        with self._wake:
            if self._closed:
                raise BackendError(f"backend {self._name!r} is closed", hint="build a new backend")
            self._queue.append((request, future))
            self._wake.notify()
        return future

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    def _take(self) -> list[tuple[CompletionRequest, Future[Completion]]] | None:
        with self._wake:
            while not self._queue and not self._closed:
                self._wake.wait()
            if not self._queue:
                return None
            first = self._queue[0][0]
            batch = [item for item in self._queue if self._compatible(first, item[0])][: self._max_batch]
            taken = {id(item) for item in batch}
            self._queue = [item for item in self._queue if id(item) not in taken]
        return [(r, f) for r, f in batch if f.set_running_or_notify_cancel()]

    def _work(self) -> None:
        while (batch := self._take()) is not None:
            if not batch:
                continue
            try:
                completions = self._run_batch([r for r, _ in batch])
            except BackendError as exc:
                for _, future in batch:
                    future.set_exception(exc)
                continue
            except Exception as exc:  # an engine bug or a bad request: fail these requests, keep serving others
                error = BackendError(f"backend {self._name!r} failed: {type(exc).__name__}: {exc}",
                                     hint="this looks like a bug or an unsupported request; retrying will not help")
                error.__cause__ = exc
                for _, future in batch:
                    future.set_exception(error)
                continue
            for (_, future), completion in zip(batch, completions, strict=True):
                future.set_result(completion)


def normalize_stop(stop: Sequence[str] | str | None) -> tuple[str, ...]:
    """A bare string is one stop string (not its characters); empty strings never fire."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = (stop,)
    return tuple(dict.fromkeys(s for s in stop if s))


def apply_stop(text: str, stop: Sequence[str]) -> tuple[str, str | None]:
    """Cut ``text`` at the earliest stop string; return the kept text and the stop that fired (or None).

    When two stop strings start at the same place the longer one is reported, as it is the more specific match.
    """
    best: tuple[int, int, str] | None = None
    for s in normalize_stop(stop):
        i = text.find(s)
        if i >= 0 and (best is None or (i, -len(s)) < (best[0], best[1])):
            best = (i, -len(s), s)
    if best is None:
        return text, None
    return text[: best[0]], best[2]


def split_think(text: str) -> tuple[str, str]:
    """Split a completion into ``(reasoning, answer)``.

    Handles ``<think>R</think>A``, ``R</think>A`` (QwQ's chat template opens the block inside the prompt) and an
    unfinished ``<think>R`` (a stop string fired mid-reasoning: everything is reasoning, no answer yet). Text with
    no think tags is all answer.
    """
    close = text.find(THINK_CLOSE)
    if close >= 0:
        head, answer = text[:close], text[close + len(THINK_CLOSE) :]
        open_ = head.find(THINK_OPEN)
        reasoning = head[open_ + len(THINK_OPEN) :] if open_ >= 0 else head
        return reasoning.strip(), answer.lstrip()
    open_ = text.find(THINK_OPEN)
    if open_ >= 0:
        return text[open_ + len(THINK_OPEN) :].strip(), text[:open_].strip()
    return "", text


def strip_think(text: str) -> str:
    """Drop a *finished* reasoning block; an unfinished one is kept whole so the caller can resume the chain."""
    if THINK_CLOSE not in text:
        return text
    return split_think(text)[1]


def whitespace_tokens(text: str) -> int:
    """A rough token count for when no tokenizer or server usage is available."""
    return len(text.split())


_CHATML_TURN = "<|im_start|>{role}\n{content}<|im_end|>\n"


def chatml(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True) -> str:
    """Render messages in ChatML, the template of Qwen/QwQ and SmolLM2, used when no tokenizer template exists."""
    out = "".join(_CHATML_TURN.format(role=m["role"], content=m["content"]) for m in messages)
    return out + "<|im_start|>assistant\n" if add_generation_prompt else out


_CHATML_RE = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>\n?|\Z)", re.DOTALL)


def parse_chatml(prompt: str) -> tuple[list[dict[str, str]], bool]:
    """Invert :func:`chatml`: return the messages and whether the last one is a partial answer to continue.

    A trailing empty assistant turn is just the generation prompt and is dropped; a trailing assistant turn with
    text in it is a partial answer (a resumed chain). A prompt with no ChatML markers is one user message.
    """
    if "<|im_start|>" not in prompt:
        return [{"role": "user", "content": prompt}], False
    messages: list[dict[str, str]] = []
    open_turn = False
    for match in _CHATML_RE.finditer(prompt):
        messages.append({"role": match.group(1), "content": match.group(2)})
        open_turn = not match.group(0).endswith(("<|im_end|>", "<|im_end|>\n"))
    if not (open_turn and messages[-1]["role"] == "assistant"):
        return messages, False
    if not messages[-1]["content"]:
        messages.pop()
        return messages, False
    return messages, True
