"""Bridge: every simple path of at most ``max_hops`` fact edges between two entities, by meeting in the middle over
the embedded store's index (the degree index's and adjacency files where they hold a node's edges; a hub walked
past along capped edges, and the answer says so) or by one SPARQL pattern per length on an endpoint; ordered
shortest first, then by specificity or ids. Also ``connected`` (one bounded ASK) and the order and query text of
raw paths."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mirage_kg.errors import InputError
from mirage_kg.graph import limits
from mirage_kg.graph.facts import NON_FACT_PREDICATES, NOT_FACT, Hop, Neighbour, in_filter
from mirage_kg.graph.neighbours import NeighbourGraph
from mirage_kg.graph.ranking import RANKINGS, path_cost
from mirage_kg.graph.verbalise import materialise
from mirage_kg.index.degree import DiskDegrees
from mirage_kg.model.namespaces import compress
from mirage_kg.model.records import Entity, Path
from mirage_kg.model.terms import iri_ref
from mirage_kg.store.sparql_text import bounded_path_ask

#: a hub whose capped edges are in hand is asked about at most this many other nodes one pair at a time (exact)
_HUB_PAIR_LOOKUPS = 4_096


class BridgePaths(list[Path]):
    """``bridge``'s paths (a list of ``Path``), and ``capped``: (hub IRI, its fact edges) for each hub the search
    extended past along only ``hub_edges`` of its edges per relation and direction, so that paths through its other
    edges may be missing; empty when the search was exact. ``hub_edges=0`` walks every edge."""

    capped: tuple[tuple[str, int], ...] = ()
    hub_edges: int = 0


@dataclass
class HubWalk:
    """One bridge call's hub cap (``limit`` edges per relation and direction; 0: none), the hubs whose capped
    edges are in hand, and those the search extended past along them (``cut``)."""

    limit: int
    capped: set[str] = field(default_factory=set)
    cut: set[str] = field(default_factory=set)


class PathGraph(NeighbourGraph):
    """``NeighbourGraph`` with ``bridge`` and ``connected``."""

    # --- bridge --------------------------------------------------------------------------------------------------
    def bridge(self, a: str | Entity, b: str | Entity, max_hops: int = 3, max_paths: int = 20,
               relations: Sequence[str] | None = None, rank: str = "specificity",
               hub_edges: int | None = None) -> BridgePaths:
        """All simple paths of at most ``max_hops`` edges between ``a`` and ``b``, each edge walked either way
        (its step says which), merged concepts taken as one node. Shortest first; equal lengths ordered, with
        ``rank="specificity"``, by how specific the intermediate nodes are (hubs last, ``ranking.path_cost``),
        then by node ids, relation ids and directions (forward first); the first ``max_paths``.

        ``hub_edges``: how many edges per relation and direction the embedded store's search takes when it must
        extend a partial path past a hub (``PATH_HUB_DEGREE``; None: ``PATH_HUB_EDGES``; 0: every edge). The
        answer's ``capped`` names the hubs where that cut the search (an endpoint's search is never cut)."""
        if max_hops < 1:
            raise InputError(f"max_hops must be at least 1, not {max_hops}")
        if max_paths < 1:
            raise InputError(f"max_paths must be at least 1, not {max_paths}")
        if rank not in RANKINGS:
            raise InputError(f"rank must be one of {', '.join(RANKINGS)}, not {rank!r}")
        if hub_edges is not None and hub_edges < 0:
            raise InputError(f"hub_edges must be 0 (every edge) or more, not {hub_edges}")
        walk = HubWalk(limits.PATH_HUB_EDGES if hub_edges is None else hub_edges)
        source, target = self.entity(a), self.entity(b)
        groups = self.groups
        start, goal = groups.rep(source.iri), groups.rep(target.iri)
        if start == goal:
            return BridgePaths()
        rels = self._resolve_relations(relations)
        merged = bool(groups.members)
        # a path through merged nodes may need more stored edges than hops, so the bounded ASK cannot decide it
        # an endpoint first answers whether any walk exists (one bounded ASK), so the patterns run only when they
        # will find something; the embedded store's search is bounded by itself and cheaper than that ASK, which
        # the engine evaluates through every hub next to either end (0.6 s against 0.05 s, measured)
        if not merged and not self.store.indexed and not self.connected(source.iri, target.iri, max_hops, rels):
            return BridgePaths()
        raw_paths: list[tuple[Hop, ...]] = []
        memo: dict[str, list[Neighbour]] = {}
        real: dict[tuple[str, str, str], tuple[str, str]] = {}
        for hops in range(1, max_hops + 1):
            if self.store.indexed or merged:
                found = self._paths_by_search(start, goal, hops, rels, memo, real, walk)
            else:
                found = self._paths_by_sparql(start, goal, hops, rels)
            found = once_each_way(found)
            if rank == "specificity" and found:
                inner = {n for path in found for n in path_inner_nodes(path)}
                degree = self._node_degrees(inner)
                found.sort(key=lambda path: (path_cost([degree[n] for n in path_inner_nodes(path)]),
                                             path_sort_key(path)))
            else:
                found.sort(key=path_sort_key)
            raw_paths.extend(found)
            if len(raw_paths) >= max_paths:
                break

        def stored(step: Hop) -> Hop:
            s, p, o, d = step
            s, o = real.get((s, p, o), (s, o))
            return s, p, o, d

        out = BridgePaths(materialise(self, [tuple(stored(step) for step in path) for path in raw_paths[:max_paths]]))
        if walk.cut:
            degree = self.degrees(walk.cut)
            out.capped = tuple((n, degree[n]) for n in sorted(walk.cut) if degree[n] > len(memo.get(n, ())))
            out.hub_edges = walk.limit
        return out

    def connected(self, a: str, b: str, max_hops: int, relations: frozenset[str] | None = None) -> bool:
        """Whether any walk of at most ``max_hops`` fact-like edges joins ``a`` and ``b``: one bounded
        property-path ASK (never ``*``/``+``). It may say yes where no simple path through concepts exists;
        it never says no where one does."""
        if relations is not None:
            if not relations:
                return False
            step = "(" + "|".join(f"{iri_ref(r)}|^{iri_ref(r)}" for r in sorted(relations)) + ")"
        else:
            banned = sorted(NON_FACT_PREDICATES)
            step = "!(" + "|".join([iri_ref(p) for p in banned] + ["^" + iri_ref(p) for p in banned]) + ")"
        return self.store.ask(bounded_path_ask(iri_ref(a), step, max_hops, iri_ref(b),
                                               nested=self.store.nested_optional_paths))

    def _paths_by_search(self, a: str, b: str, hops: int, rels: frozenset[str] | None,
                         memo: dict[str, list[Neighbour]],
                         real: dict[tuple[str, str, str], tuple[str, str]] | None = None,
                         walk: HubWalk | None = None) -> list[tuple[Hop, ...]]:
        """Paths of exactly ``hops`` edges by meeting in the middle over the store's index: partial paths from
        ``a`` and from ``b`` (``hops - 1`` edges between them, each added on the side that fans out least), joined
        by one middle edge. With
        merged concepts the walk is over nodes (``_walk``) and ``real`` maps each node-level triple to the stored
        one. ``walk``: the hub cap (``HubWalk``), and where it cut the search."""
        walk = walk if walk is not None else HubWalk(limits.PATH_HUB_EDGES)
        adj = self._adjacency_of(rels, memo, real, (a, b), walk)
        merged = real is not None and bool(self.groups.members)
        # which side to extend: the one whose partial paths fan out least (the degree index says), so a hub at
        # either end, or next to it, is never expanded when the other side is small; any split finds the same paths
        left: list[tuple[list[str], list[Hop]]] = [([a], [])]
        right: list[tuple[list[str], list[Hop]]] = [([b], [])]
        table = self._state().degrees if self.store.indexed and not merged else None
        joined: list[tuple[Hop, ...]] = []
        for extension in range(hops - 1):
            # the last edge added next to an untouched end on file: partial paths ending at a node on file are
            # finished by one join of the two nodes' edges in the file, not by binding each of their neighbours
            last = extension == hops - 2 and table is not None
            cost_left = self._fan_out(left, memo, merged, rels, (a, b))
            cost_right = self._fan_out(right, memo, merged, rels, (a, b))
            extend_left = cost_left <= cost_right
            # past a hub the walk is capped: extend the other side instead while that stays affordable
            if walk.limit and not merged and self.store.indexed:
                past_left, past_right = self._past_hub(left, walk), self._past_hub(right, walk)
                if extend_left and past_left and not past_right and cost_right <= 2 * limits.PATH_HUB_DEGREE:
                    extend_left = False
                elif not extend_left and past_right and not past_left and cost_left <= 2 * limits.PATH_HUB_DEGREE:
                    extend_left = True
            if extend_left:
                if last and table is not None and right == [([b], [])] and table.is_filed(b):
                    left, done = self._joined_on_file(left, b, rels, from_right=False)
                    joined += done
                self._prefetch_adjacency([nodes[-1] for nodes, _ in left], memo, rels, (a, b), merged)
                left = extend_paths(left, adj, avoid=b)
            else:
                if last and table is not None and left == [([a], [])] and table.is_filed(a):
                    right, done = self._joined_on_file(right, a, rels, from_right=True)
                    joined += done
                self._prefetch_adjacency([nodes[-1] for nodes, _ in right], memo, rels, (a, b), merged)
                right = extend_paths(right, adj, avoid=a)
        left_ends: dict[str, list[tuple[list[str], list[Hop]]]] = {}
        right_ends: dict[str, list[tuple[list[str], list[Hop]]]] = {}
        for nodes, steps in left:
            left_ends.setdefault(nodes[-1], []).append((nodes, steps))
        for nodes, steps in right:
            right_ends.setdefault(nodes[-1], []).append((nodes, steps))
        middle = self._middle_edges(set(left_ends), set(right_ends), memo, rels, real, (a, b), walk)
        out: list[tuple[Hop, ...]] = []
        for (x, y), edges in middle.items():
            for lnodes, lsteps in left_ends[x]:
                for rnodes, rsteps in right_ends[y]:
                    if not set(lnodes).isdisjoint(rnodes):
                        continue
                    back: list[Hop] = [(s, p, o, "backward" if d == "forward" else "forward")
                                       for s, p, o, d in reversed(rsteps)]
                    for edge in edges:
                        out.append(tuple(lsteps) + (edge,) + tuple(back))
        return out if merged else out + joined

    def _past_hub(self, layer: list[tuple[list[str], list[Hop]]], walk: HubWalk) -> bool:
        """Whether extending ``layer`` would go past a hub along its capped edges (a node inside the path)."""
        return any(len(nodes) > 1 and (nodes[-1] in walk.capped or self._is_path_hub(nodes[-1])) for nodes, _ in layer)

    def _joined_on_file(self, layer: list[tuple[list[str], list[Hop]]], far: str,
                        rels: frozenset[str] | None, from_right: bool,
                        ) -> tuple[list[tuple[list[str], list[Hop]]],
                                   list[tuple[Hop, ...]]]:
        """The partial paths of ``layer`` whose end is on file, finished two edges further at ``far`` (an end on
        file) by one join per end node in the file (exact: the file holds every edge of a node it lists);
        returns the partial paths left to extend and the finished paths, walked from ``a`` to ``b``
        (``from_right``: ``layer`` grew from ``b``)."""
        table = self._state().degrees
        if not isinstance(table, DiskDegrees):  # nothing is on file
            return list(layer), []
        rest: list[tuple[list[str], list[Hop]]] = []
        by_end: dict[str, list[tuple[list[str], list[Hop]]]] = {}
        for nodes, steps in layer:
            y = nodes[-1]
            if y == far or not table.is_filed(y):
                rest.append((nodes, steps))
            else:
                by_end.setdefault(y, []).append((nodes, steps))
        done: list[tuple[Hop, ...]] = []
        for y, partials in by_end.items():
            for x, rel_y, from_y, rel_far, from_far in table.filed_common_links(y, far):
                if x == far or (rels is not None and (rel_y not in rels or rel_far not in rels)):
                    continue
                # each step walked from the layer's side: y to x, then x to far (the far end sees that edge reversed)
                y_to_x: Hop = (y, rel_y, x, "forward") if from_y == "forward" else (x, rel_y, y, "backward")
                x_to_far: Hop = (far, rel_far, x, "backward") if from_far == "forward" else (x, rel_far, far, "forward")
                for nodes, steps in partials:
                    if x in nodes:
                        continue
                    walk = steps + [y_to_x, x_to_far]
                    if from_right:  # walked from b: read it back from a
                        walk = [(s, p, o, "backward" if d == "forward" else "forward") for s, p, o, d in reversed(walk)]
                    done.append(tuple(walk))
        return rest, done

    def _is_path_hub(self, n: str) -> bool:
        return self.store.indexed and self.degrees([n])[n] > limits.PATH_HUB_DEGREE

    def _path_hub_edges(self, n: str, rels: frozenset[str] | None, limit: int | None = None) -> list[Neighbour]:
        """A hub's capped edges for walking through it (``limit``, by default ``PATH_HUB_EDGES``, per relation and
        direction), cached per graph state for the default limit: there are few hubs."""
        if limit is not None and limit != limits.PATH_HUB_EDGES:
            return self._hub_neighbours(n, rels, limit)
        cache = self._state().path_hub_edges
        key = (n, rels)
        if key not in cache:
            cache[key] = self._hub_neighbours(n, rels, limits.PATH_HUB_EDGES)
        return cache[key]

    def _fan_out(self, layer: list[tuple[list[str], list[Hop]]],
                 memo: dict[str, list[Neighbour]], merged: bool, rels: frozenset[str] | None,
                 search_ends: tuple[str, ...] = ()) -> int:
        """How many partial paths extending ``layer`` by one edge would make (edges in hand are counted, the
        others estimated by degree; a hub capped in an earlier search counts its capped edges, unless it is one of
        this search's ``search_ends``, whose whole adjacency ``_adjacency_of`` reads)."""
        ends: dict[str, int] = {}
        for nodes, _ in layer:
            ends[nodes[-1]] = ends.get(nodes[-1], 0) + 1
        unknown = [n for n in ends if n not in memo]
        degree = (self._node_degrees(unknown) if merged else self.degrees(unknown)) if unknown else {}
        capped = self._state().path_hub_edges
        for n in unknown:
            if n in search_ends:  # an end's whole adjacency is what extending it reads
                continue
            if (n, rels) in capped:  # a hub walked before: its capped edges are in hand
                degree[n] = len(capped[(n, rels)])
            elif not merged and self.store.indexed and degree[n] > limits.PATH_HUB_DEGREE:
                # a hub is walked through along its capped edges: counting all its edges made the side next to a
                # hub look dearer than a hub end of 50k-200k edges, which was then expanded whole (seconds)
                degree[n] = len(self._path_hub_edges(n, rels))
        return sum(count * (len(memo[n]) if n in memo else degree[n]) for n, count in ends.items())

    def _adjacency_of(self, rels: frozenset[str] | None, memo: dict[str, list[Neighbour]],
                      real: dict[tuple[str, str, str], tuple[str, str]] | None, ends: tuple[str, ...] = (),
                      walk: HubWalk | None = None) -> Any:
        """The memoised adjacency a path search walks: stored edges, or merged nodes' (recording in ``real``).
        A hub (past ``PATH_HUB_DEGREE``) other than the search's ``ends`` gives its capped edges (``walk``'s limit;
        0: all), and walking them is recorded in ``walk.cut``."""
        merged = real is not None and bool(self.groups.members)
        walk = walk if walk is not None else HubWalk(limits.PATH_HUB_EDGES)

        def adj(n: str) -> list[Neighbour]:
            if n in walk.capped:
                walk.cut.add(n)
            if n not in memo:
                if not merged:
                    hub = bool(walk.limit) and n not in ends and self._is_path_hub(n)
                    if hub:
                        memo[n] = self._path_hub_edges(n, rels, walk.limit)
                        walk.capped.add(n)
                        walk.cut.add(n)
                    else:
                        memo[n] = self.neighbours(n, rels)
                elif real is not None:  # merged
                    memo[n] = []
                    for p, d, other, s, o in self.walk(n, rels):
                        memo[n].append(Neighbour(p, d, other))
                        real[(n, p, other) if d == "forward" else (other, p, n)] = (s, o)
            return memo[n]
        return adj

    def _middle_edges(self, xs: set[str], ys: set[str], memo: dict[str, list[Neighbour]],
                      rels: frozenset[str] | None, real: dict[tuple[str, str, str], tuple[str, str]] | None = None,
                      ends: tuple[str, ...] = (), walk: HubWalk | None = None,
                      ) -> dict[tuple[str, str], list[Hop]]:
        """Fact edges between a node of ``xs`` and a different node of ``ys``, as steps walked from x to y: from
        adjacency already in hand, else whichever is cheaper of point lookups per pair, expanding one side, and,
        for the nodes whose adjacency is on file (``degree_index.FILED_DEGREE``), asking the file which of the
        other side's nodes they link to (estimated from the degree index when it is built). A hub walked along
        capped edges (``walk``) is asked about the other side's nodes pair by pair instead (exact), up to
        ``_HUB_PAIR_LOOKUPS`` of them."""
        out: dict[tuple[str, str], list[Hop]] = {}
        walk = walk if walk is not None else HubWalk(limits.PATH_HUB_EDGES)
        adj = self._adjacency_of(rels, memo, real, ends, walk)
        merged = real is not None and bool(self.groups.members)
        # the file holds stored triples, so not across merged concepts
        table = self._state().degrees if self.store.indexed and not merged else None
        disk = table if isinstance(table, DiskDegrees) else None  # (no other table files a node)

        on_file = set() if disk is None else {n for n in xs | ys if n not in memo and disk.is_filed(n)}

        def edges_from(n: str, others: set[str]) -> Iterable[tuple[str, str, str]]:
            if n in on_file and disk is not None:  # one indexed lookup for all of ``others``
                return [e for e in disk.filed_links_to(n, others)  # (not a read of every edge at a hub)
                        if rels is None or e[0] in rels]
            if not merged and len(others) <= _HUB_PAIR_LOOKUPS and (n in walk.capped or (
                    walk.limit and n not in memo and n not in ends and self._is_path_hub(n))):
                return self._edges_between(n, others, rels)  # a hub's capped edges would miss some
            return adj(n)

        def from_xs() -> None:
            for x in xs:
                for p, d, n in edges_from(x, ys):
                    if n in ys and n != x:
                        out.setdefault((x, n), []).append((x, p, n, "forward") if d == "forward" else (n, p, x, "backward"))

        def from_ys() -> None:
            for y in ys:
                for p, d, n in edges_from(y, xs):
                    if n in xs and n != y:
                        out.setdefault((n, y), []).append((y, p, n, "backward") if d == "forward" else (n, p, y, "forward"))

        side, prefetch = self._middle_plan(xs, ys, memo, on_file, merged)
        if side == "pairs":
            return self._pair_edges(xs, ys, rels)
        if prefetch:  # the side about to be expanded, read ahead from the adjacency file
            self._prefetch_adjacency((xs if side == "x" else ys) - on_file, memo, rels, ends, merged)
        if side == "x":
            from_xs()
        else:
            from_ys()
        return out

    def _middle_plan(self, xs: set[str], ys: set[str], memo: dict[str, list[Neighbour]],
                     on_file: set[str], merged: bool) -> tuple[str, bool]:
        """How ``_middle_edges`` finds the edges between ``xs`` and ``ys``: ``("pairs", False)``, point lookups
        per pair; or ``("x" | "y", prefetch)``, reading that side's edges (``prefetch``: read ahead first, where
        the side's adjacency is not already in hand or on file). The cheapest by the degree index's estimate."""
        if all(x in memo for x in xs):
            return "x", False
        if all(y in memo for y in ys):
            return "y", False
        if self.store.indexed:
            # a filed node's lookup costs about a quarter of an edge read per node asked about
            filed_x = len(ys) / 4 * len(on_file & xs) + len(xs)
            filed_y = len(xs) / 4 * len(on_file & ys) + len(ys)
            unknown = [n for n in xs | ys if n not in memo and n not in on_file]
            if filed_x <= filed_y and xs.isdisjoint(unknown):
                return "x", False  # every x is in hand or on file, and cheaper than any plan: no degree to look up
            if filed_y < filed_x and ys.isdisjoint(unknown):
                return "y", False
            degree = self._node_degrees(unknown) if merged else self.degrees(unknown)
            cost_x = sum(degree[x] for x in xs if x in degree) + filed_x
            cost_y = sum(degree[y] for y in ys if y in degree) + filed_y
        else:  # no index: assume a typical degree
            cost_x, cost_y = 32 * len(xs), 32 * len(ys)
        # a membership check is two index seeks (one each way): about two edge reads when the store's pages are
        # in memory, far more when they are not (a seek reads a random block, an adjacency list reads on)
        cost_pairs = 4 * len(xs) * len(ys)
        if not merged and self._adjacency_file() is not None:
            # a side read from the adjacency file costs two lookups in a small file, against two seeks in the
            # whole store per pair (random blocks of 15 GB when its pages are cold)
            cost_pairs *= 16
        # point lookups read stored triples, so not across merged concepts
        if cost_pairs < min(cost_x, cost_y) and not merged:
            return "pairs", False
        return ("x", True) if cost_x <= cost_y else ("y", True)

    def _pair_edges(self, xs: set[str], ys: set[str], rels: frozenset[str] | None
                    ) -> dict[tuple[str, str], list[Hop]]:
        """``_middle_edges`` by point lookups, both ends bound, for each pair of a node of ``xs`` and a different
        node of ``ys``."""
        out: dict[tuple[str, str], list[Hop]] = {}
        for x in xs:
            for y in ys:
                if x == y:
                    continue
                found: list[Hop] = [(x, p, y, "forward") for p in self.store.predicates_between(x, y)]
                found += [(y, p, x, "backward") for p in self.store.predicates_between(y, x)]
                found = sorted({f for f in found if f[1] not in NON_FACT_PREDICATES
                                and (rels is None or f[1] in rels)})
                if found:
                    out[(x, y)] = found
        return out

    def _edges_between(self, n: str, others: set[str], rels: frozenset[str] | None) -> list[Neighbour]:
        """The fact edges between ``n`` and each of ``others``, seen from ``n``, by point lookups (both ends
        bound): a hub's edges to a few nodes without reading its neighbourhood."""
        non = self._state().non_concepts
        found: set[tuple[str, str, str]] = set()
        for y in others:
            if y == n or y in non:
                continue
            for p in self.store.predicates_between(n, y):
                if p not in NON_FACT_PREDICATES and (rels is None or p in rels):
                    found.add((p, "forward", y))
            for p in self.store.predicates_between(y, n):
                if p not in NON_FACT_PREDICATES and (rels is None or p in rels):
                    found.add((p, "backward", y))
        return [Neighbour._make(edge) for edge in sorted(found)]

    def _prefetch_adjacency(self, nodes: Iterable[str], memo: dict[str, list[Neighbour]],
                            rels: frozenset[str] | None, ends: tuple[str, ...], merged: bool) -> None:
        """Put the adjacency of ``nodes`` that a search is about to walk into ``memo`` in one read of the
        adjacency file (``_edges_on_file``), where the store would decode every edge term by term: the same
        edges ``_adjacency_of`` reads (a hub walked through keeps its capped edges, a node on the degree index's
        file its filed ones, so those are left to it, as is everything when concepts are merged)."""
        if not merged:
            memo.update(self._edges_on_file((n for n in nodes if n not in memo), rels, limits.PATH_HUB_DEGREE, ends))

    def _paths_by_sparql(self, a: str, b: str, hops: int,
                         rels: frozenset[str] | None) -> list[tuple[Hop, ...]]:
        """Paths of exactly ``hops`` edges with one explicit SPARQL pattern (any endpoint)."""
        rows = self.store.select(hop_query(a, b, hops, rels))
        non = self._state().non_concepts
        out: list[tuple[Hop, ...]] = []
        for r in rows:
            path_nodes = [a] + [r[f"n{i}"].value for i in range(1, hops)] + [b]
            if any(n in non for n in path_nodes[1:-1]):
                continue
            steps: list[Hop] = []
            for i in range(hops):
                x, y, p = path_nodes[i], path_nodes[i + 1], r[f"p{i}"].value
                steps.append((x, p, y, "forward") if r[f"d{i}"].value == "f" else (y, p, x, "backward"))
            out.append(tuple(steps))
        return out


def once_each_way(paths: Sequence[tuple[Hop, ...]]
                  ) -> list[tuple[Hop, ...]]:
    """Paths that differ only in which copy of a fact stored both ways they walk (``a -r-> b`` forward or
    ``b -r-> a`` backward) are one path: the one walking most edges forward (the first by ``path_sort_key``)."""
    best: dict[tuple[tuple[str, str, str], ...], tuple[Hop, ...]] = {}
    for path in paths:
        key = tuple((s, p, o) if d == "forward" else (o, p, s) for s, p, o, d in path)
        if key not in best or path_sort_key(path) < path_sort_key(best[key]):
            best[key] = path
    return list(best.values())


def path_inner_nodes(path: Sequence[Hop]) -> list[str]:
    """The nodes a raw path walks through, its two ends excluded."""
    return [o if d == "forward" else s for s, _, o, d in path[:-1]]


def path_sort_key(path: Sequence[Hop]) -> tuple[Any, ...]:
    """Bridge order: length, then the walked node ids, then relation ids, then directions (forward first)."""
    nodes = [path[0][0] if path[0][3] == "forward" else path[0][2]]
    for s, _, o, d in path:
        nodes.append(o if d == "forward" else s)
    return (len(path), tuple(compress(n) for n in nodes), tuple(compress(p) for _, p, _, _ in path),
            tuple(0 if d == "forward" else 1 for *_, d in path))


def hop_query(a: str, b: str, hops: int, relations: frozenset[str] | None = None, named_graphs: bool = True) -> str:
    """The SELECT for every walk of exactly ``hops`` fact edges from ``a`` to ``b`` through distinct IRIs, each
    edge either way (``?d<i>`` is "f" or "b"). ``named_graphs=False`` reads the default graph instead of
    ``GRAPH ?g`` patterns (for an engine without named graphs)."""
    nodes = [iri_ref(a)] + [f"?n{i}" for i in range(1, hops)] + [iri_ref(b)]

    def triple(i: int, s: str, o: str) -> str:
        return f"GRAPH ?g{i} {{ {s} ?p{i} {o} }}" if named_graphs else f"{s} ?p{i} {o}"

    parts = []
    for i in range(hops):
        x, y = nodes[i], nodes[i + 1]
        parts.append(f"{{ {{ {triple(i, x, y)} BIND(\"f\" AS ?d{i}) }} UNION "
                     f"{{ {triple(i, y, x)} BIND(\"b\" AS ?d{i}) }} "
                     f"FILTER(?p{i} NOT IN ({NOT_FACT})) {in_filter(f'?p{i}', relations)} }}")
    inner = [f"?n{i}" for i in range(1, hops)]
    filters = [f"isIRI({v})" for v in inner]
    for i, v in enumerate(inner):
        filters += [f"{v} != {nodes[0]}", f"{v} != {nodes[-1]}"] + [f"{v} != {w}" for w in inner[i + 1:]]
    where = " ".join(parts) + (f" FILTER({' && '.join(filters)})" if filters else "")
    names = " ".join([f"?p{i} ?d{i}" for i in range(hops)] + inner)
    return f"SELECT DISTINCT {names} WHERE {{ {where} }}"


def extend_paths(layer: list[tuple[list[str], list[Hop]]], adj: Any, avoid: str,
            ) -> list[tuple[list[str], list[Hop]]]:
    """The simple partial paths one edge longer than those of ``layer`` that never touch ``avoid``."""
    nxt: list[tuple[list[str], list[Hop]]] = []
    for nodes, steps in layer:
        for p, d, n in adj(nodes[-1]):
            if n == avoid or n in nodes:
                continue
            step: Hop = (nodes[-1], p, n, "forward") if d == "forward" else (n, p, nodes[-1], "backward")
            nxt.append((nodes + [n], steps + [step]))
    return nxt
