"""Which engine and model a command uses when the user does not say: QwQ-32B on transformers with a CUDA GPU,
else SmolLM2 on llama.cpp (measured faster on the CPU than transformers, see docs/benchmarks.md), else SmolLM2 on
transformers where llama-cpp-python is not installed. Shared by ``mirage-kg ask`` and ``mirage-kg eval``."""

from __future__ import annotations

import importlib.util

__all__ = ["DEFAULT_GPU_MODEL", "ENGINES", "SMALL_MODEL", "choose_engine", "cuda_available", "is_small_model"]

DEFAULT_GPU_MODEL = "Qwen/QwQ-32B"
SMALL_MODEL = "smollm2"
#: the in-process engines a user can name, plus "auto" (decide as above)
ENGINES = ("auto", "transformers", "llamacpp", "vllm")


def cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def choose_engine(kind: str, model: str | None) -> tuple[str, str]:
    """``(engine, model)`` for ``--backend kind --model model`` (either may be left to choose)."""
    kind = kind.strip().lower()
    if kind == "auto":
        if cuda_available():
            kind = "transformers"
        elif importlib.util.find_spec("llama_cpp") is not None and (model is None or model.lower() == SMALL_MODEL
                                                                     or model.lower().endswith(".gguf")):
            kind = "llamacpp"
        else:
            kind = "transformers"
    if model is None:
        model = DEFAULT_GPU_MODEL if kind == "vllm" or (kind == "transformers" and cuda_available()) else SMALL_MODEL
    return kind, model


def is_small_model(model: str | None) -> bool:
    """SmolLM2 gets small length budgets (``SMALL_MODEL_BUDGETS``); QwQ-32B thinks at length."""
    return (model or "").lower() == SMALL_MODEL
