"""What a caller may hold instead of a ``KnowledgeGraph``: the surface the reasoner uses, as Protocols. The real
graph satisfies them, and so does any stand-in (the reasoner tests' fake), which a conformance suite holds to the
real graph's answers over the same triples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from mirage_kg.model.records import Entity, Path, Step

if TYPE_CHECKING:
    from mirage_kg.linking.linker import Candidate, Mention
    from mirage_kg.retrieval.retriever import RetrievalResult
    from mirage_kg.store.base import Store


@runtime_checkable
class LinkerLike(Protocol):
    """An entity linker's one-name lookup (a chain's search term)."""

    def link_one(self, name: str, top: int = 5) -> list[Candidate]:
        """Candidates for the whole string as one mention, best first."""
        ...


@runtime_checkable
class KnowledgeGraphLike(Protocol):
    """The graph the reasoner asks: entities by name or id, anchor and bridge searches, linking, LLM-free
    retrieval, whether a path's facts are held, and the store (kinds and roles are read from its ontology)."""

    @property
    def store(self) -> Store:
        """The store the graph reads."""
        ...

    @property
    def linker(self) -> LinkerLike:
        """The entity linker."""
        ...

    def entity(self, ref: str | Entity) -> Entity:
        """A CURIE, an IRI or an exact label (or synonym) -> the entity; ``UnknownEntityError`` when absent."""
        ...

    def anchor(self, entity: str | Entity, k: int = 10, relations: Sequence[str] | None = None,
               direction: str = "both", rank_by: str | None = None) -> list[Step]:
        """The entity's neighbourhood, up to ``k`` neighbours per (relation, direction)."""
        ...

    def bridge(self, a: str | Entity, b: str | Entity, max_hops: int = 3, max_paths: int = 20,
               relations: Sequence[str] | None = None) -> list[Path]:
        """Paths of at most ``max_hops`` edges between two entities, shortest first."""
        ...

    def link(self, text: str, top: int = 5) -> list[Mention]:
        """Mentions of entities in free text, each with its ranked candidates."""
        ...

    def retrieve(self, question: str, budget: int = 100) -> RetrievalResult:
        """LLM-free evidence for a question."""
        ...

    def path_exists(self, path: Path) -> bool:
        """Whether every step of ``path`` is a fact the graph holds."""
        ...
