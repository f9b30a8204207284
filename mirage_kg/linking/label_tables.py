"""The SQLite tables of the label index: their schema, their build from a store's label literals (streamed, one
predicate at a time), an entity's label rows, and the ``forms`` and ``variants`` tables an index without the packed
lookup answers from."""

from __future__ import annotations

import sqlite3
from array import array
import zlib
from collections.abc import Iterable, Sequence

from mirage_kg.graph.core import Graph
from mirage_kg.graph.labels import pick_label
from mirage_kg.linking.packed import FORMS_SQL, pack_lookup, stream_rows, variants
from mirage_kg.linking.text import block_keys, content_words, fold, is_acronym, singular
from mirage_kg.model.namespaces import RDFS_LABEL, SKOS_ALT, SKOS_PREF, compress

#: the index file's format: a cached file of another version is rebuilt
INDEX_VERSION = 12


def form_rows(idx: int, iri: str, name: str, labels: Iterable[tuple[str, int, str, str]]
              ) -> list[tuple[str, int, str, int, str]]:
    """The forms rows of an entity's labels (text, kind, normalised, folded)."""
    return [row for text, kind, norm, _ in labels
            for row in ((text, kind, iri, idx, name), *(((norm, 2 + kind, iri, idx, name),) if norm else ()))]


def tune(db: sqlite3.Connection) -> None:
    """A connection's page cache and temporary storage, for a build and for a reader alike."""
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
LABEL_KEYS = (SKOS_PREF, RDFS_LABEL, SKOS_ALT)


def fill_tables(db: sqlite3.Connection, kg: Graph) -> None:
    """Build the index's tables in ``db`` from the store, in passes that keep nothing per label in memory except
    the block lists (ids and references to the choice texts): the raw label rows, the entities with their labels,
    the distinct folded labels (choices) with their blocks and word postings, then the packed lookup."""
    tune(db)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    db.executescript(_SCHEMA)
    fill_raw(db, kg)
    entity_count, label_count = fill_entities(db)
    choice_count, max_tokens = fill_choices(db)
    packed = pack_lookup(db)
    if not packed:  # lookups and near words then come from SQLite (packed, from memory: the tables would be
        fill_forms(db)  # dead weight, a third of the file)
        fill_variants(db)
    meta = {"version": INDEX_VERSION, "entities": entity_count, "labels": label_count,
            "choices": choice_count, "max_tokens": max_tokens, "packed": int(packed)}
    db.executemany("INSERT INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in meta.items()])
    db.commit()


def fill_raw(db: sqlite3.Connection, kg: Graph) -> None:
    """The ``raw`` table: every label literal of every concept, by label key, as the store holds it."""
    non = kg.non_concepts()
    for k, key in enumerate(LABEL_KEYS):
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


def fill_entities(db: sqlite3.Connection) -> tuple[int, int]:
    """The ``entities`` and ``labels`` tables from ``raw`` (dropped after): entities in (CURIE, IRI) order, each
    with its labels, preferred (by language, text) then synonyms. Returns (entities, labels) counted."""
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
        name, rows_out = entity_labels(iri, rows)
        entities.append((idx, iri, name))
        labels.extend((text, idx, kind, norm, folded) for text, kind, norm, folded in rows_out)
        if len(labels) >= 50_000:
            flush()

    current: str | None = None
    rows: list[tuple[int, str, str | None]] = []
    for iri, k, text, lang in stream_rows(db, "SELECT iri, k, text, lang FROM raw ORDER BY curie, iri"):
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
    return count["entities"], count["labels"]


def fill_choices(db: sqlite3.Connection) -> tuple[int, int]:
    """The ``choices`` (the distinct folded labels in order), ``blocks`` (each word's first and last four letters
    -> the choices holding it) and ``words`` (content word -> its choices and their lengths) tables. Returns the
    number of choices and the most words in one."""
    ids: dict[str, array[int]] = {}
    texts: dict[str, list[str]] = {}
    postings: dict[str, tuple[array[int], array[int]]] = {}  # content word -> the choices holding it and their lengths
    choices: list[tuple[int, str, str]] = []
    max_tokens = 1
    number = -1
    for (folded,) in stream_rows(db, "SELECT DISTINCT folded FROM labels WHERE folded != '' ORDER BY folded"):
        number += 1
        words = folded.split()
        max_tokens = max(max_tokens, len(words))
        # token-sort ratio is the plain ratio of word-sorted strings: sort the labels once, not per query
        ordered = " ".join(sorted(words))
        choices.append((number, folded, ordered))
        for key in choice_keys(folded):
            if key not in ids:
                ids[key] = array("i")
                texts[key] = []
            ids[key].append(number)
            texts[key].append(ordered)
        for word in content_words(folded):
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
                   ((key, ids[key].tobytes(), pack_texts(texts[key])) for key in sorted(ids)))
    del ids, texts
    ordered_words = sorted(postings)
    db.executemany("INSERT INTO words VALUES (?, ?, ?)",
                   ((word, postings[word][0].tobytes(), postings[word][1].tobytes()) for word in ordered_words))
    return number + 1, max_tokens


def fill_forms(db: sqlite3.Connection) -> None:
    """The ``forms`` table (sorted first, so its b-tree is appended to), which only an index without the packed
    lookup reads."""
    db.execute("DELETE FROM forms")
    db.execute(f"INSERT OR IGNORE INTO forms {FORMS_SQL}")


def fill_variants(db: sqlite3.Connection) -> None:
    """The ``variants`` table (each content word's deletion neighbourhood) from ``words``, staged and sorted by
    SQLite (millions of rows at UMLS size). Only an index without the packed lookup reads it (``near_words``): a
    packed one (every index but one whose forms' 128-bit digests clash) carries its own, in memory."""
    db.execute("DELETE FROM variants")
    db.execute("CREATE TEMP TABLE staged(variant TEXT NOT NULL, word TEXT NOT NULL)")
    batch: list[tuple[str, str]] = []
    for (word,) in stream_rows(db, "SELECT word FROM words ORDER BY word"):
        batch.extend((variant, word) for variant in variants(word))
        if len(batch) >= 200_000:
            db.executemany("INSERT INTO staged VALUES (?, ?)", batch)
            batch.clear()
    db.executemany("INSERT INTO staged VALUES (?, ?)", batch)
    db.execute("INSERT INTO variants SELECT variant, word FROM staged ORDER BY variant, word")
    db.execute("DROP TABLE staged")


def entity_labels(iri: str, rows: Sequence[tuple[int, str, str | None]]
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


def choice_keys(folded: str) -> set[str]:
    """The block keys of a folded label: each content word's first and last four letters."""
    return {k for w in content_words(folded) for k in block_keys(w)}


def pack_texts(texts: list[str]) -> bytes:
    # a block's texts share most of their letters: compressed, the blocks take a quarter of the room
    return zlib.compress("\n".join(texts).encode("utf-8"), 1)


def unpack_texts(data: bytes) -> list[str]:
    return zlib.decompress(data).decode("utf-8").split("\n")
