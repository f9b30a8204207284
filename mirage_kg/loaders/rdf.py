"""RDF files in any syntax pyoxigraph parses (Turtle, N-Triples, N-Quads, TriG, RDF/XML, JSON-LD), streamed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mirage_kg.errors import InputError
from mirage_kg.loaders.base import Loader, LoadOptions, LoadReport, RowsNeedWholeRelease, default_graph_name
from mirage_kg.loaders.hygiene import UTF8_BOM, check_encoding, open_input
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
    """Reports bytes read to the progress bar while the native parser pulls."""

    def __init__(self, handle, advance) -> None:  # type: ignore[no-untyped-def]
        self._handle = handle
        self._advance = advance

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
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
            if head.startswith(UTF8_BOM):
                handle.read(len(UTF8_BOM))  # not every RDF parser skips it
            try:
                receipt = store.load(_CountingReader(handle, advance), media_type=media, graph=graph,  # type: ignore[arg-type]
                                     source=str(path), base_iri=path.resolve().as_uri())
            except SyntaxError as exc:
                raise InputError(f"invalid {media} syntax: {exc}", path) from exc
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
