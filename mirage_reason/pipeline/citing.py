"""Which source release each cited path comes from, so an answer's citations name it (``UMLS 2024AA``, ``SNOMED
CT INT_20240131``): the graphs that hold the path's facts (``KnowledgeGraph.sources``) read through the release
records of the store's manifest (``mirage_kg.release_citations``); a graph loaded without a record is named by
its CURIE."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mirage_kg import MirageError, Path, compress, release_citations

from mirage_reason.answer import Claim
from mirage_reason.pipeline.synthesis import Synthesis

__all__ = ["cite_releases", "path_sources"]


def _facts(path: Path) -> list[tuple[str, str, str]]:
    return [(step.subject.iri, step.relation.iri, step.object.iri) for step in path.steps]


def path_sources(kg: Any, paths: list[Path]) -> dict[tuple[tuple[str, str, str], ...], tuple[str, ...]]:
    """Each path (by its facts) -> the releases holding its facts, in the order the facts come, each once."""
    lookup, store = getattr(kg, "sources", None), getattr(kg, "store", None)
    if lookup is None or store is None or not paths:
        return {}
    graphs = lookup({fact for path in paths for fact in _facts(path)})
    names = release_citations(store)
    out = {}
    for path in paths:
        held = (names.get(graph) or compress(graph) for fact in _facts(path) for graph in graphs.get(fact, ()))
        out[tuple(_facts(path))] = tuple(dict.fromkeys(held))
    return out


def cite_releases(synthesis: Synthesis, kg: Any) -> tuple[Synthesis, str | None]:
    """The synthesis with every claim's citations naming their releases, and a note when that lookup failed
    (the answer stands; its citations then name no release)."""
    claims = (*synthesis.claims, *synthesis.dropped)
    try:
        sources = path_sources(kg, [path for claim in claims for path in claim.citations])
    except MirageError as exc:
        return synthesis, f"the releases of the cited facts could not be read: {exc}"

    def cited(claim: Claim) -> Claim:
        return replace(claim, sources=tuple(sources.get(tuple(_facts(p)), ()) for p in claim.citations))

    return replace(synthesis, claims=tuple(map(cited, synthesis.claims)),
                   dropped=tuple(map(cited, synthesis.dropped))), None
