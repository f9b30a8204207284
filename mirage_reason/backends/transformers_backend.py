"""Run a Hugging Face causal LM in-process through transformers' own ``generate`` (the default on a GPU: QwQ-32B,
bf16, accelerate ``device_map``).

Requests queue on one engine thread; each call to ``generate`` takes the oldest request and every queued one with
the same stop strings and sampling settings (seed and max tokens included: one batch shares one RNG stream and one
length, so a request's output never depends on what it was batched with), left-padded into one batch. Stop strings
are transformers' own ``stop_strings``. Two things kept here because stock ``generate`` gets them wrong for us: its
repetition penalty also counts left padding (so a padded row sampled differently from the same prompt alone), and a
stop string may end inside a token, so the text is cut again at the first stop string after decoding. Output
constraints are xgrammar's (``pip install xgrammar``, in the ``[llm]`` extra): a JSON schema or the choices' grammar
compiled once for the tokenizer and applied by xgrammar's own logits processor; without xgrammar the backend says it
honours none and fails a constrained request.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage_kg import MissingExtraError
from mirage_reason.backends.base import (
    BackendBase,
    Completion,
    CompletionRequest,
    EngineThread,
    GenerationParams,
    OutputConstraint,
    ThinkMode,
    apply_stop,
    chatml,
    refuse_constraint,
    strip_think,
    usable_cores,
)
from mirage_reason.backends.local_models import SMOLLM2_ALIAS, smollm2_dir
from mirage_reason.errors import BackendError, MissingModelError

try:
    import torch
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        LogitsProcessor,
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingExtraError(exc.name or "transformers", "llm") from exc

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["TransformersBackend"]

DEFAULT_MODEL = "Qwen/QwQ-32B"
_SMALL_MODEL_PARAMS = 1_000_000_000


class PromptAwareRepetitionPenalty(LogitsProcessor):
    """CTRL-style repetition penalty over the prompt and the generated tokens, ignoring left padding.

    ``prompt_mask`` (rows x prompt width, 1 for a real token, 0 for padding) marks the padding; every position after
    the prompt is a generated token and counts.
    """

    def __init__(self, penalty: float, prompt_mask: torch.Tensor) -> None:
        self.penalty = penalty
        self.prompt_mask = prompt_mask

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        real = torch.ones(input_ids.shape, dtype=torch.int32, device=input_ids.device)
        width = self.prompt_mask.shape[1]
        real[:, :width] = self.prompt_mask.to(device=input_ids.device, dtype=torch.int32)
        # scatter_add, not scatter: a token id can sit at a pad position and a real one in the same row.
        seen = torch.zeros(scores.shape, dtype=torch.int32, device=scores.device).scatter_add_(1, input_ids, real) > 0
        penalised = torch.where(scores < 0, scores * self.penalty, scores / self.penalty)
        return torch.where(seen, penalised, scores)


class TransformersBackend(BackendBase):
    """A local model through ``transformers``; ``model`` is a hub id, a local directory or ``"smollm2"``.

    ``device_map="auto"`` is used only when a GPU and accelerate are present; on the CPU the model loads plainly and
    ``generate`` runs torch on ``threads`` threads (default: one for models under 1B parameters, which ran fastest
    on small CPUs, else every usable core), putting the process-wide setting back afterwards.
    ``max_batch_size`` bounds the rows of one ``generate`` call. ``think="strip"`` drops a finished
    ``<think>...</think>`` block from every completion; ``"keep"`` (the default, what a resumable chain needs)
    returns the text as generated.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        *,
        device_map: str | dict[str, Any] | None = "auto",
        dtype: str | torch.dtype = "auto",
        trust_remote_code: bool = False,
        threads: int | None = None,
        gguf_file: str | None = None,
        think: ThinkMode = "keep",
        max_batch_size: int | None = None,
        name: str | None = None,
    ) -> None:
        _check_think(think)  # before a possibly long load
        model_id = str(model)
        hf_model, tokenizer = _load(model_id, device_map, dtype, trust_remote_code, gguf_file)
        self._setup(hf_model, tokenizer, name or model_id, threads, think, max_batch_size)

    @classmethod
    def from_model(
        cls,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        name: str | None = None,
        threads: int | None = None,
        think: ThinkMode = "keep",
        max_batch_size: int | None = None,
    ) -> TransformersBackend:
        """Wrap a model and tokenizer that are already loaded (a fine-tuned model, :func:`tiny_model`, ...)."""
        self = cls.__new__(cls)
        name = name or str(model.config._name_or_path or type(model).__name__)
        self._setup(model, tokenizer, name, threads, think, max_batch_size)
        return self

    def _setup(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        name: str,
        threads: int | None,
        think: ThinkMode,
        max_batch_size: int | None,
    ) -> None:
        _check_think(think)
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.think: ThinkMode = think
        self.max_batch_size = max_batch_size or 32
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        self._pad_id = int(tokenizer.pad_token_id)
        self._eos_ids = _eos_ids(model, tokenizer)
        self.device = model.device
        self.model_params = int(model.num_parameters())  # MirageConfig.constrains reads it
        self.threads: int | None = None
        if self.device.type == "cpu":
            small = model.num_parameters() < _SMALL_MODEL_PARAMS
            self.threads = threads or (1 if small else usable_cores())
        self._grammars: dict[str, Any] = {}
        self._compiler: Any = None
        self.constraints = frozenset({"json_schema", "choice"}) if _xgrammar() is not None else frozenset()
        self._engine = EngineThread(self._run_batch, name=name, max_batch=self.max_batch_size,
                                    compatible=lambda a, b: (a.stop == b.stop and a.params == b.params
                                                             and a.constraint == b.constraint))

    # -- the Backend contract ------------------------------------------------------------------------------------

    def submit(self, request: CompletionRequest) -> Future[Completion]:
        if request.constraint is not None and not self.constraints:
            failed: Future[Completion] = Future()
            failed.set_exception(refuse_constraint(self.name, request.constraint,
                                                   "xgrammar is not installed (pip install xgrammar)"))
            return failed
        return self._engine.submit(request)

    def format_chat(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            return chatml(messages, add_generation_prompt=add_generation_prompt)
        text = self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
        )
        return str(text)

    def close(self) -> None:
        self._engine.close()

    # -- internals -----------------------------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes as a prompt (what ``Completion.prompt_tokens`` reports)."""
        return len(self._encode(text))

    def _encode(self, prompt: str) -> list[int]:
        # A prompt built by a chat template already carries its BOS; adding another one changes the output.
        bos = self.tokenizer.bos_token
        add_special = not (bos and prompt.startswith(bos))
        return list(self.tokenizer(prompt, add_special_tokens=add_special)["input_ids"])

    def _run_batch(self, requests: list[CompletionRequest]) -> list[Completion]:
        """One ``generate`` call for requests that share stop strings and settings (the engine thread's batch)."""
        stop, params = requests[0].stop, requests[0].params
        if params.max_new_tokens < 1:
            raise BackendError(f"max_new_tokens must be at least 1, not {params.max_new_tokens}")
        encoded = [self._encode(r.prompt) for r in requests]
        width = max(len(ids) for ids in encoded)
        window = getattr(self.model.config, "max_position_embeddings", None)
        if window is not None and width + params.max_new_tokens > window:
            raise BackendError(f"a prompt of {width} tokens + {params.max_new_tokens} new ones does not fit "
                               f"{self.name}'s context window of {window} tokens",
                               hint="shorten the prompt or lower max_new_tokens")
        input_ids = torch.tensor([[self._pad_id] * (width - len(ids)) + ids for ids in encoded])
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
        processors = LogitsProcessorList()
        if requests[0].constraint is not None:  # first: the warpers below then only see tokens the grammar allows
            processors.append(self._grammar_processor(requests[0].constraint))
        if params.repetition_penalty != 1.0:
            processors.append(PromptAwareRepetitionPenalty(params.repetition_penalty, attention))
        # The stock warpers are switched off below so the model's generation_config defaults cannot slip in.
        processors.extend(_warpers(params))
        kwargs: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "do_sample": not params.greedy,
            "temperature": 1.0,
            "top_k": 0 if not params.greedy else 50,  # 50 is the stock default: greedy then raises no warning
            "top_p": 1.0,
            "repetition_penalty": 1.0,
            "pad_token_id": self._pad_id,
            "eos_token_id": sorted(self._eos_ids),
            "logits_processor": processors,
        }
        if stop:
            kwargs["stop_strings"] = list(stop)
            kwargs["tokenizer"] = self.tokenizer
        with _torch_threads(self.threads), torch.inference_mode():
            if not params.greedy and params.seed is not None:
                torch.manual_seed(params.seed)  # one seed per batch: every request in it carries this seed
            output = self.model.generate(
                input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device), **kwargs
            )
        generated = output[:, width:].tolist()
        return [self._finish(ids, len(prompt), stop, params.max_new_tokens) for ids, prompt in zip(generated, encoded)]

    def _grammar_processor(self, constraint: OutputConstraint) -> Any:
        """xgrammar's logits processor for one ``generate`` call (it keeps per-row matcher state)."""
        xgr = _xgrammar()
        key = constraint.key
        if key not in self._grammars:
            if self._compiler is None:
                vocab = int(self.model.get_output_embeddings().weight.shape[0])
                info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=vocab,
                                                          stop_token_ids=sorted(self._eos_ids))
                self._compiler = xgr.GrammarCompiler(info)
            try:
                if constraint.choices:
                    self._grammars[key] = self._compiler.compile_grammar(constraint.gbnf())
                else:
                    # compact JSON (no free whitespace): a model cannot wander in blanks until its tokens run out
                    self._grammars[key] = self._compiler.compile_json_schema(json.dumps(constraint.json_schema),
                                                                             any_whitespace=False)
            except (RuntimeError, ValueError) as exc:
                raise BackendError(f"xgrammar cannot compile this {constraint.kind} constraint: {exc}",
                                   hint="simplify the JSON schema to what xgrammar supports") from exc
        return xgr.contrib.hf.LogitsProcessor(self._grammars[key])

    def _finish(self, ids: list[int], prompt_tokens: int, stop: tuple[str, ...], limit: int) -> Completion:
        end = next((i for i, t in enumerate(ids) if t in self._eos_ids), None)
        body = ids if end is None else ids[:end]
        if self._pad_id not in self._eos_ids:  # rows that finished early are filled with padding
            while body and body[-1] == self._pad_id:
                body = body[:-1]
        text, fired = apply_stop(self.tokenizer.decode(body, skip_special_tokens=False), stop)
        unknown = False
        if fired is not None:
            finish, used = "stop", len(body)
        elif end is not None:
            finish, used = "stop", end + 1  # the EOS token was generated too
        elif stop and len(body) < limit:
            # transformers' stop criteria also read the prompt: a stop string straddling its end stopped the row
            finish, used, unknown = "stop", len(body), True
        else:
            finish, used = "length", len(body)
        if self.think == "strip":
            text = strip_think(text)
        return Completion(text, prompt_tokens, used, finish, fired, stop_unknown=unknown)


