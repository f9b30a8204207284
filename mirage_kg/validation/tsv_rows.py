"""Whole-graph passes of validation read as bytes: the embedded engine writes a SELECT's rows as SPARQL TSV
(``Store.tsv_blocks``, in Rust, handed over in chunks of whole rows) and numpy finds the values in each chunk and hashes them
(``compact.span_hashes``), so a pass over tens of millions of edges makes no Python object per row. Reading the
same rows through ``iri_rows`` cost a native term object, a string and a tuple per value.

Only the few rows a check shows are read back as text (``TsvChunk.iri``, ``TsvChunk.terms``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

from mirage_kg.errors import StoreError
from mirage_kg.store.base import Store
from mirage_kg.model.terms import Term
from mirage_kg.validation.compact import span_hashes, utf8_prefix

_TAB, _NEWLINE, _IRI_OPEN = 9, 10, ord("<")


#: bytes of TSV a chunk holds (numpy then holds ~8 bytes per byte of a chunk while it hashes it)
CHUNK = 1 << 18


def readable(store: Store) -> bool:
    """Whether ``store``'s engine writes its results as TSV itself (the embedded store; an endpoint's rows are
    read as ``Term`` s, as before)."""
    return bool(store.indexed)


class TsvChunk:
    """Rows of TSV results: where each value starts and ends in the chunk's bytes, by row and column."""

    def __init__(self, data: bytes, columns: int) -> None:
        self.data = data
        self.codes = np.frombuffer(data, dtype=np.uint8)
        # a tab or newline inside a value is escaped in TSV, so every one of them ends a value
        ends = np.flatnonzero((self.codes == _TAB) | (self.codes == _NEWLINE))
        if len(ends) % columns or not bool(np.all(self.codes[ends[columns - 1::columns]] == _NEWLINE)):
            raise StoreError(f"the store's TSV results do not have {columns} value(s) a row")
        starts = np.empty(len(ends), dtype=np.int64)
        starts[:1] = 0
        starts[1:] = ends[:-1] + 1
        self.starts = starts.reshape(-1, columns)
        self.ends = ends.reshape(-1, columns)
        self._prefix: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.starts)

    def is_iri(self, column: int) -> np.ndarray:
        """Which rows hold an IRI (``<...>``) in ``column``: not a literal, a blank node or nothing."""
        starts = self.starts[:, column]
        return (starts < self.ends[:, column]) & (self.codes[np.minimum(starts, len(self.codes) - 1)] == _IRI_OPEN)

    def iri_hashes(self, column: int) -> np.ndarray:
        """``utf8_hashes`` of each row's IRI in ``column`` (without its angle brackets), as a string of it hashes;
        meaningless on rows where ``is_iri`` is false."""
        starts, ends = self.starts[:, column], self.ends[:, column]
        inner = np.minimum(starts + 1, ends)
        if self._prefix is None:
            self._prefix = utf8_prefix(self.codes)
        return span_hashes(self._prefix, inner, np.maximum(ends - 1, inner))

    def iri(self, row: int, column: int) -> str:
        """The IRI in a row's ``column``."""
        return self.data[int(self.starts[row, column]) + 1: int(self.ends[row, column]) - 1].decode()

    def span_hashes(self, first: int, last: int) -> np.ndarray:
        """The hash of each row's values from column ``first`` to ``last`` as written (tabs between them): the
        identity of those terms together, whatever their kind (an unbound value is an empty one)."""
        if self._prefix is None:
            self._prefix = utf8_prefix(self.codes)
        return span_hashes(self._prefix, self.starts[:, first], self.ends[:, last])

    def terms(self, row: int, variables: tuple[str, ...]) -> dict[str, Term]:
        """A row as ``select`` gives it: variable -> ``Term``, unbound ones left out."""
        out = {}
        for column, name in enumerate(variables):
            term = term_of(self.data[int(self.starts[row, column]): int(self.ends[row, column])].decode())
            if term is not None:
                out[name] = term
        return out


def each_chunk(store: Store, query: str, variables: Sequence[str], consume: Callable[[TsvChunk], None]) -> None:
    """Hand ``consume`` the rows of ``query`` (a SELECT of ``variables``, in that order) on the embedded store,
    a chunk of about ``CHUNK`` bytes at a time. The engine writes in this thread: a worker thread's allocator
    arena held the engine's DISTINCT and join memory apart from the main one (+40 MB at 2.2M triples)."""
    store.tsv_blocks(query, list(variables), lambda data: consume(TsvChunk(data, len(variables))), block=CHUNK)


_ECHARS = {"t": "\t", "b": "\b", "n": "\n", "r": "\r", "f": "\f", '"': '"', "'": "'", "\\": "\\"}
_XSD = "http://www.w3.org/2001/XMLSchema#"
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?[0-9]*\.[0-9]+")


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out, at = [], 0
    while (slash := text.find("\\", at)) >= 0:
        out.append(text[at:slash])
        kind = text[slash + 1]
        if kind in "uU":
            width = 4 if kind == "u" else 8
            out.append(chr(int(text[slash + 2: slash + 2 + width], 16)))
            at = slash + 2 + width
        else:
            out.append(_ECHARS[kind])
            at = slash + 2
    out.append(text[at:])
    return "".join(out)


def term_of(token: str) -> Term | None:
    """The ``Term`` a TSV value writes (as ``OxigraphStore.select`` would give it), None for an unbound one: an
    IRI, a blank node, a quoted literal with its escapes, language tag or datatype, or the bare forms of
    booleans and numbers."""
    if not token:
        return None
    if token[0] == "<":
        return Term("uri", token[1:-1])
    if token.startswith("_:"):
        return Term("bnode", token[2:])
    if token[0] == '"':
        at = 1
        while token[at] != '"':
            at += 2 if token[at] == "\\" else 1
        value, rest = _unescape(token[1:at]), token[at + 1:]
        if rest.startswith("@"):
            return Term("literal", value, rest[1:])
        if rest.startswith("^^<"):
            datatype = rest[3:-1]
            return Term("literal", value, None, None if datatype == _XSD + "string" else datatype)
        return Term("literal", value)
    if token in ("true", "false"):
        return Term("literal", token, None, _XSD + "boolean")
    if _INTEGER.fullmatch(token):
        return Term("literal", token, None, _XSD + "integer")
    if _DECIMAL.fullmatch(token):
        return Term("literal", token, None, _XSD + "decimal")
    return Term("literal", token, None, _XSD + "double")
