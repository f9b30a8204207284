"""RDF files in any syntax pyoxigraph parses (Turtle, N-Triples, N-Quads, TriG, RDF/XML, JSON-LD), streamed.

As for every text source, a raw control byte (NUL and the other C0 controls but TAB, LF and CR) is refused with its
line, inside a literal too. A relative IRI resolves only against a base the data gives (``@base``, ``xml:base``)
or the user gives (``--base``), never against the loading machine's file path. RDF/XML entity declarations are
checked before the parser expands them (``hygiene.check_xml_entities``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from mirage_kg.errors import InputError
from mirage_kg.loaders.base import Loader, LoadOptions, LoadReport, RowsNeedWholeRelease, default_graph_name
from mirage_kg.loaders.rows.hygiene import CONTROL_BYTES, UTF8_BOM, check_encoding, check_xml_entities, open_input
from mirage_kg.progress import progress_bar
from mirage_kg.store.base import RDF_FORMATS, LoadReceipt, Store


def media_type_for(path: Path, fmt: str | None = None) -> str:
    if fmt and fmt in RDF_FORMATS:
        return RDF_FORMATS[fmt][0]
    suffixes = [s.lower() for s in path.suffixes]
    for media, exts in RDF_FORMATS.values():
        if suffixes and suffixes[-1] in exts:
            return media
    raise InputError(f"cannot tell the RDF syntax from the name; use --format {'|'.join(RDF_FORMATS)}", path)


class _CountingReader:
    """Reports bytes read to the progress bar while the native parser pulls, and stops the parse at a raw control
    byte (an ``InputError`` with its line: the parser would take it into a literal)."""

    def __init__(self, handle: BinaryIO, advance: Callable[[float], None], path: Path) -> None:
        self._handle = handle
        self._advance = advance
        self._path = path
        self._lines = 0  # line breaks before the current chunk

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        bad = CONTROL_BYTES.search(data)
        if bad is not None:
            line = self._lines + data.count(b"\n", 0, bad.start()) + 1
            column = bad.start() - (data.rfind(b"\n", 0, bad.start()) + 1) + 1
            raise InputError(f"control character: byte {data[bad.start()]:#04x} at column {column} (NUL and other "
                             "control bytes are not text; an RDF file is refused whole, --lenient or not)",
                             self._path, line)
        self._lines += data.count(b"\n")
        self._advance(len(data))
        return data


class RdfLoader(Loader):
    name = "rdf"
    description = "RDF: Turtle, N-Triples, N-Quads, TriG, RDF/XML, JSON-LD"

    @classmethod
    def can_load(cls, path: Path, head: bytes) -> bool:
        if path.is_dir():
            return False
        try:
            media_type_for(path)
        except InputError:
            return False
        return True

    def load(self, store: Store, path: Path, options: LoadOptions, report: LoadReport) -> list[LoadReceipt]:
        media = media_type_for(path, options.extra.get("rdf_format"))
        graph = options.graph or default_graph_name(path, "rdf")
        with open_input(path) as handle, progress_bar(f"loading {path.name}", path.stat().st_size, "bytes") as advance:
            head = handle.peek(4096)[:4096]
            if not head:
                raise InputError("the file is empty", path)
            check_encoding(path, head)
            if media == RDF_FORMATS["rdfxml"][0]:
                check_xml_entities(path)
            if head.startswith(UTF8_BOM):
                handle.read(len(UTF8_BOM))  # not every RDF parser skips it
            base = options.extra.get("base_iri")
            try:
                receipt = store.load(_CountingReader(handle, advance, path), media_type=media, graph=graph,  # type: ignore[arg-type]  # the parser calls only read()
                                     source=str(path), base_iri=base)
            except SyntaxError as exc:
                hint = ""
                if base is None and ("absolute IRI" in str(exc) or "base IRI" in str(exc)):
                    hint = ("; a relative IRI needs a base: state it in the file (@base <...> / xml:base) or give "
                            "--base IRI (it is never the loading machine's file path)")
                raise InputError(f"invalid {media} syntax: {exc}{hint}", path) from exc
            except MemoryError as exc:  # the native parser's buffer limit, not the machine's memory
                if "buffer" not in str(exc):
                    raise
                raise InputError(f"cannot parse: one token (a literal or an IRI) is longer than the parser's limit "
                                 f"({exc}); split the value or leave it out", path) from None
        return [receipt]

    # --- ``load --update`` of an N-Triples file: only the changed rows (see ``releases.line_scope``) ------------
    def rows_apply(self, path: Path, options: LoadOptions) -> bool:
        """Rows stand for triples in N-Triples only (one triple a line, no prefixes, no graph names)."""
        return media_type_for(path, options.extra.get("rdf_format")) == RDF_FORMATS["nt"][0]

    def row_triples(self, rows: Iterable[tuple[int, str]], path: Path, options: LoadOptions, problem: Any,
                    tally: Any = None, *, first_rows: bool = True) -> Iterator[str]:
        """Each N-Triples row's triple, written canonically (so two spellings of one triple compare equal)."""
        import pyoxigraph as ox

        for number, text in rows:
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            try:
                parsed = list(ox.parse(text.encode("utf-8"), format=ox.RdfFormat.N_TRIPLES))
            except SyntaxError as exc:
                raise InputError(f"invalid {RDF_FORMATS['nt'][0]} syntax: {exc}", path, number) from exc
            for quad in parsed:
                triple = quad.triple
                if isinstance(triple.subject, ox.BlankNode) or isinstance(triple.object, ox.BlankNode):
                    raise RowsNeedWholeRelease(f"{path}:{number} holds a blank node")
                yield f"{triple} .\n"

    @staticmethod
    def triple_keys(line: str, options: LoadOptions) -> list[bytes]:
        """A row must have the candidate's subject to make it: its canonical spelling."""
        return [line.split(" ", 1)[0].encode("utf-8")]

    @staticmethod
    def rows_naming(rows: Iterable[tuple[int, bytes]], keys: set[bytes], plain: bool = False) -> Iterator[tuple[int, bytes]]:
        """The raw rows whose subject is one of ``keys`` (an escaped IRI is parsed to its canonical spelling)."""
        import pyoxigraph as ox

        for number, raw in rows:
            parts = raw.split(None, 1)
            if not parts:
                continue
            token = parts[0]
            if token.startswith(b"<") and b">" in token:
                token = token[:token.index(b">") + 1]
            if b"\\" in token:
                try:
                    token = str(next(iter(ox.parse(raw, format=ox.RdfFormat.N_TRIPLES))).subject).encode("utf-8")
                except (SyntaxError, StopIteration):
                    continue
            if token in keys:
                yield number, raw
