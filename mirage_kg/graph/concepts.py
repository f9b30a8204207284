"""One concept across sources: concepts joined by ``skos:exactMatch`` (from the sources' own xrefs, UMLS codes, or
the default KG's label matches) form a group that graph queries treat as one node.

A group is walked as one node, but every step a query returns is still a stored triple between real members, so
paths stay citable and checkable. A group larger than ``MAX_GROUP`` is left unmerged: exact matches that chain
that far are a mapping error, not one concept."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mirage_kg.model.namespaces import SKOS_EXACT, compress
from mirage_kg.store.base import Store

MAX_GROUP = 16
#: which member names a group, by source: the cross-disease ontology first, then the sources it integrates
REPRESENTATIVE_ORDER = ("MONDO", "OMIM", "ORPHA", "DECIPHER", "ICD10CM", "UMLS", "SNOMEDCT", "HP")


def rank_key(iri: str) -> tuple[int, str]:
    prefix = compress(iri).partition(":")[0]
    order = REPRESENTATIVE_ORDER.index(prefix) if prefix in REPRESENTATIVE_ORDER else len(REPRESENTATIVE_ORDER)
    return order, compress(iri)


@dataclass(frozen=True)
class ConceptGroups:
    """member IRI -> its group's representative, and representative -> all members (representative first).
    Concepts in no group are absent: they stand for themselves."""

    representative: dict[str, str] = field(default_factory=dict)
    members: dict[str, tuple[str, ...]] = field(default_factory=dict)
    too_large: int = 0  # groups left unmerged because they exceeded MAX_GROUP

    def __len__(self) -> int:
        return len(self.members)

    def rep(self, iri: str) -> str:
        return self.representative.get(iri, iri)

    def of(self, iri: str) -> tuple[str, ...]:
        """Every member of ``iri``'s group (``(iri,)`` when it is in none)."""
        return self.members.get(self.rep(iri), (iri,))

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]], concepts: frozenset[str] | None = None) -> ConceptGroups:
        """Union-find over exact-match pairs; ``concepts`` (when given) limits members to known concepts."""
        parent: dict[str, str] = {}

        def root(x: str) -> str:
            while parent.setdefault(x, x) != x:
                parent[x] = parent.get(parent[x], parent[x])
                x = parent[x]
            return x

        for a, b in pairs:
            if a == b or (concepts is not None and (a not in concepts or b not in concepts)):
                continue
            ra, rb = root(a), root(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
        groups: dict[str, list[str]] = {}
        for x in parent:
            groups.setdefault(root(x), []).append(x)
        representative: dict[str, str] = {}
        members: dict[str, tuple[str, ...]] = {}
        too_large = 0
        for group in groups.values():
            if len(group) < 2:
                continue
            if len(group) > MAX_GROUP:
                too_large += 1
                continue
            ordered = tuple(sorted(group, key=rank_key))
            members[ordered[0]] = ordered
            for x in ordered:
                representative[x] = ordered[0]
        return cls(representative, members, too_large)


def exact_match_pairs(store: Store, exclude: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """Every ``skos:exactMatch`` between two IRIs, in any graph, ``exclude``d IRIs left out."""
    return [(q.subject.value, q.object.value) for q in store.quads(None, SKOS_EXACT, None)
            if q.subject.kind == q.object.kind == "uri"
            and q.subject.value not in exclude and q.object.value not in exclude]
