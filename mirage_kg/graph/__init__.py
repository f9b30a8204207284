"""Graph queries: entities and labels, neighbours (anchor), paths (bridge), concepts, ranking and verbalisation."""
