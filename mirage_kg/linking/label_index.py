"""The label index: every concept's labels (preferred and synonyms) with the lookup tables the linker needs, in
one SQLite file cached beside the store (``label_index_file``), read through the packed lookup where it has one;
its in-place update for a release's changed concepts."""

from __future__ import annotations

import json
import mmap
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from mirage_kg.graph.core import Graph
from mirage_kg.linking.label_tables import (INDEX_VERSION, LABEL_KEYS, choice_keys, entity_labels, fill_forms,
                                            fill_tables, fill_variants, form_rows, pack_texts, tune, unpack_texts)
from mirage_kg.linking.packed import Packed, in_memory, pack_lookup, variants
from mirage_kg.linking.text import content_words
from mirage_kg.model.records import Entity

if TYPE_CHECKING:
    import numpy as np

_BLOCK_CACHE = 64  # decoded blocks (and word postings) kept: the spans of one text share their words


class _Column:
    """One column of the index's entity table, read by position (``index.iris[idx]``) without holding it all."""

    def __init__(self, index: LabelIndex, column: int) -> None:
        self._index = index
        self._column = column

    def __getitem__(self, idx: int) -> str:
        packed = self._index._packed or self._index.packed_lookup()
        if packed is not None:  # the entity kept decoded by the packed lookup: no tuple on the way
            found = packed.recent.get(idx) or packed.record(idx)
            return found.label if self._column else found.iri
        return self._index.entity_row(idx)[self._column]

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
    its entity, kind, normalised and folded forms), ``packed`` (the lookups read into memory: ``Packed``),
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
        if meta.get("version") != str(INDEX_VERSION):
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
        self._packed: Packed | None = None  # read on first use

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
            fill_tables(db, kg)
        except BaseException:
            db.close()
            if target != ":memory:":
                FsPath(target).unlink(missing_ok=True)
            raise
        if path is None:
            return cls(db)
        db.close()
        replace_cached(path, "labels-", None, FsPath(target))
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

    def packed_lookup(self) -> Packed | None:
        """The packed lookup, read on first use; None when the index has none (two forms shared a digest)."""
        if self._packed is None and self._has_packed:
            with self._lock:
                if self._packed is None:
                    def read(name: str) -> bytes | mmap.mmap:
                        size = self._db.execute("SELECT coalesce(sum(length(data)), 0) FROM packed WHERE name = ?",
                                                (name,)).fetchone()[0]
                        parts = self._db.execute("SELECT data FROM packed WHERE name = ? ORDER BY part", (name,))
                        return in_memory(size, (row[0] for row in parts))

                    self._packed = Packed(read)
        return self._packed

    def entity_row(self, idx: int) -> tuple[str, str]:
        packed = self.packed_lookup()
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
        packed = self.packed_lookup()
        if packed is not None:
            return packed.record(idx)
        iri, name = self.entity_row(idx)
        return Entity(iri, name)

    def exact(self, text: str) -> list[tuple[int, int]]:
        """(entity, kind) of the labels written exactly ``text``, by entity."""
        packed = self.packed_lookup()
        if packed is not None:
            spans = packed.spans(text)
            if spans is None:
                return []
            first, normalised, _ = spans  # a form's written rows (levels 0-1) come before its normalised ones
            return sorted(zip(packed.idxs[first:normalised], packed.levels[first:normalised]))
        return self._rows("SELECT idx, level FROM forms WHERE form = ? AND level < 2 ORDER BY idx, level", (text,))

    def dictionary(self, text: str, key: str) -> list[tuple[int, int, int]]:
        """(entity, kind, 0) of labels written ``text`` and (entity, kind, 1) of labels normalised to ``key``."""
        packed = self.packed_lookup()
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
        packed = self.packed_lookup()
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
        packed = self.packed_lookup()
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
            if key in self._blocks:  # the spans of one text share their words: read each block once
                self._blocks.move_to_end(key)
                return self._blocks[key]
        rows = self._rows("SELECT ids, texts FROM blocks WHERE key = ?", (key,))
        found = (np.frombuffer(rows[0][0], dtype=np.int32), unpack_texts(rows[0][1])) if rows else None
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
                for variant in variants(word):
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
        packed = self.packed_lookup()
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
        packed = self.packed_lookup()
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
        packed = self.packed_lookup()
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
        wanted = list(dict.fromkeys(iris))
        with self._lock:
            if self.path != ":memory:":
                self._db.close()  # its read lock, held for speed, would keep the writer out
                db = sqlite3.connect(self.path, check_same_thread=False)
            else:
                db = self._db
            try:
                db.execute("CREATE INDEX IF NOT EXISTS entities_iri ON entities(iri)")
                db.execute("CREATE INDEX IF NOT EXISTS labels_idx ON labels(idx)")
                touched, written = self._rewrite_entities(db, kg, wanted)
                changes, word_changes, max_tokens = self._rewrite_choices(db, touched)
                self._rewrite_blocks(db, changes)
                self._rewrite_words(db, word_changes)
                counts = self._repack(db, max_tokens)
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

    def _rewrite_entities(self, db: sqlite3.Connection, kg: Graph, wanted: list[str]) -> tuple[set[str], int]:
        """``update``'s first step: each wanted entity's rows (entities, labels, forms) replaced by what ``kg``
        holds now; returns the folded labels touched (old and new) and the label rows written."""
        non = kg.non_concepts()
        touched: set[str] = set()
        written = 0
        next_idx = (db.execute("SELECT MAX(idx) FROM entities").fetchone()[0] or -1) + 1
        for iri in wanted:
            found = db.execute("SELECT idx FROM entities WHERE iri = ?", (iri,)).fetchone()
            rows = [] if iri in non else [
                (k, q.object.value, q.object.lang) for k, key in enumerate(LABEL_KEYS)
                for q in kg.store.quads(iri, key, None)
                if q.object.kind == "literal" and q.object.value.strip()]
            if found is not None:
                idx = found[0]
                old = db.execute("SELECT text, kind, norm, folded FROM labels WHERE idx = ?", (idx,)).fetchall()
                touched.update(r[3] for r in old)
                if not self._has_packed:  # a packed index keeps no forms table
                    db.executemany("DELETE FROM forms WHERE form = ? AND level = ? AND iri = ? AND idx = ?",
                                   [row[:4] for row in form_rows(idx, iri, "", old)])
                db.execute("DELETE FROM labels WHERE idx = ?", (idx,))
                db.execute("DELETE FROM entities WHERE idx = ?", (idx,))
            else:
                idx, next_idx = next_idx, next_idx + 1
            if not rows:
                continue
            name, labels = entity_labels(iri, rows)
            db.execute("INSERT INTO entities VALUES (?, ?, ?)", (idx, iri, name))
            db.executemany("INSERT INTO labels(text, idx, kind, norm, folded) VALUES (?, ?, ?, ?, ?)",
                           [(text, idx, kind, norm, folded) for text, kind, norm, folded in labels])
            if not self._has_packed:
                db.executemany("INSERT OR IGNORE INTO forms VALUES (?, ?, ?, ?, ?)",
                               form_rows(idx, iri, name, labels))
            touched.update(folded for _, _, _, folded in labels)
            written += len(labels)
        return touched, written

    def _rewrite_choices(self, db: sqlite3.Connection, touched: set[str]) -> tuple[
            dict[str, dict[int, str | None]], dict[str, dict[int, int | None]], int]:
        """Choices no label folds to any more dropped, new ones added; returns the changes to the blocks (key ->
        choice id -> text, None: drop) and to the word postings (word -> choice id -> length, None: drop), and the
        most words in a choice."""
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
                for key in choice_keys(folded):
                    changes.setdefault(key, {})[next_choice] = ordered
                for word in content_words(folded):
                    word_changes.setdefault(word, {})[next_choice] = min(len(folded), 65535)
                next_choice += 1
                max_tokens = max(max_tokens, len(folded.split()))
            elif have and not used:
                db.execute("DELETE FROM choices WHERE id = ?", have)
                for key in choice_keys(folded):
                    changes.setdefault(key, {})[have[0]] = None
                for word in content_words(folded):
                    word_changes.setdefault(word, {})[have[0]] = None
        return changes, word_changes, max_tokens

    def _rewrite_blocks(self, db: sqlite3.Connection, changes: dict[str, dict[int, str | None]]) -> None:
        """Each changed block re-read, merged with its changes and written back (or dropped when empty)."""
        import numpy as np  # not at import: numpy costs a one-shot lookup's start-up
        for key, change in changes.items():
            row = db.execute("SELECT ids, texts FROM blocks WHERE key = ?", (key,)).fetchone()
            merged = dict(zip(np.frombuffer(row[0], dtype=np.int32).tolist(), unpack_texts(row[1]))) \
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
                       (key, np.asarray(order, dtype=np.int32).tobytes(),
                        pack_texts([merged[i] for i in order])))

    def _rewrite_words(self, db: sqlite3.Connection, word_changes: dict[str, dict[int, int | None]]) -> None:
        """Each changed word's postings re-read, merged and written back; its variants follow where the index
        keeps them in SQLite (no packed lookup)."""
        import numpy as np  # not at import: numpy costs a one-shot lookup's start-up
        for word, word_change in word_changes.items():
            row = db.execute("SELECT ids, lens FROM words WHERE word = ?", (word,)).fetchone()
            lengths = dict(zip(np.frombuffer(row[0], dtype=np.int32).tolist(),
                               np.frombuffer(row[1], dtype=np.uint16).tolist())) if row else {}
            for choice_id, length in word_change.items():
                if length is None:
                    lengths.pop(choice_id, None)
                else:
                    lengths[choice_id] = length
            if not lengths:
                db.execute("DELETE FROM words WHERE word = ?", (word,))
                if not self._has_packed:
                    db.executemany("DELETE FROM variants WHERE variant = ? AND word = ?",
                                   [(variant, word) for variant in variants(word)])
                continue
            order = sorted(lengths)
            db.execute("INSERT OR REPLACE INTO words VALUES (?, ?, ?)",
                       (word, np.asarray(order, dtype=np.int32).tobytes(),
                        np.asarray([lengths[i] for i in order], dtype=np.uint16).tobytes()))
            if row is None and not self._has_packed:  # a packed index keeps no variants table
                db.executemany("INSERT OR IGNORE INTO variants VALUES (?, ?)",
                               [(variant, word) for variant in variants(word)])

    def _repack(self, db: sqlite3.Connection, max_tokens: int) -> dict[str, int]:
        """The packed lookup rebuilt whole (one sorted stream of the forms), the SQLite lookup tables kept or
        dropped to match, and the meta counts written; returns them."""
        db.execute("DELETE FROM packed")  # re-packed whole: one sorted stream of the forms, no SQL per row
        packed = pack_lookup(db)
        if not packed and self._has_packed:  # no longer packed: its lookups now come from SQLite
            fill_forms(db)
            fill_variants(db)
        elif packed and not self._has_packed:
            db.execute("DELETE FROM forms")
            db.execute("DELETE FROM variants")
        counts = {"entities": db.execute("SELECT COUNT(*) FROM entities").fetchone()[0],
                  "labels": db.execute("SELECT COUNT(*) FROM labels").fetchone()[0],
                  "choices": db.execute("SELECT COUNT(*) FROM choices").fetchone()[0],
                  "max_tokens": max_tokens, "packed": int(packed)}
        db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in counts.items()])
        return counts


# A dictionary lookup is two reads of the forms table, the written form's levels and the normalised form's, each
# in ranking order (level, IRI) and stopped after ?3 rows: a name thousands of concepts share reads a few.
_RANKED_SQL = ("SELECT * FROM (SELECT level, idx, iri, name FROM forms WHERE form = ?1 AND level < 2 "
               "ORDER BY level, iri LIMIT ?3) UNION ALL SELECT * FROM (SELECT level, idx, iri, name FROM forms "
               "WHERE form = ?2 AND ?2 != '' AND level >= 2 ORDER BY level, iri LIMIT ?3)")


def _reader(path: FsPath) -> sqlite3.Connection:
    """A read-only connection to an index file that keeps its shared lock: SQLite then skips the lock and
    change checks it makes before every statement (three quarters of a lookup's time). A published index is
    never written (a build or an update writes a copy and moves it in place); ``LabelIndex.update`` reopens.
    (Mapping the file was tried: no faster on a 1.2 GB index, and every page touched counts as resident.)"""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    tune(connection)
    connection.execute("PRAGMA locking_mode = EXCLUSIVE")
    return connection


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def replace_cached(path: FsPath, prefix: str, text: str | None, ready: FsPath | None = None) -> None:
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
