"""A deterministic stand-in for an LLM, so the chain runner, the decomposer and the synthesizer test without one.

It obeys stop strings and token limits the way a real model does (counting whitespace-separated tokens), holds output
constraints the way a constraining engine does (a scripted text outside the request's constraint that was not cut by
its max tokens fails the request: no engine could have written it), and records every call (one per submitted request; one per ``generate`` call with all its prompts), so a test can check
what was asked. ``delay`` makes a completion take time on a worker thread, to test scheduling.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass

from mirage_reason.backends.base import (
    BackendBase,
    Completion,
    CompletionRequest,
    GenerationParams,
    OutputConstraint,
    ThinkMode,
    apply_stop,
    normalize_stop,
    refuse_constraint,
    strip_think,
    whitespace_tokens,
)
from mirage_reason.errors import BackendError

__all__ = ["ScriptedBackend", "ScriptedCall"]

_TOKEN = re.compile(r"\S+")


@dataclass(frozen=True)
class ScriptedCall:
    """One submitted request (one prompt) or one ``generate`` call (its prompts), as the backend saw it."""

    prompts: tuple[str, ...]
    stop: tuple[str, ...]
    params: GenerationParams
    constraint: OutputConstraint | None = None


class ScriptedBackend(BackendBase):
    """Replays ``script``: a list of raw completions handed out in order, or a function ``prompt -> completion``.

    With a list, ``cycle=True`` starts over when the list runs out; otherwise running out is a ``BackendError``.
    ``silent_stops=True`` acts like a server that does not say which stop string fired (llama.cpp's): a completion
    that ends on "stop" has ``stop=None`` and ``stop_unknown=True`` whenever stop strings were asked for.
    ``delay(prompt) -> seconds`` completes each request that long after it was submitted (on a timer thread), so a
    test can make one chain slow and check that the others do not wait for it; without it futures are done at once.
    The script is drawn from in submission order, whatever order the delays finish in. ``constraints`` are the
    kinds of output constraint it plays an engine honouring (``("json_schema", "choice")``; none by default: an engine
    without them, which refuses a constrained request, so a script of free text stays free text); ``model_params`` the size of the model it plays, where that matters.
    """

    def __init__(
        self,
        script: Sequence[str] | Callable[[str], str],
        *,
        cycle: bool = False,
        think: ThinkMode = "keep",
        name: str = "scripted",
        silent_stops: bool = False,
        delay: Callable[[str], float] | None = None,
        constraints: Sequence[str] = (),
        model_params: int | None = None,
    ) -> None:
        if isinstance(script, str):
            raise TypeError("script must be a list of completions or a callable, not a single string")
        self.name = name
        self.think: ThinkMode = think
        self.constraints = frozenset(constraints)
        self.model_params = model_params  # the size of the model it plays (MirageConfig.constrains reads it)
        self.calls: list[ScriptedCall] = []
        self._script = script if callable(script) else list(script)
        self._cycle = cycle
        self.silent_stops = silent_stops
        self._next = 0
        self._lock = threading.Lock()
        self._delay = delay
        self._timers: list[threading.Timer] = []

    @property
    def batch_sizes(self) -> list[int]:
        return [len(call.prompts) for call in self.calls]

    @property
    def prompts(self) -> list[str]:
        return [p for call in self.calls for p in call.prompts]

    def submit(self, request: CompletionRequest) -> Future[Completion]:
        future: Future[Completion] = Future()
        with self._lock:
            self.calls.append(ScriptedCall((request.prompt,), request.stop, request.params, request.constraint))
            try:
                if request.constraint is not None and request.constraint.kind not in self.constraints:
                    raise refuse_constraint(self.name, request.constraint, "this double plays an engine without it")
                raw = self._raw(request.prompt)
            except BackendError as exc:
                future.set_exception(exc)
                return future
        try:
            completion = self._complete(request.prompt, raw, request.stop, request.params, request.constraint)
        except BackendError as exc:
            future.set_exception(exc)
            return future
        seconds = self._delay(request.prompt) if self._delay is not None else 0.0
        if seconds <= 0:
            future.set_result(completion)
            return future
        timer = threading.Timer(seconds, _settle, (future, completion))
        timer.daemon = True
        self._timers.append(timer)
        timer.start()
        return future

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()

    def generate(
        self,
        prompts: Sequence[str],
        stop: Sequence[str] = (),
        params: GenerationParams = GenerationParams(),
        constraint: OutputConstraint | None = None,
    ) -> list[Completion]:
        batch = (prompts,) if isinstance(prompts, str) else tuple(prompts)
        stops = normalize_stop(stop)
        with self._lock:
            self.calls.append(ScriptedCall(batch, stops, params, constraint))
            if constraint is not None and constraint.kind not in self.constraints:
                raise refuse_constraint(self.name, constraint, "this double plays an engine without it")
            raws = [self._raw(p) for p in batch]
        return [self._complete(p, raw, stops, params, constraint) for p, raw in zip(batch, raws)]

    def _raw(self, prompt: str) -> str:
        if callable(self._script):
            return self._script(prompt)
        if self._next >= len(self._script):
            if not self._cycle or not self._script:
                raise BackendError(
                    f"scripted backend ran out after {self._next} completions",
                    hint="add entries to the script or pass cycle=True",
                )
            self._next = 0
        self._next += 1
        return self._script[self._next - 1]

    def _complete(self, prompt: str, raw: str, stop: tuple[str, ...], params: GenerationParams,
                  constraint: OutputConstraint | None = None) -> Completion:
        text, fired = apply_stop(raw, stop)
        tokens = list(_TOKEN.finditer(text))
        if len(tokens) > params.max_new_tokens:  # a real model runs out of tokens before it reaches the stop
            cut = tokens[params.max_new_tokens - 1].end() if params.max_new_tokens > 0 else 0
            text, fired, finish = text[:cut], None, "length"
        else:
            finish = "stop"
        if self.think == "strip":
            text = strip_think(text)
        used = min(len(tokens), params.max_new_tokens)
        if constraint is not None and finish == "stop" and fired is None:
            problem = constraint.check(text)
            if problem is not None:
                raise BackendError(f"scripted completion {text[:80]!r} is outside its request's {constraint.kind} "
                                   f"constraint ({problem}): no constraining engine could write it",
                                   hint="script text that the constraint allows")
        if self.silent_stops and stop and finish == "stop":
            return Completion(text, whitespace_tokens(prompt), used, finish, None, stop_unknown=True)
        return Completion(text, whitespace_tokens(prompt), used, finish, fired)


def _settle(future: Future[Completion], completion: Completion) -> None:
    """Complete a delayed request, unless its caller cancelled it meanwhile (as an engine drops a cancelled one)."""
    with contextlib.suppress(InvalidStateError):
        future.set_result(completion)
