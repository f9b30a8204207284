"""MIRAGE's reasoner: LLM backends, parallel graph-augmented chains, the decomposer and the synthesizer.

It reaches the graph only through ``mirage_kg``'s public API."""

__version__ = "0.1.0"
