"""The synthesizer's decision record for one question: the claims that survived and those dropped, the conflicts and
how they were settled, what the question asked and what the graph holds nothing for, and the pick of a
multiple-choice question. The model only words its ``claims``; the checks read it back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mirage_kg import Entity, Path

from mirage_reason.answer import Claim, Conflict

if TYPE_CHECKING:
    from mirage_kg import Differential

__all__ = ["Synthesis"]


@dataclass(frozen=True)
class Synthesis:
    """What the deterministic part decided; the model only words ``claims`` (and ``warnings``)."""

    question: str
    question_entities: tuple[Entity, ...]
    claims: tuple[Claim, ...]
    dropped: tuple[Claim, ...]
    conflicts: tuple[Conflict, ...]
    normalised_answers: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    resolved: bool = True  # False: claims were only extracted (the no-synthesizer ablation)
    intents: tuple[str, ...] = ()
    diagnoses: tuple[Entity, ...] = ()  # the winning diagnosis (or compatible ones), else the question's diseases
    gaps: tuple[str, ...] = ()  # what the question asked that the KG holds nothing for
    flags: tuple[str, ...] = ()  # checks that could not run, picks the KG does not support
    options: tuple[str, ...] = ()  # a multiple-choice question's options
    letter: str | None = None  # the option the chains' vote (or the KG) picked
    model_answer: str = ""  # the chains' own answer, for a question no claim supports
    no_support: str = "flag"
    held: tuple[Path, ...] = ()  # the facts the chains saw that touch the question, strongest first
    safety: tuple[str, ...] = ()  # for "can I take / give X": what the graph says of X and the conditions
    differential: Differential | None = None  # the graph's conditions, by how much of the findings each explains

    @property
    def findings(self) -> dict[str, list[dict[str, str]]]:
        """The question's findings the leading diagnosis explains, and those it leaves unexplained."""
        if self.differential is None or not self.differential.findings:
            return {"explained": [], "unexplained": []}
        lead = self.diagnoses[0].iri if self.diagnoses else None
        if lead is None:
            return {"explained": [], "unexplained": [f.entity.to_json() for f in self.differential.findings
                                                   if f.role != "context"]}
        explained, unexplained = self.differential.split(lead)
        return {"explained": [e.to_json() for e in explained], "unexplained": [e.to_json() for e in unexplained]}

    @property
    def supported(self) -> bool:
        return bool(self.claims)

    @property
    def abstained(self) -> bool:
        """Only a free-text question with no supported claim abstains, and only under the "abstain" policy (or
        when the chains wrote nothing to fall back on)."""
        if self.options or self.claims:
            return False
        return self.no_support == "abstain" or not self.model_answer.strip()

    @property
    def facts(self) -> list[str]:
        """The numbered facts the writer may use: each surviving claim's text, once."""
        return list(dict.fromkeys(c.text for c in self.claims))
