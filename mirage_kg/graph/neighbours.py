"""A node's fact edges: ``neighbours`` (from the degree index's file, the adjacency file or the store's index; a hub
read relation by relation up to a cap), ``walk`` (a merged concept taken as one node, each edge its stored triple)
and ``same_as`` (a concept's exact matches). Anchor and bridge read edges only through these."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mirage_kg.graph import limits
from mirage_kg.graph.entities import EntityGraph
from mirage_kg.graph.facts import NON_FACT_PREDICATES, Direction, Neighbour
from mirage_kg.index.degree import DiskDegrees
from mirage_kg.model.records import Entity
from mirage_kg.model.terms import iri_ref


class NeighbourGraph(EntityGraph):
    """``EntityGraph`` with each node's fact edges."""

    # --- adjacency -----------------------------------------------------------------------------------------------
    def neighbours(self, iri: str, relations: frozenset[str] | None = None,
                   per_relation: int | None = None) -> list[Neighbour]:
        """The fact edges at ``iri``, each seen from it: distinct, sorted, a self-loop once (as forward). With
        ``per_relation``, a hub (over ``HUB_DEGREE`` edges) gives at most that many per relation and direction."""
        if per_relation is not None and self.degrees([iri])[iri] > limits.HUB_DEGREE:
            return self._hub_neighbours(iri, relations, per_relation)
        filed = self._state().degrees
        if isinstance(filed, DiskDegrees) and filed.is_filed(iri):  # a well-connected node: its edges from the file
            return sorted(Neighbour._make(edge) for edge in filed.filed_links(iri)
                          if relations is None or edge[0] in relations)
        return self._stored_neighbours(iri, relations)

    def _stored_neighbours(self, iri: str, relations: frozenset[str] | None) -> list[Neighbour]:
        """``neighbours`` read from the store's index."""
        non = self._state().non_concepts
        seen: set[tuple[str, str, str]] = set()  # plain tuples, made Neighbours once sorted: a named tuple's
        # constructor is a Python call per edge, on anchor's hot path
        # a few relations: an index range each, instead of every edge at the node
        ranges = sorted(relations) if relations is not None and len(relations) <= 8 else [None]
        for rel in ranges:
            for p, o in self.store.links(iri, "forward", rel):
                if p not in NON_FACT_PREDICATES and o not in non and (relations is None or p in relations):
                    seen.add((p, "forward", o))
            for p, o in self.store.links(iri, "backward", rel):
                if o != iri and p not in NON_FACT_PREDICATES and o not in non and (relations is None or p in relations):
                    seen.add((p, "backward", o))
        make = Neighbour._make
        return [make(edge) for edge in sorted(seen)]

    def _hub_neighbours(self, iri: str, relations: frozenset[str] | None, per_relation: int) -> list[Neighbour]:
        """A hub's fact edges, at most ``per_relation`` per (relation, direction): the relations at the hub come
        from one query the engine answers natively (no edge reaches Python), then each relation's edges are read
        until the cap."""
        non = self._state().non_concepts
        found: set[Neighbour] = set()
        for p, direction in self._hub_relations(iri):
            if p in NON_FACT_PREDICATES or (relations is not None and p not in relations):
                continue
            taken: set[Neighbour] = set()
            for _, other in self.store.links(iri, direction, p):
                if other in non or (direction == "backward" and other == iri):
                    continue
                taken.add(Neighbour(p, direction, other))
                if len(taken) >= per_relation:
                    break
            found |= taken
        return sorted(found)

    def _hub_relations(self, iri: str) -> list[tuple[str, Direction]]:
        """(relation, direction) pairs at a hub, cached per graph state: on the embedded store one index probe per
        fact predicate and direction (the degree index lists the predicates), else one query the engine answers
        natively (no edge reaches Python)."""
        state = self._state()
        if iri not in state.hub_relations:
            if self.store.indexed:
                state.hub_relations[iri] = sorted(
                    (p, direction) for p in self._degree_table().predicates for direction in ("forward", "backward")
                    if next(self.store.links(iri, direction, p), None) is not None)
                return state.hub_relations[iri]
            node = iri_ref(iri)
            rows = self.store.select(
                f"SELECT DISTINCT ?p ?dir WHERE {{ {{ GRAPH ?g {{ {node} ?p ?x }} BIND(1 AS ?dir) }} UNION "
                f"{{ GRAPH ?g {{ ?x ?p {node} }} BIND(2 AS ?dir) }} FILTER(isIRI(?x)) }}")
            state.hub_relations[iri] = sorted({(r["p"].value, "forward" if r["dir"].value == "1" else "backward")
                                               for r in rows})
        return state.hub_relations[iri]

    def same_as(self, entity: str | Entity) -> list[Entity]:
        """The other members of ``entity``'s merged concept (its exact matches across sources), by id."""
        center = self.entity(entity)
        others = [i for i in self.groups.of(center.iri) if i != center.iri]
        names = self.labels(others)
        return [Entity(i, names[i]) for i in others]

    def walk(self, iri: str, relations: frozenset[str] | None = None,
             per_relation: int | None = None) -> list[tuple[str, Direction, str, str, str]]:
        """Fact edges at ``iri``'s node, a merged concept taken as one: (relation, "forward"|"backward", the
        other node, stored subject, stored object). Edges inside a group (its exact matches) are identity, not
        facts; one stored edge per (relation, direction, other node); a fact stored both ways (as EMCKG often
        does) is one fact, its forward copy."""
        groups = self.groups
        merged = groups.representative
        if iri not in merged:  # a concept merged with none (every node of a store without exact matches)
            edges = self.neighbours(iri, relations, per_relation)
            if not any(n in merged for _, _, n in edges):  # nor are its neighbours
                return as_stored(iri, edges)
        node = groups.rep(iri)
        found: dict[tuple[str, Direction, str], tuple[str, str]] = {}
        for member in groups.of(node):
            for p, d, n in self.neighbours(member, relations, per_relation):
                other = groups.rep(n)
                if other == node:
                    continue
                key = (p, d, other)
                real = (member, n) if d == "forward" else (n, member)
                if key not in found or real < found[key]:
                    found[key] = real
        return sorted((p, d, n, *found[(p, d, n)]) for p, d, n in found
                      if d == "forward" or (p, "forward", n) not in found)

    def _edges_on_file(self, nodes: Iterable[str], relations: frozenset[str] | None, max_degree: int,
                       ends: Iterable[str] = ()) -> dict[str, list[Neighbour]]:
        """The stored fact edges of each of ``nodes`` that may be read from the adjacency file, sorted, of
        ``relations`` (None: all), an edge to a declaration (schema class, relation) left out as the store's walk
        leaves it: the file current (``_adjacency_file``), the node merged with no other concept, its adjacency not
        on the degree index's file (that one is read there), and its degree at most ``max_degree`` unless it is
        one of ``ends`` (a hub keeps its capped read). A node absent from the answer is read as before. Anchor
        and bridge both ask here, so they decide and filter alike."""
        wanted = list(dict.fromkeys(nodes))
        adjacency = self._adjacency_file() if wanted else None
        if adjacency is None:
            return {}
        state = self._state()
        table, merged, keep = state.degrees, self.groups.representative, set(ends)
        if table is None:  # (built with the adjacency file)
            return {}
        degree = self.degrees(wanted)
        wanted = [n for n in wanted if n not in merged and not table.is_filed(n)
                  and (n in keep or degree[n] <= max_degree)]
        if not wanted:
            return {}
        # one node (anchor) is decoded without numpy: array set-up would cost more than its dozen edges
        found = {wanted[0]: adjacency.node_edges(wanted[0])} if len(wanted) == 1 else adjacency.edges(wanted)
        non = state.non_concepts
        return {n: sorted(Neighbour(p, d, o) for p, d, o in found.get(n, ())
                          if o not in non and (relations is None or p in relations)) for n in wanted}


def as_stored(iri: str, edges: Sequence[tuple[str, Direction, str]]) -> list[tuple[str, Direction, str, str, str]]:
    """``walk``'s answer at a node merged with none, among neighbours merged with none, from its edges (distinct,
    sorted): each edge is its own stored triple, a self-loop dropped, a fact stored both ways kept forward."""
    forward = {(p, n) for p, d, n in edges if d == "forward"}
    return [(p, d, n, iri, n) if d == "forward" else (p, d, n, n, iri) for p, d, n in edges
            if n != iri and (d == "forward" or (p, n) not in forward)]
