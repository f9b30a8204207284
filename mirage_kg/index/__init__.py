"""Files derived beside a store and built once per KG: fact degrees, adjacency, the cache folders they live in."""
