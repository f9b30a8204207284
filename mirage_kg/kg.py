"""``KnowledgeGraph``: the graph queries of ``mirage_kg.graph.core`` joined with an entity linker and the LLM-free
retriever, the one object the reasoner and the CLI hold. The graph layer knows nothing of linking; this module
builds the linker on first use (again after a load commits) and hands it the graph."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path as FsPath

from mirage_kg.graph.core import Graph
from mirage_kg.linking.linker import Linker, Mention
from mirage_kg.retrieval.retriever import RetrievalResult, Retriever
from mirage_kg.store.base import Store


class KnowledgeGraph(Graph):
    """Graph queries over a ``Store``, plus ``link`` and ``retrieve``. ``embedding_model`` (a sentence-transformers
    name or path; ``"none"`` to switch embeddings off) and ``cache_dir`` go to the linker; ``merge_equivalents``
    (default on) treats a concept and its exact matches as one node."""

    def __init__(self, store: Store, *, embedding_model: str | None = None, cache_dir: FsPath | None = None,
                 merge_equivalents: bool = True) -> None:
        super().__init__(store, cache_dir=cache_dir, merge_equivalents=merge_equivalents)
        self.embedding_model = embedding_model
        self._linker: Linker | None = None
        self._linker_token: tuple[tuple[str, ...], ...] | None = None
        self._retriever: Retriever | None = None

    def refresh(self) -> None:
        super().refresh()
        self._linker = None

    @property
    def linker(self) -> Linker:
        """The entity linker, built on first use and rebuilt after a load commits."""
        token = self.token
        if self._linker is None or self._linker_token != token:
            self._linker = Linker(self, embedding_model=self.embedding_model, cache_dir=self.cache_dir)
            self._linker_token = token
        return self._linker

    def similarity(self, text: str, labels: Sequence[str]) -> list[float]:
        return self.linker.similarity(text, labels)

    def link(self, text: str, top: int = 5) -> list[Mention]:
        """Mentions of KG entities in free text, each with its ranked candidates."""
        return self.linker.link(text, top=top)

    def retrieve(self, question: str, budget: int = 100) -> RetrievalResult:
        """LLM-free evidence for a question, within ``budget`` entities (see ``mirage_kg.retrieval.retriever``)."""
        if self._retriever is None:
            self._retriever = Retriever(self)
        return self._retriever.retrieve(question, budget=budget)
