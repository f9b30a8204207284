"""The packed lookup of a label index: every form's 128-bit digest in a bucketed hash table with the range of
its rows (level and entity, in ranking order), the entities' IRIs and names, the choices' word-sorted texts and
entities, and the content words' postings with their SymSpell-style deletion variants (``variants``), written from
the index's SQLite tables into its ``packed`` table and read back into memory (``Packed``)."""

from __future__ import annotations

import hashlib
import mmap
import sqlite3
import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from mirage_kg.model.records import Entity

if TYPE_CHECKING:
    import numpy as np

# A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: three times the cost of
# setting the slots directly, which ``new_entity`` does for the entities an exact mention makes most of (up to
# five). The object is the very same (type, fields, equality, hash); a test checks that it sets every field.
_new = object.__new__
_set_iri, _set_label = vars(Entity)["iri"].__set__, vars(Entity)["label"].__set__  # the slots' descriptors


def new_entity(iri: str, label: str) -> Entity:
    """``Entity(iri, label)``, built in a third of the time."""
    made = _new(Entity)
    _set_iri(made, iri)
    _set_label(made, label)
    return made


# each label's forms: written (level = kind) and normalised (2 + kind), once per (form, level, entity), in the
# ranking order of a form's rows (level, then IRI)
FORMS_SQL = ("SELECT l.text AS form, l.kind AS level, e.iri AS iri, l.idx AS idx, e.name AS name FROM labels l "
             "JOIN entities e ON e.idx = l.idx UNION SELECT l.norm, 2 + l.kind, e.iri, l.idx, e.name FROM labels l "
             "JOIN entities e ON e.idx = l.idx WHERE l.norm != '' ORDER BY 1, 2, 3, 4")


def variants(word: str) -> set[str]:
    """A word and the word less any one letter: two words one edit apart (a letter inserted, deleted, replaced,
    or two swapped) share one of these (SymSpell's deletion neighbourhood)."""
    return {word, *(word[:i] + word[i + 1:] for i in range(len(word)))}


def stream_rows(db: sqlite3.Connection, sql: str) -> Iterator[Any]:
    """Rows of a query in batches (a second cursor may write meanwhile)."""
    cursor = db.cursor()
    cursor.execute(sql)
    while batch := cursor.fetchmany(20_000):
        yield from batch


_PART_BYTES = 1 << 28  # packed arrays are stored in parts of at most this size (an SQLite blob holds up to 1 GB)


def _form_digest(form: str) -> tuple[int, int]:
    """A form's 128-bit digest as two signed 64-bit ints: the key the lookup bisects on, and a check. Two stored
    forms with one digest are caught when the lookup is packed (then it stays in SQLite); a mention that is no
    stored form yet shares the digest of one is a 2^-128 chance per stored form."""
    return _TWO_INT64.unpack(hashlib.blake2b(form.encode("utf-8", "surrogatepass"), digest_size=16).digest())


_TWO_INT64 = struct.Struct("<qq")  # a digest's two halves, little-endian and signed, in one call


def pack_lookup(db: sqlite3.Connection) -> bool:
    """Write the ``packed`` table from ``labels`` and ``entities``: every distinct form's digest (sorted) with the
    range of its rows, each row's level and entity (a form's rows in ranking order: level, then IRI), and every
    entity's IRI and name as UTF-8 with their offsets. False (nothing written) when two forms share a digest."""
    import numpy as np
    from array import array

    keys, checks, numbers, levels, idxs = array("q"), array("q"), array("i"), array("b"), array("i")
    current: str | None = None
    key = check = 0
    number = -1
    for form, level, _, idx, _ in stream_rows(db, FORMS_SQL):
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
    parts: dict[str, Any] = {"group_table": table, "group_buckets": _group_buckets(row_keys[starts]), "row_levels": row_levels,
             "row_idx": np.frombuffer(idxs, dtype=np.int32)[order]}
    del keys, checks, numbers, levels, idxs, row_keys, order, starts, table, bounds
    # each entity's IRI and name one after the other, with where each starts: one entity's display data is
    # read from two places, not four
    text, ends = bytearray(), array("q")
    for idx, iri, name in stream_rows(db, "SELECT idx, iri, name FROM entities ORDER BY idx"):
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
    for choice_id, ordered in stream_rows(db, "SELECT id, sorted FROM choices ORDER BY id"):
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


_RECENT_ENTITIES = 4096  # entities the packed lookup keeps decoded (``Packed.record``)
_ANONYMOUS_FROM = 2 << 20  # packed arrays of this size or more go into anonymous memory (``in_memory``)


def in_memory(size: int, parts: Iterable[bytes]) -> bytes | mmap.mmap:
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
    """Whether ``variant`` is ``word`` or ``word`` less one letter (one of ``variants(word)``)."""
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
    for number, (word, ids, lens) in enumerate(stream_rows(db, "SELECT word, ids, lens FROM words ORDER BY word")):
        word_text += word.encode("utf-8", "surrogatepass")
        word_ends.append(len(word_text))
        posting_ids += ids
        posting_lens += lens
        posting_ends.append(len(posting_ids) // 4)
        for variant in variants(word):
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
    for choice_id, idx in stream_rows(db, "SELECT c.id, l.idx FROM labels l JOIN choices c "
                                          "ON c.folded = l.folded ORDER BY l.seq"):
        choice_ids.append(choice_id)
        entity_ids.append(idx)
    top = int(db.execute("SELECT COALESCE(MAX(id), -1) FROM choices").fetchone()[0]) + 1
    by_choice = np.frombuffer(choice_ids, dtype=np.int32)
    order = np.argsort(by_choice, kind="stable")
    ends = np.zeros(top + 1, dtype=np.int64)
    np.cumsum(np.bincount(by_choice, minlength=top), out=ends[1:])
    _put_packed(db, "choice_entity_idx", np.frombuffer(entity_ids, dtype=np.int32)[order])
    _put_packed(db, "choice_entity_ends", ends)


class Packed:
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
        self.recent: dict[int, Entity] = {}  # entities decoded lately, by position (``record``)
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
            for variant in variants(word):
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
        found = self.recent.get(idx)
        if found is None:
            ends, at = self._entity_ends, 2 * idx
            try:
                start, middle, end = ends[at], ends[at + 1], ends[at + 2]
            except IndexError:
                raise IndexError(idx) from None
            if idx < 0 or start == middle:  # a position an update left free holds no IRI
                raise IndexError(idx)
            text = self._entity_text
            found = new_entity(text[start:middle].decode("utf-8"), text[middle:end].decode("utf-8"))
            if len(self.recent) >= _RECENT_ENTITIES:  # emptied at once: cheaper than keeping an LRU order
                self.recent.clear()
            self.recent[idx] = found
        return found
