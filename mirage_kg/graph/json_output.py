"""The JSON shapes of query results: what ``mirage-kg query|link --json`` prints and ``mirage-kg serve`` returns.

One function per result kind, used by both, so a client of the HTTP API and a script reading the CLI see the same
records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mirage_kg.linking.linker import Mention
    from mirage_kg.model.records import Entity, Path, Step
    from mirage_kg.model.terms import Term

__all__ = ["anchor_json", "bridge_json", "link_json", "neighbour_json", "sparql_json", "term_json"]


def neighbour_json(step: Step) -> dict[str, str]:
    """One anchor neighbour: the relation, which way the walk takes the stored fact (forward: from the anchor),
    the neighbour, and the fact read aloud."""
    return {
        "relation": step.relation.id, "relation_label": step.relation.label,
        "direction": step.direction,
        "id": step.end.id, "label": step.end.label, "text": step.text,
    }


def anchor_json(center: Entity, steps: Sequence[Step]) -> dict[str, Any]:
    """``query anchor --json``: the entity and its neighbours."""
    return {"entity": center.to_json(), "neighbours": [neighbour_json(s) for s in steps]}


def bridge_json(source: Entity, target: Entity, paths: Sequence[Path],
                capped: Sequence[tuple[Entity, int]] = ()) -> dict[str, Any]:
    """``query bridge --json``: both ends, every path found, shortest first, and ``capped``: each hub (with its
    fact edges) the search walked along only part of its edges (``BridgePaths.capped``), so that "no path" is never
    claimed where the hub cap cut the search."""
    return {"source": source.to_json(), "target": target.to_json(), "paths": [p.to_json() for p in paths],
            "capped": [{"id": hub.id, "label": hub.label, "edges": edges} for hub, edges in capped]}


def link_json(mentions: Sequence[Mention]) -> dict[str, Any]:
    """``link --json``: each mention with its ranked candidates."""
    return {"mentions": [m.to_json() for m in mentions]}


def term_json(term: Term) -> dict[str, str]:
    """One RDF term as in the SPARQL 1.1 JSON results format."""
    data = {"type": term.kind, "value": term.value}
    if term.lang:
        data["xml:lang"] = term.lang
    if term.datatype:
        data["datatype"] = term.datatype
    return data


def sparql_json(result: Mapping[str, Any]) -> dict[str, Any]:
    """A ``Store.query`` result in the SPARQL 1.1 JSON results format (``head``/``results`` or ``boolean``);
    CONSTRUCT and DESCRIBE give ``{"triples": [[s, p, o], ...]}`` with each term as in that format."""
    if "boolean" in result:
        return {"boolean": bool(result["boolean"])}
    if "triples" in result:
        triples: Sequence[Sequence[Term]] = result["triples"]
        return {"triples": [[term_json(t) for t in triple] for triple in triples]}
    rows: Sequence[Mapping[str, Term]] = result["rows"]
    return {"head": {"vars": list(result["vars"])},
            "results": {"bindings": [{k: term_json(v) for k, v in row.items()} for row in rows]}}
