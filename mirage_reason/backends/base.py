"""The contract every LLM backend meets, and the text rules they all share.

The chain runner works on raw prompts (it appends search results and calls ``generate`` again), so completion is
the core operation; chat is only a way to build the first prompt. Stop-string trimming and ``<think>`` handling
live here so that a local model, a remote server and a scripted test double cut text in exactly the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "THINK_CLOSE",
    "THINK_OPEN",
    "Backend",
    "Completion",
    "GenerationParams",
    "ThinkMode",
    "apply_stop",
    "chatml",
    "normalize_stop",
    "parse_chatml",
    "split_think",
    "strip_think",
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


@runtime_checkable
class Backend(Protocol):
    """Turns raw prompts into completions, one batched call advancing many chains at once."""

    name: str

    def generate(
        self,
        prompts: Sequence[str],
        stop: Sequence[str] = (),
        params: GenerationParams = GenerationParams(),
    ) -> list[Completion]: ...

    def format_chat(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str: ...


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
