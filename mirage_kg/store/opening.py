"""How a command finds its store: an endpoint, a folder, ``$MIRAGE_KG_STORE``, or the built-in demo KG."""

from __future__ import annotations

import io
import os
from pathlib import Path

from mirage_kg.errors import StoreError
from mirage_kg.model.namespaces import GRAPH, SCHEMA_GRAPH, ontologies_dir
from mirage_kg.store import checkpoints
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
    """The store a command should use. Reading opens an existing store read-only (shared with other readers and a
    writer); ``create`` (for ``load``) opens it for writing, making it in a new or empty folder only.

    An endpoint is checked on open: for ``create``, the loads killed midway are dropped and the schema graph is
    loaded on first use; for reading (which never writes, so a load under way beside it is left alone), an
    endpoint that could not answer as the embedded store does is an error with the fix. ``chunk_triples`` fixes
    its INSERT DATA size."""
    if store is not None and endpoint is not None:
        raise StoreError("give either --store or --endpoint, not both")
    if endpoint:
        remote = SparqlStore(endpoint, chunk_triples=chunk_triples)
        try:
            if create:
                remote.recover()
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
    if not create:
        return OxigraphStore(path, read_only=True)  # readers share; a folder that is not a store is an error
    if path.exists() and (not path.is_dir() or any(entry.name != checkpoints.LOCK_FILE for entry in path.iterdir())
                          and not OxigraphStore.is_store(path)):
        raise StoreError(f"{path} is not a mirage-kg store and not empty; give a new or empty folder to create one")
    opened = OxigraphStore(path)
    ensure_schema(opened)
    return opened
