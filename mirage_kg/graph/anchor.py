"""Anchor: an entity's neighbourhood, up to ``k`` neighbours for each relation and direction, ranked by specificity
or degree (``mirage_kg.graph.ranking``) or by similarity to a text; a hub's ranked anchor filed once in the degree
index's file and read back from it."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from mirage_kg.errors import InputError
from mirage_kg.graph import limits
from mirage_kg.graph.facts import DIRECTIONS, Direction
from mirage_kg.graph.neighbours import NeighbourGraph, as_stored
from mirage_kg.graph.ranking import RANKING_VERSION, RANKINGS, annotation_frequencies, neighbour_scores
from mirage_kg.index import degree as degree_index
from mirage_kg.index.degree import DiskDegrees, HubAnchorRow
from mirage_kg.model.namespaces import compress
from mirage_kg.model.records import Entity, Step
from mirage_kg.progress import progress_bar

if TYPE_CHECKING:
    from mirage_kg.graph.state import DegreeTable

#: an edge anchor chooses: (relation, direction, neighbour)
AnchorEdge = tuple[str, Direction, str]


class AnchorGraph(NeighbourGraph):
    """``NeighbourGraph`` with ``anchor``."""

    def _anchor_walk(self, iri: str, relations: frozenset[str] | None,
                     per_relation: int) -> list[tuple[str, Direction, str, str, str]]:
        """``walk`` for anchor: a node whose edges may come from the adjacency file (``_edges_on_file``, no hub
        past ``HUB_DEGREE``) and whose neighbours are merged with none has them read from there (two lookups in a
        small file, where the store decodes every edge's terms, a random block each the first time a node is read,
        which was most of a typical anchor at full size); the same edges, the file holding what
        ``_stored_neighbours`` reads."""
        on_file = self._edges_on_file((iri,), relations, limits.HUB_DEGREE).get(iri)
        if on_file is not None:
            merged = self.groups.representative
            if not any(n in merged for _, _, n in on_file):
                return as_stored(iri, on_file)
        return self.walk(iri, relations, per_relation)

    # --- anchor --------------------------------------------------------------------------------------------------
    def anchor(self, entity: str | Entity, k: int = 10, relations: Sequence[str] | None = None,
               direction: str = "both", rank_by: str | None = None, rank: str = "specificity") -> list[Step]:
        """The entity's neighbourhood: for each (relation, direction) up to ``k`` neighbours, ranked by ``rank``
        (``"specificity"``: the neighbour's IDF in the KG times the annotation frequency the source gives, see
        ``mirage_kg.graph.ranking``; ``"degree"``: best connected first) or, with ``rank_by``, by similarity to that
        text; ordered by relation id, direction (forward first), rank, id. A merged concept's members all
        contribute (each step is a stored triple of one member). Every step starts at the anchor's node."""
        if k < 1:
            raise InputError(f"k must be at least 1, not {k}")
        want = DIRECTIONS.get(direction)
        if want is None:
            raise InputError(f"direction must be forward (out), backward (in) or both, not {direction!r}")
        if rank not in RANKINGS:
            raise InputError(f"rank must be one of {', '.join(RANKINGS)}, not {rank!r}")
        center = self.entity(entity)
        rels = self._resolve_relations(relations)
        filed = self._filed_hub_anchor(center.iri, k, rels, want, rank) if not rank_by else None
        chosen, real = filed if filed is not None else self._ranked_edges(center.iri, k, rels, want, rank_by, rank)
        names = self.labels({x for e in chosen for x in real[e]} | {center.iri})
        relmeta = self.relations({p for p, _, _ in chosen})
        steps = []
        for p, d, n in chosen:
            s, o = real[(p, d, n)]
            subject = center if s == center.iri else Entity(s, names[s])
            obj = center if o == center.iri else Entity(o, names[o])
            steps.append(Step(subject, relmeta[p], obj, d))
        return steps

    def _ranked_edges(self, iri: str, k: int, rels: frozenset[str] | None, want: str, rank_by: str | None,
                      rank: str) -> tuple[list[AnchorEdge], dict[AnchorEdge, tuple[str, str]]]:
        """Anchor's choice at ``iri``'s node: the (relation, direction, neighbour) edges kept (the top ``k`` of each
        (relation, direction)), in anchor's order, and each one's stored (subject, object). What a hub's filed
        anchor holds is made by this same code (``_file_hub_anchors``)."""
        # a hub's edges are read up to a cap per relation (ranked among those): anchor costs the same at any degree
        edges = [e for e in self._anchor_walk(iri, rels, max(k, limits.HUB_EDGES_PER_RELATION))
                 if want == "both" or e[1] == want]
        if not edges:
            return [], {}
        others = sorted({n for _, _, n, _, _ in edges})
        if rank_by or rank == "degree":
            by_node = self._rank_scores(others, rank_by)
            score: dict[tuple[str, str, str], float] = {(p, d, n): by_node[n] for p, d, n, _, _ in edges}
        else:
            members = list(self.groups.of(iri))
            # a store the degree index's file says has no annotation record needs no lookup at each anchor
            table = self._current_degree_file()
            frequencies = annotation_frequencies(self.store, members) if table is None or table.annotated else {}
            score = neighbour_scores([(p, d, n) for p, d, n, _, _ in edges], self._node_degrees(others),
                                     self._concept_count(), frequencies, members, self.groups.rep)
        real = {(p, d, n): (s, o) for p, d, n, s, o in edges}
        by_group: dict[tuple[str, Direction], list[AnchorEdge]] = {}
        for p, d, n, _, _ in edges:
            by_group.setdefault((p, d), []).append((p, d, n))
        ids = {n: compress(n) for n in others}
        chosen: list[AnchorEdge] = []
        for group in by_group.values():
            if len(group) > k:  # the final sort below orders a group as this one does: only a cut needs it
                group.sort(key=lambda e: (-score[e], ids[e[2]]))
                del group[k:]
            chosen.extend(group)
        chosen.sort(key=lambda e: (compress(e[0]), 0 if e[1] == "forward" else 1, -score[e], ids[e[2]]))
        return chosen, real

    def _hub_anchor_settings(self) -> dict[str, Any]:
        """What a filed hub anchor depends on beyond the store's content (which keys the file), and which nodes
        are filed (``min_degree`` edges or more)."""
        return {"hub_degree": limits.HUB_DEGREE, "per_relation": limits.HUB_EDGES_PER_RELATION,
                "depth": degree_index.HUB_ANCHOR_DEPTH, "merged": self.merge_equivalents,
                "min_degree": min(degree_index.FILED_DEGREE, limits.HUB_DEGREE + 1),
                "ranking": RANKING_VERSION}

    def _filed_hub_anchor(self, iri: str, k: int, rels: frozenset[str] | None, want: str, rank: str
                          ) -> tuple[list[AnchorEdge], dict[AnchorEdge, tuple[str, str]]] | None:
        """``_ranked_edges`` for a hub whose anchor is on file (ranked for every relation and direction, the first
        ``depth`` of each group): its rows at positions below ``k``, of the wanted relations and direction. The
        same answer: a group's candidates (its capped edges, the cap being the same for any ``k`` up to it) and
        each neighbour's score do not depend on the other groups, so a group's top ``k`` is the first ``k`` of its
        filed order, and anchor's order restricted to fewer edges is their filed order. None (rank as before)
        when nothing is filed for this hub, under these settings, for this store state."""
        if not self.store.indexed:
            return None
        self._degree_table()  # built or opened now if not yet (anchor reads degrees anyway)
        table = self._current_degree_file()
        if table is None:  # no file, or a raw write since it was opened: read live
            return None
        ours = self._hub_anchor_settings()
        # the degree first (it is in memory once the entity was looked up): most nodes are far below the filed
        # ones, and need not read and parse the file's settings at every anchor; a filed ``min_degree`` differing
        # from ours is refused below anyway
        if self.degrees([iri])[iri] < ours["min_degree"]:
            return None  # no node of so few edges is filed (its degree is what walk reads first anyway)
        settings = table.hub_anchor_settings()
        if settings is None or k > settings["depth"] or any(settings.get(key) != value for key, value in ours.items()):
            return None
        rows = table.hub_anchor_rows(iri, rank, k)
        if rows is None:
            return None
        chosen: list[AnchorEdge] = []
        real: dict[AnchorEdge, tuple[str, str]] = {}
        for p, d, n, end, _ in rows:
            if (rels is None or p in rels) and (want == "both" or d == want):
                chosen.append((p, d, n))
                real[(p, d, n)] = (iri, end) if d == "forward" else (end, iri)
        return chosen, real

    def _file_hub_anchors(self, table: DegreeTable) -> None:
        """Rank the anchor of every hub (over ``HUB_DEGREE`` edges) and every other node of ``FILED_DEGREE`` edges
        or more (whose anchor ranks all its edges: as costly), each a concept merged with no other, once per
        ranking, and file the order in the degree index's file (``DiskDegrees.file_hub_anchors``), where the file
        has none yet and can be written: ~0.1 s a node, done once per store state."""
        settings = self._hub_anchor_settings()
        if not isinstance(table, DiskDegrees):
            return
        filed = table.hub_anchor_settings()
        if filed is not None and all(filed.get(key) == value for key, value in settings.items()):
            return
        if not os.access(table.path, os.W_OK) or not os.access(table.path.parent, os.W_OK):
            return
        hubs = table.nodes_of_degree(settings["min_degree"])
        groups = self.groups

        def anchors() -> Iterator[tuple[str, str, list[HubAnchorRow]]]:
            with progress_bar("degree index: hub anchors", total=len(hubs), unit="hubs") as advance:
                for hub in hubs:
                    if len(groups.of(hub)) == 1:
                        for rank in RANKINGS:
                            chosen, real = self._ranked_edges(hub, limits.HUB_EDGES_PER_RELATION, None, "both", None, rank)
                            rows: list[HubAnchorRow] = []
                            position: dict[tuple[str, str], int] = {}
                            for p, d, n in chosen:
                                at = position[(p, d)] = position.get((p, d), -1) + 1
                                if at < degree_index.HUB_ANCHOR_DEPTH:
                                    s, o = real[(p, d, n)]
                                    rows.append((p, d, n, o if d == "forward" else s, at))
                            yield hub, rank, rows
                    advance(1)

        table.file_hub_anchors(settings, anchors())

    def _rank_scores(self, iris: list[str], rank_by: str | None) -> dict[str, float]:
        if not rank_by:
            return {i: float(d) for i, d in self._node_degrees(iris).items()}
        names = self.labels(iris)
        sims = self.similarity(rank_by, [names[i] for i in iris])
        degree = self.degrees(iris)
        # similarity decides; degree only breaks exact ties (it is far below any similarity difference)
        return {i: s + 1e-9 * math.log1p(degree[i]) for i, s in zip(iris, sims)}

    def similarity(self, text: str, labels: Sequence[str]) -> list[float]:
        """How close ``text`` is to each label, in [0, 1]: the linker's measure, which ``KnowledgeGraph``
        supplies; a bare ``Graph`` has none."""
        raise InputError("ranking by similarity to a text needs a linker: use mirage_kg.KnowledgeGraph")