def _xgrammar() -> Any:
    """xgrammar with its transformers logits processor, or None where it is not installed."""
    try:
        import xgrammar
        import xgrammar.contrib.hf  # noqa: F401
    except ImportError:
        return None
    return xgrammar


def _warpers(params: GenerationParams) -> LogitsProcessorList:
    """Sampling warpers in vLLM's order after the penalty (temperature, top-k, top-p); none when greedy."""
    warpers = LogitsProcessorList()
    if not params.greedy:
        warpers.append(TemperatureLogitsWarper(params.temperature))
        if params.top_k > 0:
            warpers.append(TopKLogitsWarper(params.top_k))
        if 0.0 < params.top_p < 1.0:
            warpers.append(TopPLogitsWarper(params.top_p))
    return warpers


@contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """Run torch's CPU ops on ``threads`` threads inside the block only (the setting is process-wide)."""
    before = torch.get_num_threads()
    if threads is None or threads == before:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_think(think: str) -> None:
    if think not in ("keep", "strip"):
        raise ValueError(f"think must be 'keep' or 'strip', not {think!r}")


def _eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> set[int]:
    ids: set[int] = set()
    configured = getattr(model.generation_config, "eos_token_id", None)
    if configured is None:
        configured = model.config.eos_token_id
    for value in configured if isinstance(configured, list) else [configured]:
        if value is not None:
            ids.add(int(value))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def _looks_like_path(model_id: str) -> bool:
    # Hub ids are "name" or "namespace/name"; anything else is meant as a local path.
    return model_id.startswith((".", "/", "~")) or model_id.count("/") > 1 or "\\" in model_id


