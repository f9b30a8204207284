"""Where the chains disagree and how it is settled. Chains that name different diagnoses vote, each vote weighted by
the evidence neighbourhood behind it and by how much of the question the diagnosis explains; a drug the KG
contraindicates in the patient's conditions is dropped with a warning; a multiple-choice question gets the letter
the chains' vote (else the KG's evidence) picks; a safety question ("can I take X?") is answered from the drug's
contraindications in the patient's conditions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from mirage_kg import ClinicalVocabulary, Entity, MirageError, Path

from mirage_reason.answer import Claim, Conflict
from mirage_reason.pipeline.chain import ChainResult
from mirage_reason.pipeline.choices import LETTERS, extract_letter
from mirage_reason.pipeline.claims import Mention, far_end, node_iris, tying_paths, with_status
from mirage_reason.pipeline.grounding import Grounding
from mirage_reason.pipeline.sentences import SAFETY_QUESTION
from mirage_reason.pipeline.support import Flag
from mirage_reason.pipeline.synthesis import Synthesis
from mirage_reason.pipeline.verbalise import NOT_SUPPORTED

if TYPE_CHECKING:
    from mirage_kg import DiagnosisCandidate, Differential

__all__ = ["CONDITION_KINDS", "VOTE_WEIGHT", "answer_safety", "check_treatments", "patient_conditions",
           "vote_diagnosis", "vote_letter"]

#: how much the chains' votes (as a share of all votes) can add to a diagnosis's evidence coverage in the vote
VOTE_WEIGHT = 0.3
#: the kinds of entity that are a patient's conditions
CONDITION_KINDS = ("disease", "finding")
_CONTRA_ROLES = ("contraindicated_in", "contraindicates")


# -- the diagnosis vote -----------------------------------------------------------------------------------------------

def vote_diagnosis(grounding: Grounding, question_entities: Sequence[Entity], chains: Sequence[ChainResult],
                   mentions: Sequence[Mention], kinds: dict[str, str], weights: list[float],
                   differential: Differential | None = None, asks_diagnosis: bool = True
                   ) -> tuple[set[str], list[Entity], Conflict | None]:
    """Each chain's first disease tied to the question is its diagnosis; the differential's best candidate
    (when the question asks what it is) stands too. Incompatible diagnoses are put to the paper's rule: the one
    whose evidence covers more of the question wins. A diagnosis's **coverage** is the share of the findings'
    specificity weight it explains (the differential; without one, the share of the question's entities the
    chains' paths tie it to); its **votes** are its chains' weights (1 + the evidence neighbourhood behind the
    chain, relative to the widest, + the chain's match to the question), as a share of all votes; ``weights``
    (one per chain) are set to them. A diagnosis explaining some finding always beats one explaining none,
    whatever the votes; among those, the score is coverage + ``VOTE_WEIGHT`` x vote share, so chains repeating a
    diagnosis add at most ``VOTE_WEIGHT`` and cannot outvote a clearly better explanation. Returns the losers, the
    winners (the winner and the diagnoses compatible with it) and the conflict."""
    q_iris = {e.iri for e in question_entities}
    primary = _chain_diagnoses(chains, mentions, kinds, q_iris)
    candidates = list({m.entity.iri: m.entity for m in primary.values()}.values())
    graph = differential is not None and bool(differential.findings)
    best = _graph_diagnosis(differential) if graph and asks_diagnosis else None
    if best is not None and best.coverage > 0 and best.entity.iri not in {c.iri for c in candidates}:
        candidates.append(best.entity)
        kinds.setdefault(best.entity.iri, "disease")
    if len(candidates) < 2:
        return set(), candidates, None
    all_paths = [p for c in chains for p in c.evidence_paths]
    neighbourhood = {i: len({n for p in m.paths for n in node_iris(p)}) for i, m in primary.items()}
    widest = max(neighbourhood.values(), default=0) or 1
    totals: dict[str, float] = dict.fromkeys((e.iri for e in candidates), 0.0)
    count: dict[str, int] = dict.fromkeys(totals, 0)
    match: dict[str, float] = {}
    for e in candidates:
        explained = {q for q in q_iris if any({q, e.iri} <= node_iris(p) for p in all_paths)}
        match[e.iri] = len(explained) / len(q_iris) if q_iris else 0.0
    for i, m in primary.items():
        d = m.entity.iri
        weights[i] = 1.0 + neighbourhood[i] / widest + match[d]
        totals[d] += weights[i]
        count[d] += 1
    coverage = {d: differential.coverage(d) if graph and differential is not None else match[d]
                for d in totals}
    all_votes = sum(totals.values()) or 1.0
    score = {d: coverage[d] + VOTE_WEIGHT * totals[d] / all_votes for d in totals}
    labels = {e.iri: e.label for e in candidates}
    winner_iri = max(totals, key=lambda d: (coverage[d] > 0, round(score[d], 9), count[d], _neg(labels[d])))
    winner = next(e for e in candidates if e.iri == winner_iri)
    losers = {e.iri for e in candidates if e.iri != winner_iri and not grounding.is_a_related(e, winner)}
    winners = [e for e in candidates if e.iri not in losers]
    if not losers:
        return set(), winners, None
    votes = tuple(sorted(((e.id, score[e.iri]) for e in candidates), key=lambda kv: -kv[1]))
    basis = ("the findings it explains, weighted by specificity" if graph
             else "the question entities its paths reach")
    reason = (f"chains name different diagnoses; {winner.label} wins by evidence coverage ({basis}: "
              f"{coverage[winner_iri]:.0%}) with the chains' votes (at most {VOTE_WEIGHT:.2f} of the score)")
    ranked = {c.entity.iri: c for c in differential.candidates} if graph and differential is not None else {}
    evidence = ranked[winner_iri].paths if winner_iri in ranked else ()
    return losers, winners, Conflict("diagnosis", tuple(candidates), winner, votes, reason, evidence)


def _chain_diagnoses(chains: Sequence[ChainResult], mentions: Sequence[Mention], kinds: dict[str, str],
                     q_iris: set[str]) -> dict[int, Mention]:
    """Chain index -> its diagnosis: the first disease its answer names that its paths tie to the question."""
    primary: dict[int, Mention] = {}
    for m in sorted(mentions, key=lambda m: (m.chain, m.position)):
        tied = bool(tying_paths(m.entity.iri, m.paths, chains[m.chain].evidence_paths, q_iris))
        if tied and kinds[m.entity.iri] == "disease" and m.chain not in primary:
            primary[m.chain] = m
    return primary


def _graph_diagnosis(differential: Differential) -> DiagnosisCandidate | None:
    """The differential's best candidate, unless it is a condition the question names beside other findings it
    does not explain: the best may be a condition the question names when it explains the most, of the question's
    findings ("cirrhosis with jaundice") or when the question names no other finding ("panic attacks"); a condition
    the patient has beside unexplained complaints ("I have asthma, and a headache") is context, not the answer."""
    best = differential.top
    if best is not None and best.entity.iri in {f.entity.iri for f in differential.findings if f.role == "condition"}:
        others = [f for f in differential.findings if f.role == "finding"]
        if others and not [e for e in best.explains if e.iri != best.entity.iri]:
            return None
    return best


def _neg(label: str) -> tuple[int, ...]:
    """Sort key that makes alphabetically earlier labels win ties under ``max``."""
    return tuple(-ord(ch) for ch in label.casefold())


# -- contraindications --------------------------------------------------------------------------------------------------

def check_treatments(grounding: Grounding, vocab: ClinicalVocabulary, question_entities: Sequence[Entity],
                     diagnoses: Sequence[Entity], kept: list[Claim], kinds: dict[str, str], avoid: bool
                     ) -> tuple[list[Claim], list[Claim], list[Claim], list[Conflict], str | None]:
    """Drop a drug that the KG contraindicates in a condition of the question, the diagnosis or a surviving
    claim; with an "avoid" intent, also warn of the drugs the KG contraindicates in the diagnosis. Returns the
    survivors, the dropped drugs, the warning claims, the conflicts and what could not be checked."""
    conditions = {e.iri: e for e in question_entities}
    conditions.update({e.iri: e for e in diagnoses})
    conditions.update({c.entity.iri: c.entity for c in kept if c.kind in CONDITION_KINDS})
    survivors, dropped, warnings, conflicts = [], [], [], []
    failed: list[str] = []
    if not vocab.relations_with_role(*_CONTRA_ROLES) and any(c.kind == "drug" for c in kept):
        failed.append("the knowledge graph declares no relation with a contraindication role")
    max_citations = grounding.config.max_citations
    for claim in kept:
        if claim.kind != "drug":
            survivors.append(claim)
            continue
        try:
            against = [p for p in grounding.contraindications(vocab, claim.entity)
                       if far_end(p, claim.entity).iri in conditions]
        except MirageError as exc:
            failed.append(f"{claim.entity.label} ({exc})")
            survivors.append(claim)
            continue
        if not against:
            survivors.append(claim)
            continue
        where = ", ".join(far_end(p, claim.entity).label for p in against)
        dropped.append(with_status(claim, "contraindicated", f"contraindicated in {where}"))
        warnings.append(Claim(claim.entity, "warning", against[0].text, tuple(against[:max_citations]),
                              claim.chains, claim.support))
        conflicts.append(Conflict("treatment", (claim.entity, *(far_end(p, claim.entity) for p in against)),
                                  None, (), f"{claim.entity.label} is recommended but the knowledge graph "
                                  f"contraindicates it in {where}", tuple(against)))
    if avoid:
        failed += _avoid_warnings(grounding, vocab, list(conditions.values())[:4], warnings)
    problem = None
    if failed:
        problem = "the contraindication check could not run for " + "; ".join(failed)
    return survivors, dropped, warnings, conflicts, problem


def _avoid_warnings(grounding: Grounding, vocab: ClinicalVocabulary, conditions: Sequence[Entity],
                    warnings: list[Claim]) -> list[str]:
    """Append to ``warnings`` the first three drugs the KG contraindicates in each of ``conditions`` (each drug
    once); returns the conditions whose lookup failed."""
    failed: list[str] = []
    warned = {w.entity.iri for w in warnings}
    for diagnosis in conditions:
        try:
            steps = grounding.role_steps(vocab, diagnosis, ("contraindicates",))
        except MirageError as exc:
            failed.append(f"{diagnosis.label} ({exc})")
            continue
        for step in steps[:3]:
            drug = far_end(Path((step,)), diagnosis)
            if drug.iri not in warned:
                warned.add(drug.iri)
                warnings.append(Claim(drug, "warning", Path((step,)).text, (Path((step,)),), (), 0.0))
    return failed


def patient_conditions(synthesis: Synthesis) -> dict[str, Entity]:
    """The patient's conditions: the question's entities, the diagnosis, the claims of a condition kind."""
    conditions = {e.iri: e for e in synthesis.question_entities}
    conditions.update({e.iri: e for e in synthesis.diagnoses})
    conditions.update({c.entity.iri: c.entity for c in synthesis.claims if c.kind in CONDITION_KINDS})
    return conditions


def answer_safety(grounding: Grounding, synthesis: Synthesis) -> Synthesis:
    """For a safety question ("can I take / give X?", "is X safe with Y?"): what the graph says of each drug
    the question names and the patient's conditions (its contraindications there) as warning claims that lead
    the claims, and ``safety``, the sentences that lead the answer; a drug the graph says nothing against here
    gets a sentence saying so (which is no proof that it is safe). A lookup that cannot run is flagged."""
    if synthesis.options or not SAFETY_QUESTION.search(synthesis.question):
        return synthesis
    vocab, problem = grounding.vocabulary()
    flags = list(synthesis.flags)
    if problem is not None:
        flags.append(Flag(f"the safety question could not be checked: {problem}", "check_unavailable"))
        return replace(synthesis, flags=tuple(flags))
    kinds = grounding.kinds(vocab, synthesis.question_entities, [p for c in synthesis.claims for p in c.citations])
    drugs = [e for e in synthesis.question_entities if kinds.get(e.iri) == "drug"]
    if not drugs:
        return synthesis
    drug_iris = {d.iri for d in drugs}
    conditions = {i: e for i, e in patient_conditions(synthesis).items() if i not in drug_iris}
    where = ", ".join(e.label for e in conditions.values()) or "the conditions the question names"
    found: list[Claim] = []
    lines: list[str] = []
    for drug in drugs:
        try:
            against = [p for p in grounding.contraindications(vocab, drug) if far_end(p, drug).iri in conditions]
        except MirageError as exc:
            flags.append(Flag(f"the contraindications of {drug.label} could not be looked up ({exc})",
                              "check_unavailable"))
            continue
        if against:
            found += [Claim(drug, "warning", p.text, (p,), (), 0.0) for p in against]
            number = {t: i for i, t in enumerate(dict.fromkeys(c.text for c in found), start=1)}
            lines.append(f"What the knowledge graph says of {drug.label} here: "
                         + "; ".join(f"{p.text} [{number[p.text]}]" for p in against) + ".")
        else:
            lines.append(f"The knowledge graph holds no contraindication of {drug.label} in {where}; that does "
                         "not show it is safe.")
    if len(drugs) > 1:
        lines.append("The knowledge graph declares no drug-interaction relation, so interactions between "
                     f"{' and '.join(d.label for d in drugs)} are not checked.")
    texts = {c.text for c in found}
    claims = (*found, *(c for c in synthesis.claims if not (c.kind == "warning" and c.text in texts)))
    warnings = (*dict.fromkeys(c.text for c in found), *(w for w in synthesis.warnings if w not in texts))
    return replace(synthesis, claims=claims, warnings=warnings, safety=tuple(lines), flags=tuple(flags))


# -- the multiple-choice letter -----------------------------------------------------------------------------------------

def vote_letter(grounding: Grounding, options: Sequence[str], chains: Sequence[ChainResult],
                weights: Sequence[float], paths: Sequence[Path], q_iris: set[str]
                ) -> tuple[str | None, Conflict | None, str | None]:
    """The option the chains pick, weighted by their diagnosis-vote weight; ties go to the option the KG
    evidence supports (its entities appear in a path with the question's), then to the earlier letter. With no
    chain pick, the option the evidence alone supports. Returns the letter, the vote, and a flag when the KG
    does not back the pick."""
    letters = LETTERS[: len(options)]
    totals: dict[str, float] = {}
    for i, chain in enumerate(chains):
        letter = extract_letter(chain.answer, options)
        if letter is not None:
            totals[letter] = totals.get(letter, 0.0) + weights[i]
    backed = {letter: _option_support(grounding, option, paths, q_iris) for letter, option in zip(letters, options)}
    if totals:
        best = max(totals, key=lambda x: (totals[x], backed[x], -letters.index(x)))
        conflict = None
        if len(totals) > 1:
            votes = tuple(sorted(totals.items(), key=lambda kv: -kv[1]))
            conflict = Conflict("choice", (), None, votes, f"chains pick different options; {best} wins the vote")
        note = None if backed[best] else f"option {best} is the model's own pick, {NOT_SUPPORTED}"
        return best, conflict, note
    if any(backed.values()):
        best = max(letters, key=lambda x: (backed[x], -letters.index(x)))
        return best, None, f"no chain picked an option; {best} is the one the knowledge-graph evidence names"
    return None, None, None


def _option_support(grounding: Grounding, option: str, paths: Sequence[Path], q_iris: set[str]) -> int:
    """How many ``paths`` hold both an entity ``option`` names and one of the question's."""
    entities = {e.iri for e, _, _ in grounding.mentions(option)} - q_iris
    return sum(1 for p in paths if (node_iris(p) & entities) and (node_iris(p) & q_iris))
