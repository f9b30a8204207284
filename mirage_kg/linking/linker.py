"""Entity linking: words -> ranked KG entities, by id, exact label, normalised label, synonym, fuzzy match
(rapidfuzz) and embedding similarity (sentence-transformers, optional).

The label index and the label embeddings are built once per store and cached beside it (see
``mirage_kg.index.caching.cache_folder``), keyed by the store's fingerprint, so a load invalidates them."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from mirage_kg.graph.core import Graph
from mirage_kg.index.caching import cache_folder, store_fingerprint
from mirage_kg.index.sorted_arrays import held_in
from mirage_kg.linking import vectors as vector_index
from mirage_kg.linking.embedder import (LARGE_BUILD, Embedder, EmbeddingsBeingBuilt, encode_resumable, note,
                                        warn_once)
from mirage_kg.linking.label_index import LabelIndex, label_index_file, replace_cached
from mirage_kg.linking.packed import new_entity
from mirage_kg.linking.text import (STOPWORDS, block_keys, content_words, fold, is_acronym, is_stop, normalise,
                                    tokens)
from mirage_kg.model.namespaces import compress, is_identifier
from mirage_kg.model.records import Entity
from mirage_kg.store.base import Store

if TYPE_CHECKING:
    import numpy as np

METHODS = ("id", "exact", "normalised", "synonym", "fuzzy", "embedding")
_METHOD_RANK = {method: rank for rank, method in enumerate(METHODS)}
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
# An index this small (the default KG: 0.25M) may be scanned whole when nothing else matched: a scan costs ~0.12 us
# per label (40 ms at 0.33M, capping such mentions at 25/s), so past it, fuzzy matching compares only the labels
# whose words are one edit from the mention's (from memory, whatever the size), at most this many:
_FULL_SCAN = 300_000
_FUZZY_CANDIDATES = 200
_COMPLETE_WINDOW = 2000  # labels ranked per autocomplete request at most
_IDENT = re.compile(r"<[^<>\s]+>|\b[A-Za-z][\w.\-]*:[\w.\-]*\w")
_JOINS = re.compile(r",|\b(?:and|or|but|nor)\b", re.IGNORECASE)


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
# setting the slots directly, which ``_candidate`` does for the candidates an exact mention makes most of (up to
# five; ``mirage_kg.linking.packed.new_entity`` does the same for their entities). The objects are the very same
# (type, fields, equality, hash); a test checks that they set every field.
_new = object.__new__
_set_entity, _set_score = vars(Candidate)["entity"].__set__, vars(Candidate)["score"].__set__  # the slots'
_set_method, _set_same_as = vars(Candidate)["method"].__set__, vars(Candidate)["same_as"].__set__  # descriptors


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
        index.packed_lookup()  # the packed lookup is read with the index, not by the first mention
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
            warn_once("st", "sentence-transformers is not installed: entity linking skips embedding similarity "
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
                    warn_once(f"building {self.fingerprint}", "the label embeddings of this store are being built "
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
                replace_cached(path, f"embeddings-{model_key}-", None, tmp)
                replace_cached(path.with_name(f"embedtexts-{model_key}-{self.fingerprint}.json"),
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
            warn_once("usearch", f"usearch is not installed: embedding search scans all {len(matrix):,} label "
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
        built = VectorIndex.build(matrix, path, note=note if len(matrix) >= LARGE_BUILD else None)
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
                packed = index.packed_lookup()
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
            blocks = [b for w in words for k in block_keys(w) if (b := index.block(k)) is not None]
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
        words = sorted(content_words(key))
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
        packed = self.index.packed_lookup()
        entity_row = packed.entity if packed is not None else self.index.entity_row
        groups = self._groups()
        rep = groups.rep
        rows = {idx: entity_row(idx) for idx in scores}  # (IRI, name)
        if not groups:  # each entity stands for itself: best first, then by IRI
            order = sorted(scores.items(), key=lambda kv: (-kv[1][0], _METHOD_RANK[kv[1][1]], rows[kv[0]][0])) \
                if len(scores) > 1 else list(scores.items())
            return [_candidate(new_entity(*rows[idx]), round(score, 6), method) for idx, (score, method) in order[:top]]
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
            out.append(_candidate(new_entity(iri, name), round(score, 6), method, others))
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
                if all(is_stop(w) for w, _, _ in chunk):
                    continue
                if re.search(r"[.!?;]\s", text[start:end]):  # spans do not cross sentences
                    break
                # fuzzy and embedding spans neither start nor end with a function word, nor join two things
                content = (not is_stop(chunk[0][0]) and not is_stop(chunk[-1][0]) and not chunk[0][0].isdigit()
                           and not _JOINS.search(text[start:end]))
                out.append(_Span(start, end, j - i + 1, content))
        return out

    # --- similarity (anchor's rank_by) ---------------------------------------------------------------------------
    def similarity(self, text: str, labels: Sequence[str]) -> list[float]:
        """Cosine similarity of ``text`` to each label (embeddings), else a fuzzy token-set ratio in [0, 1]."""
        if not labels:
            return []
        if self.embedder is not None and self._embeddings_ready():
            vectors = self.embedder.encode([text, *labels])
            return [float(x) for x in vectors[1:] @ vectors[0]]
        from rapidfuzz import fuzz

        warn_once("rank", "ranking by similarity without embeddings: using a fuzzy token-set ratio")
        key = fold(text)
        return [fuzz.token_set_ratio(key, fold(label)) / 100.0 for label in labels]


def _union(blocks: Sequence[tuple[Any, list[str]]]) -> tuple[list[int], list[str]]:
    """The choices of some blocks, once each, by id (ids with their word-sorted texts)."""
    merged: dict[int, str] = {}
    for ids, texts in blocks:
        merged.update(zip(ids.tolist(), texts))
    order = sorted(merged)
    return order, [merged[i] for i in order]


def _has_content(text: str) -> bool:
    return any(not is_stop(w) for w, _, _ in tokens(text))


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
