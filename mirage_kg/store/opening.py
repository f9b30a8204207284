"""How a command finds its store: an endpoint, a folder, ``$MIRAGE_KG_STORE``, or the built-in demo KG."""

from __future__ import annotations

import io
import os
from pathlib import Path

from mirage_kg.errors import StoreError
from mirage_kg.namespaces import GRAPH, SCHEMA_GRAPH, ontologies_dir
from mirage_kg.store.base import Store
from mirage_kg.store.oxigraph import OxigraphStore
from mirage_kg.store.sparql import SparqlStore

DEMO_GRAPH = GRAPH + "demo"
SCHEMA_FILES = ("schema.ttl", "sources.ttl")


def ensure_schema(store: Store) -> None:
    """Load the shipped schema (core model plus the source loaders' vocabulary) into its own graph once, so every
    relation reads right. Both files go in as one load, so the schema graph is never half there."""
    if store.triple_count(SCHEMA_GRAPH) == 0:
        parts = [(ontologies_dir() / name).read_bytes() for name in SCHEMA_FILES
                 if (ontologies_dir() / name).is_file()]
        store.load(io.BytesIO(b"\n".join(parts)), media_type="text/turtle", graph=SCHEMA_GRAPH,
                   source="mirage-kg schema")


def demo_store() -> OxigraphStore:
    """An in-memory store with the schema and the shipped demo medical KG."""
    store = OxigraphStore()
    ensure_schema(store)
    with open(ontologies_dir() / "demo.ttl", "rb") as handle:
        store.load(handle, media_type="text/turtle", graph=DEMO_GRAPH, source="mirage-kg demo KG")
    return store


def open_store(store: str | Path | None = None, endpoint: str | None = None, *, create: bool = False,
               chunk_triples: int | None = None) -> Store:
    """The store a command should use. ``create`` makes a missing folder (for ``load``); reading needs it to exist.

    An endpoint is checked on open: a killed load's staging graph is dropped; for ``create`` the schema graph is
    loaded on first use; for reading, an endpoint that could not answer as the embedded store does is an error
    with the fix. ``chunk_triples`` fixes its INSERT DATA size."""
    if store is not None and endpoint is not None:
        raise StoreError("give either --store or --endpoint, not both")
    if endpoint:
        remote = SparqlStore(endpoint, chunk_triples=chunk_triples)
        try:
            remote.recover()
            if create:
                ensure_schema(remote)
            else:
                remote.check()
        except BaseException:
            remote.close()
            raise
        return remote
    if store is None:
        store = os.environ.get("MIRAGE_KG_STORE") or None
    if store is None:
        return demo_store()
    path = Path(store)
    if not create and not path.exists():
        raise StoreError(f"no store at {path}; create one with `mirage-kg load FILE --store {path}`")
    opened = OxigraphStore(path)
    if create:
        ensure_schema(opened)
    return opened
