"""The records the graph API returns: entities, relations, edges walked in a direction, paths and evidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mirage_kg.model.namespaces import compress

Direction = Literal["forward", "backward"]


@dataclass(frozen=True, slots=True)
class Entity:
    """A KG concept: its IRI and its preferred label (the IRI's CURIE when it has none)."""

    iri: str
    label: str

    @property
    def id(self) -> str:
        return compress(self.iri)

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "label": self.label}


@dataclass(frozen=True, slots=True)
class Relation:
    """A relation with the metadata that makes it read right in both directions."""

    iri: str
    label: str
    inverse_label: str | None = None
    forward_template: str | None = None
    backward_template: str | None = None

    @property
    def id(self) -> str:
        return compress(self.iri)

    def verbalise(self, subject: str, obj: str, direction: Direction = "forward") -> str:
        """The sentence for ``subject -relation-> obj``, read from the subject (forward) or the object (backward)."""
        if direction == "forward":
            if self.forward_template:
                return self.forward_template.format(subject=subject, object=obj)
            return f"{subject} {self.label} {obj}"
        if self.backward_template:
            return self.backward_template.format(subject=subject, object=obj)
        if self.inverse_label:
            return f"{obj} {self.inverse_label} {subject}"
        # No inverse vocabulary: keep the fact's true direction in a passive reading rather than reverse it.
        return f"{obj} is the {self.label} target of {subject}"


@dataclass(frozen=True, slots=True)
class Step:
    """One edge of a path: the stored triple, and whether the path walks it forward or backward."""

    subject: Entity
    relation: Relation
    object: Entity
    direction: Direction = "forward"

    @property
    def start(self) -> Entity:
        return self.subject if self.direction == "forward" else self.object

    @property
    def end(self) -> Entity:
        return self.object if self.direction == "forward" else self.subject

    @property
    def text(self) -> str:
        return self.relation.verbalise(self.subject.label, self.object.label, self.direction)

    def to_json(self) -> dict[str, str]:
        return {
            "subject": self.subject.id,
            "relation": self.relation.id,
            "object": self.object.id,
            "direction": self.direction,
        }


@dataclass(frozen=True, slots=True)
class Path:
    """A simple path of one or more steps; ``nodes`` are the entities in walking order."""

    steps: tuple[Step, ...]

    @property
    def length(self) -> int:
        return len(self.steps)

    @property
    def nodes(self) -> tuple[Entity, ...]:
        if not self.steps:
            return ()
        return (self.steps[0].start, *(s.end for s in self.steps))

    @property
    def text(self) -> str:
        return "; ".join(step.text for step in self.steps)

    def to_json(self) -> dict[str, object]:
        return {
            "length": self.length,
            "nodes": [n.id for n in self.nodes],
            "steps": [s.to_json() for s in self.steps],
            "text": self.text,
        }


@dataclass(frozen=True, slots=True)
class Evidence:
    """A fact put in front of a model, with the path it came from and the graphs (sources) that hold it."""

    path: Path
    sources: tuple[str, ...] = field(default=())
    score: float = 0.0

    @property
    def text(self) -> str:
        return self.path.text
