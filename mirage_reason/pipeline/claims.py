"""Claims from the chains' answers. A claim is a KG entity that a chain's answer mentions (linked, so its label is the
ontology's canonical one) and that a path the chain saw ties to the question's entities or to a diagnosis; those
paths are its citations. Claims no path ties are dropped as unsupported, those of an outvoted diagnosis with it.
The question's intents (which tests, what to take, its features, its causes) are answered from claims of the
matching kind, looked up in the KG when no chain named one."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from mirage_kg import ClinicalVocabulary, Entity, MirageError, Path, Step

from mirage_reason.answer import Claim, Status
from mirage_reason.pipeline.chain import ChainResult
from mirage_reason.pipeline.decomposer import INTENTS, question_intents
from mirage_reason.pipeline.grounding import Grounding

if TYPE_CHECKING:
    from mirage_kg import Differential

__all__ = ["INTENT_ANSWERS", "KIND_INTENTS", "Mention", "asked_intents", "diagnosis_claims", "far_end",
           "find_mentions", "gather_claims", "held_facts", "intent_claims", "model_answer", "node_iris",
           "order_claims", "screen_claims", "top_claims", "tying_paths", "with_status"]

#: intent -> (the kind of claim that answers it, the roles that link such a claim to a diagnosis)
INTENT_ANSWERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "treatment": ("drug", ("treats", "treated_by", "prevents", "prevented_by")),
    "tests": ("test", ("test_for", "has_test")),
    "features": ("finding", ("has_finding",)),
    "causes": ("cause", ("caused_by",)),  # whatever the ontology says causes it: an organism, a gene, a substance
}
#: what a question may ask of a condition beyond the decomposer's intents: its features, its causes
KIND_INTENTS: dict[str, re.Pattern[str]] = {
    "features": re.compile(r"\b(?:features?|symptoms?|signs?|manifestations?|characteristics?|phenotypes?|"
                           r"presentations?|clinical picture)\b(?:.*\bof\b)?|\bhow does .* present\b|"
                           r"症状|表现|特征", re.IGNORECASE),
    "causes": re.compile(r"\b(?:what causes|causes? of|caused by|cause[sd]? it|etiology|aetiology|due to what)\b|"
                         r"病因|什么引起", re.IGNORECASE),
}
#: the intents the question names itself (the decomposer's default, "diagnosis" and "treatment", stands only
#: when it names none)
_EXPLICIT = re.compile("|".join(p.pattern for p in INTENTS.values()), re.IGNORECASE)
_INTENT_WORDS = {"treatment": "medication", "tests": "test", "features": "feature", "causes": "cause"}
_SHOWN = {"features": 6}  # claims looked up per diagnosis for an intent (3 unless said here)


def asked_intents(question: str) -> tuple[str, ...]:
    """What the question asks: the decomposer's intents (diagnosis, tests, treatment, avoid) plus a condition's
    features or causes; "what are the features of Marfan syndrome?" asks for its features only, not the default
    diagnosis and treatment."""
    extra = tuple(name for name, pattern in KIND_INTENTS.items() if pattern.search(question))
    if not extra:
        return question_intents(question)
    found = question_intents(question) if _EXPLICIT.search(question) else ()
    return found + tuple(x for x in extra if x not in found)


@dataclass
class Mention:
    """An entity a chain's answer names (not one of the question's), where, and the chain's paths that hold it."""

    chain: int
    entity: Entity
    position: int
    paths: list[Path] = field(default_factory=list)  # the chain's paths that contain the entity


def find_mentions(grounding: Grounding, chains: Sequence[ChainResult], q_iris: set[str]
                  ) -> tuple[list[Mention], list[str]]:
    """The entities each chain's answer names beyond the question's (each once per chain), and each answer
    normalised (canonical labels, dose units)."""
    mentions: list[Mention] = []
    normalised = []
    for i, chain in enumerate(chains):
        found = grounding.mentions(chain.answer)
        normalised.append(grounding.normalise(chain.answer, found))
        seen: set[str] = set()
        for entity, start, _ in found:
            if entity.iri in q_iris or entity.iri in seen:
                continue
            seen.add(entity.iri)
            mentions.append(Mention(i, entity, start,
                                    [p for p in chain.evidence_paths if entity.iri in node_iris(p)]))
    return mentions, normalised


