"""Membership in a sorted numpy array, the one way the scoped updates, the row pickers and the fuzzy linker test
many keys at once (a set of millions of Python ints costs seconds to build; a sorted array and a search do not)."""

from __future__ import annotations

from typing import Any

__all__ = ["held_in"]


def held_in(values: Any, sorted_values: Any) -> Any:
    """For each of ``values`` (a numpy array), whether ``sorted_values`` (ascending, same dtype) holds it: a
    boolean array of ``values``' length."""
    import numpy as np  # a dependency, imported here: ``import mirage_kg`` stays light

    if not len(sorted_values):
        return np.zeros(len(values), dtype=bool)
    at = np.searchsorted(sorted_values, values)
    np.minimum(at, len(sorted_values) - 1, out=at)
    return sorted_values[at] == values
