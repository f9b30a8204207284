"""Connectivity checks: components not connected to the largest one (``disconnected-component``), and active
concepts with no link at all (``isolated-node``), both read from the context's components."""

from __future__ import annotations

import numpy as np

from mirage_kg.validation.report import Example
from mirage_kg.validation.structural.context import Context
from mirage_kg.validation.structural.queries import PREFIXES, example


def disconnected_component(ctx: Context) -> tuple[int, list[Example]]:
    components = ctx.components
    if components.count < 2:
        return 0, []
    out = [example(iri, f"a component of {size:,} concept(s) not connected to the largest "
                        f"({components.largest:,} concepts)") for iri, size in components.following]
    return components.count - 1, out


def isolated_node(ctx: Context) -> tuple[int, list[Example]]:
    # A retired concept (MKG:active false) is expected to have lost its edges.
    inactive = ctx.concepts.mask(x for (x,) in ctx.store.iri_rows(PREFIXES + 'SELECT DISTINCT ?x WHERE { '
                                 '?x MKG:active ?a FILTER(STR(?a) IN ("false", "0")) }', ("x",)) if x is not None)
    isolated = np.flatnonzero(~ctx.components.linked & ~inactive)  # ids: in IRI order
    return len(isolated), [example(x, "no edge to or from any other concept")
                           for x in ctx.concepts.iris(isolated[: ctx.max_examples])]