def gather_claims(mentions: Sequence[Mention], evidence: Sequence[Sequence[Path]], weights: Sequence[float],
                  anchors: set[str], kinds: dict[str, str]) -> dict[str, Claim]:
    """One claim per entity the chains name, in the order first named: the paths that tie it to an ``anchor`` (a
    question entity or a diagnosis put to the vote) are its citations, the chains whose paths tie it make it, and
    their ``weights`` add up to its support."""
    claims: dict[str, Claim] = {}
    for m in mentions:
        prev = claims.get(m.entity.iri)
        tied = tying_paths(m.entity.iri, m.paths, evidence[m.chain], anchors)
        paths = list(prev.citations) if prev else []
        paths += [p for p in tied if p not in paths]
        chains_of = (prev.chains if prev else ()) + ((m.chain,) if tied else ())
        support = (prev.support if prev else 0.0) + (weights[m.chain] if tied else 0.0)
        claims[m.entity.iri] = Claim(m.entity, kinds[m.entity.iri], "", tuple(paths), chains_of, support)
    return claims


def screen_claims(claims: dict[str, Claim], mentions: Sequence[Mention], q_iris: set[str], losers: set[str],
                  max_citations: int) -> tuple[list[Claim], list[Claim]]:
    """The claims kept (their strongest citations, the first verbalised as their text) and those dropped: no path
    ties it (unsupported), its diagnosis lost the vote (outvoted), it rests only on an outvoted diagnosis
    (off-diagnosis)."""
    kept: list[Claim] = []
    dropped: list[Claim] = []
    for iri, claim in claims.items():
        if not claim.chains:
            seen_in = [p for m in mentions if m.entity.iri == iri for p in m.paths]
            reason = ("no path the chains saw ties it to the question or the diagnosis" if seen_in
                      else "no evidence path the chains saw contains it")
            dropped.append(with_status(claim, "unsupported", reason, seen_in))
            continue
        citations = rank_paths(claim.citations, q_iris)
        if iri in losers:
            dropped.append(with_status(claim, "outvoted", "another diagnosis won the vote", citations))
            continue
        if losers:
            clean = [p for p in citations if not (node_iris(p) & losers)]
            if not clean:
                dropped.append(with_status(claim, "off-diagnosis", "it rests only on an outvoted diagnosis",
                                           citations))
                continue
            citations = clean
        citations = citations[:max_citations]
        kept.append(Claim(claim.entity, claim.kind, citations[0].text, tuple(citations), claim.chains,
                          claim.support))
    return kept, dropped


def order_claims(kept: list[Claim], winners: Sequence[Entity]) -> None:
    """Sort ``kept`` in place: the diagnosis first (the answer names it before anything else), warnings last, then
    by support; claims looked up in the KG keep the KG's ranking (hallmark features, first-line drugs) among
    themselves."""
    lead = {w.iri for w in winners}
    looked_up = {id(c): i for i, c in enumerate(kept) if not c.chains}
    kept.sort(key=lambda c: (c.kind == "warning", c.entity.iri not in lead, -c.support, -len(c.chains),
                             looked_up.get(id(c), 0), c.entity.label.casefold()))


def diagnosis_claims(winners: Sequence[Entity], kept: list[Claim], differential: Differential | None,
                     kinds: dict[str, str], max_citations: int) -> list[Claim]:
    """``kept`` plus a claim for each winning diagnosis no chain's claim holds (the differential's best
    candidate won the vote), cited by the facts that tie it to the findings it explains."""
    if differential is None:
        return kept
    have = {c.entity.iri for c in kept}
    by_iri = {c.entity.iri: c for c in differential.candidates}
    added = []
    for w in winners:
        candidate = by_iri.get(w.iri)
        if w.iri in have or candidate is None or not candidate.paths:
            continue
        paths = candidate.paths[:max_citations]
        kinds.setdefault(w.iri, "disease")
        added.append(Claim(w, kinds[w.iri], paths[0].text, tuple(paths), (), candidate.score))
    return kept + added


def intent_claims(grounding: Grounding, vocab: ClinicalVocabulary, intents: Sequence[str],
                  diagnoses: Sequence[Entity], kept: list[Claim], kinds: dict[str, str]
                  ) -> tuple[list[Claim], list[str], str | None]:
    """Claims that answer "which tests" / "what to take" / "what are its features" / "what causes it" for the
    diagnosis: the chains' own when they named some, else the KG's (its edges of the intent's roles, ranked as
    anchor ranks them: hallmark features first); a gap line when the KG has none."""
    added: list[Claim] = []
    gaps: list[str] = []
    problem = None
    have = {c.entity.iri for c in kept}
    for intent in intents:
        if intent not in INTENT_ANSWERS or not diagnoses:
            continue
        kind, roles = INTENT_ANSWERS[intent]
        if any(c.kind == kind for c in kept):
            continue
        for diagnosis in diagnoses[:2]:
            try:
                steps = grounding.role_steps(vocab, diagnosis, roles)
            except MirageError as exc:
                problem = f"the {intent} lookup for {diagnosis.label} could not run ({exc})"
                continue
            shown = 0
            for step in steps:
                other = step.end
                if other.iri in have or shown >= _SHOWN.get(intent, 3):
                    continue
                have.add(other.iri)
                shown += 1
                kinds.setdefault(other.iri, kind)
                added.append(Claim(other, kind, Path((step,)).text, (Path((step,)),), (), 0.0))
            if not shown and problem is None:
                gaps.append(f"The knowledge graph lists no {_INTENT_WORDS[intent]} for {diagnosis.label}.")
    return added, gaps, problem


