"""Which engine and model a command uses when the user does not say: QwQ-32B on transformers with a CUDA GPU,
else SmolLM2 on llama.cpp in process (llama-cpp-python; measured faster on the CPU than transformers, and than
llama.cpp's own server on the shared 2-core machine, see docs/benchmarks.md), else on llama.cpp's server where only
that is installed, else transformers. Shared by ``mirage-kg ask``, ``eval`` and ``serve``."""

from __future__ import annotations

import importlib.util

__all__ = ["DEFAULT_GPU_MODEL", "ENGINES", "SMALL_MODEL", "choose_engine", "cuda_available", "is_small_model",
           "llama_server_available"]

DEFAULT_GPU_MODEL = "Qwen/QwQ-32B"
SMALL_MODEL = "smollm2"
#: the in-process engines a user can name, plus "auto" (decide as above)
ENGINES = ("auto", "transformers", "llamacpp", "llamacpp-server", "vllm")


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
        elif model is None or model.lower() == SMALL_MODEL or model.lower().endswith(".gguf"):
            kind = "llamacpp" if importlib.util.find_spec("llama_cpp") is not None else (
                "llamacpp-server" if llama_server_available() else "transformers")
        else:
            kind = "transformers"
    if model is None:
        model = DEFAULT_GPU_MODEL if kind == "vllm" or (kind == "transformers" and cuda_available()) else SMALL_MODEL
    return kind, model


def llama_server_available() -> bool:
    """Whether llama.cpp's ``llama-server`` binary is installed (the ``llamacpp-server`` extra or ``$PATH``)."""
    from mirage_reason.backends.local_models import find_llama_server

    binary = find_llama_server()
    return binary is not None and binary.is_file()


def is_small_model(model: str | None) -> bool:
    """SmolLM2 gets small length budgets (``SMALL_MODEL_BUDGETS``); QwQ-32B thinks at length."""
    return (model or "").lower() == SMALL_MODEL
