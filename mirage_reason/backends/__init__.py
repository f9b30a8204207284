"""LLM backends behind one contract (:class:`Backend`: submit a :class:`CompletionRequest`, get a future), resolved
by name so a JSON config maps onto a call.

Engines load lazily: importing this package pulls in none of torch, llama.cpp, vLLM or httpx.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mirage_reason.backends.base import (
    Backend,
    BackendBase,
    Completion,
    CompletionRequest,
    GenerationParams,
    OutputConstraint,
    ThinkMode,
    apply_stop,
    can_constrain,
    chatml,
    derive_seed,
    split_think,
    strip_think,
)
from mirage_reason.backends.scripted import ScriptedBackend, ScriptedCall

if TYPE_CHECKING:
    from mirage_reason.backends.llamacpp_backend import LlamaCppBackend
    from mirage_reason.backends.llamacpp_server import LlamaServerBackend
    from mirage_reason.backends.openai_backend import OpenAIBackend
    from mirage_reason.backends.transformers_backend import TransformersBackend
    from mirage_reason.backends.vllm_backend import VLLMBackend

__all__ = [
    "Backend",
    "BackendBase",
    "Completion",
    "CompletionRequest",
    "GenerationParams",
    "LlamaCppBackend",
    "LlamaServerBackend",
    "OpenAIBackend",
    "OutputConstraint",
    "ScriptedBackend",
    "ScriptedCall",
    "ThinkMode",
    "TransformersBackend",
    "VLLMBackend",
    "apply_stop",
    "backend_names",
    "can_constrain",
    "chatml",
    "derive_seed",
    "get_backend",
    "split_think",
    "strip_think",
]

_REGISTRY: dict[str, tuple[str, str]] = {
    "transformers": ("mirage_reason.backends.transformers_backend", "TransformersBackend"),
    "llamacpp": ("mirage_reason.backends.llamacpp_backend", "LlamaCppBackend"),
    "llamacpp-server": ("mirage_reason.backends.llamacpp_server", "LlamaServerBackend"),
    "openai": ("mirage_reason.backends.openai_backend", "OpenAIBackend"),
    "vllm": ("mirage_reason.backends.vllm_backend", "VLLMBackend"),
    "scripted": ("mirage_reason.backends.scripted", "ScriptedBackend"),
}


def backend_names() -> list[str]:
    return sorted(_REGISTRY)


def _backend_class(name: str) -> type:
    module, attr = _REGISTRY[name]
    cls: type = getattr(importlib.import_module(module), attr)
    return cls


def get_backend(name_or_instance: str | type | Backend, **kwargs: Any) -> Backend:
    """Resolve a registry name (``"transformers"``, ``"llamacpp"``, ``"llamacpp-server"``, ``"openai"``, ``"vllm"``,
    ``"scripted"``), a
    class, or an instance.

    ``kwargs`` go to the constructor: ``get_backend("transformers", model="smollm2")``. An instance is returned as
    it is, and then ``kwargs`` must be empty.
    """
    if isinstance(name_or_instance, str):
        key = name_or_instance.strip().lower()
        if key not in _REGISTRY:
            raise ValueError(f"unknown backend {name_or_instance!r}; choose one of {', '.join(backend_names())}")
        backend: Backend = _backend_class(key)(**kwargs)
        return backend
    if isinstance(name_or_instance, type):
        built = name_or_instance(**kwargs)
        if not isinstance(built, Backend):
            raise TypeError(f"{name_or_instance.__name__} does not implement the Backend protocol")
        return built
    if isinstance(name_or_instance, Backend):
        if kwargs:
            raise TypeError(f"got an already built backend and extra arguments {sorted(kwargs)}")
        return name_or_instance
    raise TypeError(f"expected a backend name, class or instance, not {type(name_or_instance).__name__}")


def __getattr__(name: str) -> Any:
    for key, (_, attr) in _REGISTRY.items():
        if attr == name:
            return _backend_class(key)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