def model_answer(chains: Sequence[ChainResult], normalised: Sequence[str]) -> str:
    """The chains' own answer: each sub-question's first answer (normalised), once."""
    seen: dict[str, str] = {}
    for chain, text in zip(chains, normalised):
        if text.strip() and chain.sub_question not in seen:
            seen[chain.sub_question] = text.strip()
    return "\n\n".join(dict.fromkeys(seen.values()))


# -- paths ------------------------------------------------------------------------------------------------------------

def tying_paths(iri: str, own: Sequence[Path], evidence: Sequence[Path], anchors: set[str]) -> list[Path]:
    """The paths that tie ``iri`` to an anchor (a question entity or a diagnosis): a path the chain saw that holds
    both, else two one-step facts it saw joined at a shared entity (anchor - x - iri), itself a path of the KG."""
    direct = [p for p in own if (node_iris(p) - {iri}) & anchors]
    if direct:
        return direct
    joined = []
    for near in own:
        if len(near.steps) != 1:
            continue
        middle = far_end(near, Entity(iri, ""))
        if middle.iri in anchors or middle.iri == iri:
            continue
        for far in evidence:
            if len(far.steps) != 1 or far is near:
                continue
            ends = {far.steps[0].subject.iri, far.steps[0].object.iri}
            if middle.iri in ends and (ends - {middle.iri}) & anchors and iri not in ends:
                anchor = far_end(far, middle)
                joined.append(Path((_walked(far.steps[0], anchor.iri), _walked(near.steps[0], middle.iri))))
    return joined[:3]


def _walked(step: Step, start: str) -> Step:
    """``step`` walked from the entity ``start``."""
    return replace(step, direction="forward" if step.subject.iri == start else "backward")


def far_end(path: Path, entity: Entity) -> Entity:
    """The other end of a one-step ``path`` from ``entity``."""
    step = path.steps[0]
    return step.object if step.subject.iri == entity.iri else step.subject


def node_iris(path: Path) -> set[str]:
    """The IRIs of the entities on ``path``."""
    return {n.iri for n in path.nodes}


def held_facts(paths: Sequence[Path], q_iris: set[str], limit: int = 3) -> tuple[Path, ...]:
    """What the graph held for the question, for an answer no claim supports: the facts the chains saw about the
    question's entities, those through the entity tied to most of them first (Marfan syndrome for arachnodactyly
    and lens dislocation), then shorter, then alphabetical; once each."""
    touching = list({_path_key(p): p for p in paths if node_iris(p) & q_iris}.values())
    cover: dict[str, set[str]] = {}
    for path in touching:
        for node in node_iris(path) - q_iris:
            cover.setdefault(node, set()).update(node_iris(path) & q_iris)

    def strength(path: Path) -> tuple[int, int, str]:
        best = max((len(cover[n]) for n in node_iris(path) - q_iris), default=0)
        return -best, len(path.steps), path.text

    return tuple(sorted(touching, key=strength)[:limit])


def _path_key(path: Path) -> tuple[tuple[str, str, str], ...]:
    return tuple((s.subject.iri, s.relation.iri, s.object.iri) for s in path.steps)


def rank_paths(paths: Sequence[Path], q_iris: set[str]) -> list[Path]:
    """Paths that touch the question first, then shorter ones, then alphabetical (deterministic)."""
    return sorted(paths, key=lambda p: (not (node_iris(p) & q_iris), len(p.steps), p.text))


def top_claims(claims: list[Claim], limit: int) -> list[Claim]:
    """The strongest ``limit`` claims, warnings always kept."""
    warnings = [c for c in claims if c.kind == "warning"]
    rest = [c for c in claims if c.kind != "warning"]
    return rest[: max(0, limit - len(warnings))] + warnings


def with_status(claim: Claim, status: Status, reason: str, citations: Sequence[Path] | None = None) -> Claim:
    """``claim`` dropped: its status, why, and its first three ``citations`` (its own when not given)."""
    cites = tuple(citations) if citations is not None else claim.citations
    text = cites[0].text if cites else claim.entity.label
    return replace(claim, text=text, citations=cites[:3], status=status, reason=reason)
