"""The indexes queries need, built once when a KG is built (``load``, ``build-default``, ``index``) rather than
silently by the first query: the degree index, the label index, the label embeddings, and the merged concepts.

Each is cached beside the store keyed by its fingerprint (see ``mirage_kg.index.caching.cache_folder``); the embedding
build saves its work in parts, so a stopped build resumes."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from mirage_kg.kg import KnowledgeGraph
from mirage_kg.store.base import Store

#: ``load`` and ``build-default`` build the indexes, and among them the embeddings, unless told not to
#: (option > these > on)
INDEX_ENV = "MIRAGE_KG_INDEX"
EMBEDDINGS_ENV = "MIRAGE_KG_INDEX_EMBEDDINGS"


@dataclass(frozen=True)
class IndexStep:
    """One index: built (with its size and seconds), found in the cache, or skipped (and why)."""

    name: str
    status: str  # "built", "cached", "skipped"
    size: int = 0
    seconds: float = 0.0
    note: str = ""


def on_by_default(variable: str) -> bool:
    return os.environ.get(variable, "1").strip().lower() not in ("0", "false", "no", "off")


def embeddings_by_default() -> bool:
    return on_by_default(EMBEDDINGS_ENV)


def build_indexes(store: Store, *, embeddings: bool = True, embedding_model: str | None = None,
                  echo: Callable[[str], None] = lambda s: None) -> list[IndexStep]:
    """Build (or find cached) every index of ``store``; ``embeddings=False`` leaves the embedding index out."""
    from mirage_kg.linking.embedder import Embedder

    kg = KnowledgeGraph(store, embedding_model=embedding_model if embeddings else "none")
    steps: list[IndexStep] = []

    def timed(name: str, work: Callable[[], int], cached: Callable[[], bool] = lambda: False) -> None:
        started = time.perf_counter()
        size = work()
        seconds = time.perf_counter() - started
        step = IndexStep(name, "cached" if cached() else "built", size, seconds)
        steps.append(step)
        echo(f"index {name}: {size:,} {'(cached)' if step.status == 'cached' else f'in {seconds:.1f} s'}")

    def degree_index() -> int:
        kg.degrees([])  # embedded stores build the whole index (cached on disk when the store is large)
        return len(kg._state().degrees or {})

    timed("degrees", degree_index)
    timed("concepts", lambda: sum(len(m) for m in kg.groups.members.values()))
    linker = kg.linker
    timed("labels", lambda: linker.index.label_count, lambda: linker.index_from_cache)
    if not embeddings:
        steps.append(IndexStep("embeddings", "skipped", note="asked not to (--no-embeddings)"))
        echo("index embeddings: skipped (the first query that needs them builds them, with progress)")
    elif not Embedder.installed():
        steps.append(IndexStep("embeddings", "skipped", note="sentence-transformers is not installed"))
        echo("index embeddings: skipped, sentence-transformers is not installed (pip install 'mirage-kg[embed]')")
    else:
        timed("embeddings", lambda: int(linker.matrix.shape[0]) if linker.matrix is not None else 0,
              lambda: linker.embeddings_from_cache)
        # right after the embeddings: after an update, the earlier index is carried from the labels that changed
        from mirage_kg.linking import vectors as vector_index

        count = int(linker.matrix.shape[0]) if linker.matrix is not None else 0
        if count < linker.ann_min_labels:
            steps.append(IndexStep("vectors", "skipped", note=f"{count:,} label vectors: brute force is exact and "
                                   f"fast below {linker.ann_min_labels:,}"))
        elif not vector_index.installed():
            steps.append(IndexStep("vectors", "skipped", note="usearch is not installed: brute force"))
            echo("index vectors: skipped, usearch is not installed: embedding search is brute force "
                 "(pip install 'mirage-kg[ann]')")
        else:
            timed("vectors", lambda: len(linker.vectors) if linker.vectors is not None else 0,
                  lambda: linker.vectors_status == "cached")
    return steps