def _load(
    model_id: str,
    device_map: str | dict[str, Any] | None,
    dtype: str | torch.dtype,
    trust_remote_code: bool,
    gguf_file: str | None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    source: str | Path = model_id
    if model_id.lower() == SMOLLM2_ALIAS:
        source = smollm2_dir()
    elif Path(model_id).expanduser().exists():
        source = Path(model_id).expanduser()
    elif _looks_like_path(model_id):
        raise MissingModelError(model_id, "no such directory; pass an existing model directory or a hub id")
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    model_kwargs: dict[str, Any] = {"dtype": dtype}
    if device_map is not None and (device_map != "auto" or _gpu_with_accelerate()):
        model_kwargs["device_map"] = device_map
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs, **model_kwargs)
    except OSError as exc:
        raise MissingModelError(model_id, _missing_hint(model_id, source, exc)) from exc
    return model, tokenizer


def _gpu_with_accelerate() -> bool:
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _missing_hint(model_id: str, source: str | Path, exc: OSError) -> str:
    if isinstance(source, Path):
        return f"{source} exists but could not be loaded as a model ({exc}); it needs config.json and weights"
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    why = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face hub cannot be reached"
    return (
        f"it is not in the local Hugging Face cache and {why}; run `huggingface-cli download {model_id}` on a machine "
        "with network access and copy the cache (~/.cache/huggingface) here, or pass a local model directory; "
        f"for a small offline model use model={SMOLLM2_ALIAS!r}"
    )
