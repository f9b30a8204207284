"""MIRAGE-KG's knowledge-graph layer: stores, loaders, graph queries, linking, retrieval and validation.

Importing it pulls in no LLM stack: torch, transformers and sentence-transformers load only when an embedding
model is actually asked for."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from mirage_kg.errors import (AmbiguousNameError, EndpointError, InputError, MirageError, MissingExtraError, QueryError, StoreError,
                              UnknownEntityError, UpdateRefusedError)
from mirage_kg.model.records import Entity, Evidence, Path, Relation, Step
from mirage_kg.model.namespaces import compress, expand, ontologies_dir
from mirage_kg.store import OxigraphStore, SparqlStore, Store, demo_store, open_store, check_read_only

__version__ = "0.1.0"

# Public names that live in modules with heavier imports, resolved on first use.
_LAZY = {
    "KnowledgeGraph": "mirage_kg.kg",
    "KnowledgeGraphLike": "mirage_kg.protocols",
    "LinkerLike": "mirage_kg.protocols",
    "Graph": "mirage_kg.graph.core",
    "Neighbour": "mirage_kg.graph.facts",
    "Linker": "mirage_kg.linking.linker",
    "Mention": "mirage_kg.linking.linker",
    "Candidate": "mirage_kg.linking.linker",
    "ClinicalVocabulary": "mirage_kg.model.kinds",
    "clinical_vocabulary": "mirage_kg.model.kinds",
    "Retriever": "mirage_kg.retrieval.retriever",
    "RetrievalResult": "mirage_kg.retrieval.retriever",
    "Differential": "mirage_kg.retrieval.differential",
    "DiagnosisCandidate": "mirage_kg.retrieval.differential",
    "differential_diagnosis": "mirage_kg.retrieval.differential",
    "validate": "mirage_kg.validation",
    "compute_stats": "mirage_kg.graph.stats",
    "anchor_json": "mirage_kg.graph.json_output",
    "bridge_json": "mirage_kg.graph.json_output",
    "link_json": "mirage_kg.graph.json_output",
    "sparql_json": "mirage_kg.graph.json_output",
    "resolve_name": "mirage_kg.graph.resolution",
    "Resolution": "mirage_kg.graph.resolution",
    "release_citations": "mirage_kg.releases.provenance",
    "Term": "mirage_kg.model.terms",
    "REMOTE_SERVER_ENV": "mirage_kg.cli.remote",
    "remote_fetch": "mirage_kg.cli.remote",
    "remote_server_url": "mirage_kg.cli.remote",
    "WARM_ENV": "mirage_kg.cli.warm_server",
    "WarmServer": "mirage_kg.cli.warm_server",
    "ensure_warm_server": "mirage_kg.cli.warm_server",
    "warm_idle": "mirage_kg.cli.warm_server",
    "warm_store_argument": "mirage_kg.cli.warm_server",
}


# exported under another name than the module's own
_RENAMED = {"release_citations": "citations", "DiagnosisCandidate": "Candidate",
            "differential_diagnosis": "differential", "REMOTE_SERVER_ENV": "SERVER_ENV", "remote_fetch": "fetch",
            "remote_server_url": "server_url", "ensure_warm_server": "ensure_server",
            "warm_store_argument": "store_argument"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), _RENAMED.get(name, name))
    raise AttributeError(f"module 'mirage_kg' has no attribute {name!r}")


__all__ = [
    "AmbiguousNameError", "Resolution", "resolve_name",
    "Candidate", "ClinicalVocabulary", "DiagnosisCandidate", "Differential", "EndpointError", "Entity", "Evidence", "Graph", "InputError",
    "KnowledgeGraph", "KnowledgeGraphLike", "Linker", "LinkerLike", "Mention", "MirageError", "MissingExtraError", "Neighbour", "OxigraphStore", "Path",
    "QueryError", "Relation", "RetrievalResult", "Retriever", "SparqlStore", "Step", "Store", "StoreError",
    "UnknownEntityError", "UpdateRefusedError", "anchor_json", "bridge_json", "check_read_only",
    "clinical_vocabulary", "compress", "compute_stats", "differential_diagnosis", "demo_store", "expand", "link_json", "open_store",
    "release_citations", "REMOTE_SERVER_ENV", "remote_fetch", "remote_server_url", "Term", "ontologies_dir",
    "WARM_ENV", "WarmServer", "ensure_warm_server", "warm_idle", "warm_store_argument",
    "sparql_json", "validate",
]
