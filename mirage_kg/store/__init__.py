"""Stores behind one contract: the embedded Oxigraph store (default) and any SPARQL 1.1 endpoint."""

from mirage_kg.store.base import RDF_FORMATS, LoadReceipt, Store
from mirage_kg.store.opening import DEMO_GRAPH, demo_store, ensure_schema, open_store
from mirage_kg.store.oxigraph import OxigraphStore
from mirage_kg.store.sparql import SparqlStore
from mirage_kg.store.sparql_text import check_read_only

__all__ = ["DEMO_GRAPH", "RDF_FORMATS", "LoadReceipt", "OxigraphStore", "SparqlStore", "Store", "demo_store",
           "check_read_only", "ensure_schema", "open_store"]
