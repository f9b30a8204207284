"""What a long-running server loads at start, not on its first request: the label index (and autocomplete's table),
then the label embeddings and the embedding model that the first link or ask would otherwise wait for (13 s of a
first ask on the demo KG here, ``benchmarks/bench_warm_ask.py``)."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraph

__all__ = ["warm_linker"]

log = logging.getLogger("mirage_kg.serve")


def warm_linker(kg: KnowledgeGraph, labels_ready: threading.Event | None = None,
                linker_warm: threading.Event | None = None) -> None:
    """Load the linker's parts, setting ``labels_ready`` once the label index is built and ``linker_warm`` once the
    embeddings are loaded too (or are off). A failure is logged; the first request that needs the part reports it."""
    try:
        kg.linker.complete("a", 1)
    except Exception:
        log.exception("building the label index failed")
    finally:
        if labels_ready is not None:
            labels_ready.set()
    try:
        if kg.linker.matrix is not None and kg.linker.embedder is not None:
            kg.linker.embedder.encode(["warm"])
    except Exception:
        log.exception("loading the label embeddings failed")
    finally:
        if linker_warm is not None:
            linker_warm.set()
