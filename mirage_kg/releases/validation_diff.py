"""Validation across releases: what a new release introduced or fixed, against the previous one.

Both are validated the same way, with many examples kept, and the findings compared check by check: a check whose
count grew, or that names things the previous release did not, has new problems; one that shrank or vanished
has fixed ones. The previous release is another store, or a graph of the same store (each side is then copied,
with the schema, into a memory store of its own, so neither sees the other's triples)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from mirage_kg.model.namespaces import SCHEMA_GRAPH
from mirage_kg.store.base import MANIFEST_GRAPH, Store
from mirage_kg.validation.report import LEVELS, Example, Report

#: examples each side keeps, so that "new" and "fixed" examples are found beyond the first few
COMPARED_EXAMPLES = 1000


@dataclass(frozen=True)
class FindingChange:
    """One check whose findings differ between the two releases."""

    check: str
    level: str
    before: int
    after: int
    new: tuple[Example, ...] = ()
    fixed: tuple[Example, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "level": self.level, "before": self.before, "after": self.after,
                "new": [e.to_json() for e in self.new], "fixed": [e.to_json() for e in self.fixed]}


@dataclass(frozen=True)
class ValidationDiff:
    """The checks whose findings changed; ``introduced`` and ``fixed`` split them."""

    against: str
    changes: tuple[FindingChange, ...]

    @property
    def introduced(self) -> list[FindingChange]:
        return [c for c in self.changes if c.after > c.before or c.new]

    @property
    def fixed(self) -> list[FindingChange]:
        return [c for c in self.changes if c.after < c.before or c.fixed]

    def fails(self, fail_on: str = "error") -> bool:
        """Whether the release introduced a problem at ``fail_on`` level or worse."""
        if fail_on == "none":
            return False
        worst = LEVELS.index(fail_on)
        return any(LEVELS.index(c.level) <= worst for c in self.introduced)

    def to_json(self) -> dict[str, Any]:
        return {"against": self.against, "introduced": [c.to_json() for c in self.introduced],
                "fixed": [c.to_json() for c in self.fixed]}

    def lines(self, examples: int = 5) -> Iterator[str]:
        yield f"against {self.against}: {len(self.introduced)} checks with new problems, {len(self.fixed)} with fixes"
        for title, changes, pick in (("new", self.introduced, lambda c: c.new), ("fixed", self.fixed,
                                                                                   lambda c: c.fixed)):
            for change in changes:
                shown = ", ".join(e.id for e in pick(change)[:examples])
                yield (f"  {title:5} {change.level:7} {change.check}: {change.before:,} -> {change.after:,}"
                       + (f" (e.g. {shown})" if shown else ""))
        if not self.changes:
            yield "  no new and no fixed problems"


def compare_reports(before: Report, after: Report, against: str = "") -> ValidationDiff:
    """The checks whose counts or examples differ, errors first."""
    old = {f.check: f for f in before.findings}
    new = {f.check: f for f in after.findings}
    changes = []
    for check in sorted(old.keys() | new.keys()):
        was, now = old.get(check), new.get(check)
        was_examples = {e.id: e for e in (was.examples if was else ())}
        now_examples = {e.id: e for e in (now.examples if now else ())}
        change = FindingChange(
            check=check, level=(now or old[check]).level,  # a check of only one report: now, else was
            before=was.count if was else 0, after=now.count if now else 0,
            new=tuple(e for k, e in now_examples.items() if k not in was_examples),
            fixed=tuple(e for k, e in was_examples.items() if k not in now_examples))
        if change.before != change.after or change.new or change.fixed:
            changes.append(change)
    changes.sort(key=lambda c: (LEVELS.index(c.level), c.check))
    return ValidationDiff(against, tuple(changes))


def graphs_view(store: Store, graphs: list[str]) -> Store:
    """A memory store with the schema and ``graphs`` of ``store`` (copied graph by graph, in N-Triples)."""
    from mirage_kg.store import OxigraphStore

    view = OxigraphStore()
    for graph in [SCHEMA_GRAPH, *graphs]:
        if graph not in store.graphs():
            continue
        spool = io.BytesIO()
        store.export_graph(spool, graph)
        spool.seek(0)
        view.load(spool, media_type="application/n-triples", graph=graph, source=graph)
    return view


def validate_against(store: Store, baseline: Store | str, run: Callable[[Store], Report],
                     label: str = "") -> ValidationDiff:
    """Validate ``store`` and the previous release (another store, or a graph of ``store``) with ``run``
    (which should keep ``COMPARED_EXAMPLES`` examples) and compare."""
    if isinstance(baseline, str):
        data = [g for g in store.graphs() if g not in (SCHEMA_GRAPH, MANIFEST_GRAPH)]
        if baseline not in data:
            from mirage_kg.errors import InputError
            from mirage_kg.model.namespaces import compress

            raise InputError(f"no graph {compress(baseline)} in store {store.location} to validate against")
        with graphs_view(store, [baseline]) as before_store, \
                graphs_view(store, [g for g in data if g != baseline]) as after_store:
            return compare_reports(run(before_store), run(after_store), label or baseline)
    return compare_reports(run(baseline), run(store), label or baseline.location)
