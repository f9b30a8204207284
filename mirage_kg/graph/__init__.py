"""Graph queries, one module a job, each importing only those before it: ``facts`` (what a fact is, ``Neighbour``,
directions), ``limits`` (hub and index sizes), ``labels`` (label choice, relation readings), ``state`` (the
per-store cache), ``indexes`` (degree index and adjacency file), ``entities`` (lookup, labels, relations),
``neighbours`` (a node's edges), ``anchor`` and ``paths`` (bridge), ``verbalise`` (paths as evidence), ``core``
(``Graph``, composing them); beside them ``concepts`` (merged concepts), ``ranking``, ``concept_record`` (a
concept's page), ``stats``, ``resolution`` and ``json_output``."""
