"""The two sides of ``mirage-kg diff``: a graph of the store, another store folder, or a release on disk.

A side becomes sorted N-Triples lines (``graph_lines`` or a loader run into a ``CapturingStore``); the new side's
graph IRI is written as the old side's, so a release's own ``MKG:sourceVersion`` triples compare as a version
change rather than as unrelated triples."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mirage_kg.errors import InputError
from mirage_kg.loaders import LoadOptions, LoadReport, detect, get_loader
from mirage_kg.model.namespaces import GRAPH, SCHEMA_GRAPH, compress, expand, mint
from mirage_kg.releases.diff import ReleaseDiff, graph_contains, graph_lines, triple_difference
from mirage_kg.releases.provenance import releases
from mirage_kg.releases.sorting import SortedLines
from mirage_kg.releases.update import delta_base, release_lines
from mirage_kg.store.base import MANIFEST_GRAPH, Store


@dataclass
class Side:
    """One side: a graph of an opened store, or a release folder/file with the loader that reads it."""

    label: str
    store: Store | None = None
    graph: str | None = None
    release: Path | None = None
    loader_name: str = "auto"
    owned: list[Store] = field(default_factory=list)  # stores this side opened (closed by ``close``)

    def close(self) -> None:
        for store in self.owned:
            store.close()


def is_store_folder(path: Path) -> bool:
    """An embedded store folder, not a release."""
    from mirage_kg.store import OxigraphStore

    return path.is_dir() and OxigraphStore.is_store(path)


def data_graphs(store: Store) -> list[str]:
    return [g for g in store.graphs() if g not in (SCHEMA_GRAPH, MANIFEST_GRAPH) and "/staging/" not in g]


def graph_name(text: str) -> str:
    """A graph as the user types it: a CURIE or IRI, or a short name under ``GRAPH:``."""
    if text.startswith(("http://", "https://", "urn:", "<")) or ":" in text:
        return expand(text)
    return mint(GRAPH, text)


def single_graph(store: Store, wanted: str | None, where: str) -> str:
    if wanted:
        return graph_name(wanted)
    recorded = sorted(releases(store))
    graphs = recorded if len(recorded) == 1 else data_graphs(store)
    if len(graphs) != 1:
        raise InputError(f"{where} holds {len(graphs)} data graphs ({', '.join(compress(g) for g in graphs)}); "
                         "say which with --graph")
    return graphs[0]


def open_side(text: str, store: Store | None, graph: str | None, fmt: str) -> Side:
    """Resolve OLD or NEW: a store folder, a release on disk, or a graph of ``store``."""
    path = Path(text)
    if is_store_folder(path):
        from mirage_kg.store.oxigraph import OxigraphStore

        opened = OxigraphStore(path, read_only=True)
        return Side(text, opened, single_graph(opened, graph, f"store {path}"), owned=[opened])
    if path.exists():
        return Side(text, release=path, loader_name=fmt)
    if store is None:
        raise InputError(f"{text!r} is neither a store folder, a release on disk, nor (without --store) a graph")
    name = graph_name(text)
    if name not in store.graphs():
        known = ", ".join(compress(g) for g in data_graphs(store)) or "none"
        raise InputError(f"no graph {compress(name)} in store {store.location} (graphs: {known})")
    return Side(text, store, name)


def side_lines(side: Side, graph: str, options: LoadOptions, report: LoadReport, reads: Store | None,
               workdir: str) -> SortedLines:
    """The side's sorted lines with its graph IRI written as ``graph``."""
    if side.release is None:
        assert side.store is not None and side.graph is not None
        return graph_lines(side.store, side.graph, rename_to=graph if graph != side.graph else None, workdir=workdir)
    loader = detect(side.release) if side.loader_name == "auto" else get_loader(side.loader_name)
    return release_lines(loader, side.release, options, report, graph, reads, workdir).lines


def diff_sides(old: Side, new: Side, options: LoadOptions, report: LoadReport, examples: int = 10,
               reads: Store | None = None) -> ReleaseDiff:
    """The difference from ``old`` to ``new``."""
    graph = old.graph or new.graph or GRAPH + "release"
    if new.release is not None and old.store is not None and old.graph:
        previous = releases(old.store).get(old.graph)
        if previous is not None and previous.source == "snomed":  # a Delta side reads over the old release
            options.extra.setdefault("snomed_base", delta_base(previous))
    with tempfile.TemporaryDirectory(prefix="mirage-kg-diff-") as workdir:
        new_lines = side_lines(new, graph, options, report, reads or old.store or new.store, workdir)
        old_lines = side_lines(old, graph, options, report, reads or old.store or new.store, workdir)
        contains = graph_contains(old.store, old.graph) if old.store is not None and old.graph else None
        triples = triple_difference(old_lines, new_lines, contains)
    return ReleaseDiff.of(_label(old), _label(new), triples, examples)


def _label(side: Side) -> str:
    if side.release is not None:
        return str(side.release)
    return f"{compress(side.graph or '')}" + (f" ({side.label})" if side.owned else "")
