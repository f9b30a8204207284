"""Errors of the reasoner, grafted onto the one MIRAGE-KG tree so callers can catch ``MirageError`` everywhere.

    MirageError                       (mirage_kg.errors)
     +-- ReasonerError                the reasoner failed
          +-- BackendError            an LLM backend failed (``retryable``, ``hint``, ``endpoint``, ``status``)
               +-- MissingModelError  a model or tokenizer cannot be found locally (never retryable)
"""

from __future__ import annotations

from mirage_kg import MirageError

__all__ = ["BackendError", "MissingModelError", "ReasonerError"]


class ReasonerError(MirageError):
    """The reasoner (decomposer, chains, synthesizer or their backend) failed."""


class BackendError(ReasonerError):
    """An LLM backend failed.

    ``retryable`` says whether the same request may succeed later (connection refused, 429, 5xx, timeouts);
    ``hint`` says what to do about it; ``endpoint`` and ``status`` locate a remote failure.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        hint: str = "",
        endpoint: str | None = None,
        status: int | None = None,
    ) -> None:
        self.message = message
        self.retryable = retryable
        self.hint = hint
        self.endpoint = endpoint
        self.status = status
        super().__init__(f"{message}; {hint}" if hint else message)


class MissingModelError(BackendError):
    """A model, tokenizer or weight file is not available on this machine (nothing is downloaded for you)."""

    def __init__(self, model: str, hint: str) -> None:
        self.model = model
        super().__init__(f"model {model!r} is not available locally", retryable=False, hint=hint)
