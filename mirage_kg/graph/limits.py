"""The sizes the graph queries work within: when a node is a hub (anchor reads its edges relation by relation up
to a cap; bridge walks past it along capped edges) and when the degree index is a file beside the store.

The query modules read these as ``limits.NAME`` at call time, so that a caller (or a test on a small graph) may
lower them in this one place."""

from __future__ import annotations

#: A node with more fact edges than this (the degree index says) is a hub: anchor and the retriever read its edges
#: relation by relation, at most ``HUB_EDGES_PER_RELATION`` each way (in the store's index order), so their cost
#: stops growing with the hub's degree; bridge stays exact (its search starts from the other end).
HUB_DEGREE = 10_000  # the default KG's largest node has 4,199
HUB_EDGES_PER_RELATION = 250
#: bridge's search is exact (every engine gives the same paths) except in one case: extending a partial path *past*
#: a node with more than ``PATH_HUB_DEGREE`` fact edges, it takes at most ``PATH_HUB_EDGES`` of them per relation
#: and direction (the first in the store's index order, so the same every time), and the answer says so
#: (``BridgePaths.capped``; ``hub_edges=0`` lifts it). A path that only enters or leaves a hub is found by lookups
#: from the other side, never by reading the hub's whole neighbourhood, and a hub at either end keeps all its
#: edges. The search extends the other side instead while that costs at most ``2 * PATH_HUB_DEGREE`` partial
#: paths, so at most 3 hops it is cut only beside a large end. Merged concepts are walked uncapped. No shipped KG
#: reaches it (the default KG's largest node has 4,199 edges, EMCKG's 76).
PATH_HUB_DEGREE = 5_000
PATH_HUB_EDGES = 100

DEGREE_INDEX_ON_DISK = 200_000  # triples past which the degree index is a file beside the store, not a dict
