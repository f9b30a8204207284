"""RDF files in any syntax pyoxigraph parses (Turtle, N-Triples, N-Quads, TriG, RDF/XML, JSON-LD), streamed."""

from __future__ import annotations

from pathlib import Path

from mirage_kg.errors import InputError
from mirage_kg.loaders.base import Loader, LoadOptions, LoadReport, default_graph_name
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
