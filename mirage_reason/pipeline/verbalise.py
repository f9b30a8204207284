"""The texts the synthesizer writes itself from the graph, never in the model's words: the cited claims verbalised
plainly (what an answer falls back on), the abstention, what the graph held when no claim survived, and the safety
answer that leads a reply."""

from __future__ import annotations

from mirage_reason.pipeline.sentences import split_sentences
from mirage_reason.pipeline.synthesis import Synthesis

__all__ = ["NOT_SUPPORTED", "SEE_A_DOCTOR", "abstention", "fallback_text", "held_statement", "lead_with_safety",
           "no_claim_text", "own_sentences"]

NOT_SUPPORTED = "not supported by the knowledge graph"
SEE_A_DOCTOR = "Please see a doctor about your situation."


def fallback_text(synthesis: Synthesis) -> str:
    """The cited claims verbalised plainly: what it may be, the facts (numbered), gaps and warnings."""
    parts = []
    diagnoses = [d.label for d in synthesis.diagnoses
                 if d.iri not in {e.iri for e in synthesis.question_entities}]
    if diagnoses:
        parts.append(f"The knowledge graph points to {' or '.join(diagnoses)}.")
    facts = [c.text for c in synthesis.claims if c.kind != "warning"]
    if facts:
        # numbered as the writer's prompt numbers them (warnings included), so [n] names one claim everywhere
        number = {fact: i for i, fact in enumerate(synthesis.facts, start=1)}
        numbered = " ".join(f"{fact} [{number[fact]}]." for fact in dict.fromkeys(facts))
        parts.append(f"From the knowledge graph: {numbered}")
    parts += list(synthesis.gaps)
    parts += [f"Warning: {w}." for w in synthesis.warnings]
    parts.append(SEE_A_DOCTOR)
    return " ".join(parts)


def abstention(synthesis: Synthesis) -> str:
    """What the graph held and why no claim survived, and no guess."""
    return f"{held_statement(synthesis)} So I will not guess. Please ask a doctor."


def no_claim_text(synthesis: Synthesis) -> str:
    """The answer when no claim survived and the model's own answer is shown apart (``no_support="flag"``)."""
    return (f"No claim of the knowledge graph supports an answer to this question. {held_statement(synthesis)}"
            " The model's own answer is shown apart, labelled as not supported by the knowledge graph.")


def held_statement(synthesis: Synthesis) -> str:
    """What the graph held for the question (its entities, the facts the chains saw about them) and why no
    claim survived (what the chains' answers named, and why each was dropped)."""
    labels = [e.label for e in synthesis.question_entities]
    if not labels:
        parts = ["Nothing in the question links to the knowledge graph."]
    else:
        parts = [f"The knowledge graph links the question to {', '.join(labels)}."]
        if synthesis.held:
            parts.append("Among the facts the reasoning saw: " + "; ".join(p.text for p in synthesis.held) + ".")
        else:
            parts.append("The reasoning saw no fact about them.")
    dropped = [f"{c.entity.label} ({c.reason})" for c in synthesis.dropped[:4]]
    if dropped:
        parts.append("No claim survived: the chains' answers named " + "; ".join(dropped) + ".")
    else:
        parts.append("No claim survived: the chains' answers named nothing the knowledge graph holds.")
    return " ".join(parts)


def own_sentences(synthesis: Synthesis) -> set[str]:
    """Every sentence the synthesizer writes itself from the graph for ``synthesis`` (stripped)."""
    texts = [fallback_text(synthesis), abstention(synthesis), no_claim_text(synthesis),
             *synthesis.safety, *synthesis.gaps,
             *(f"Warning: {w}." for w in synthesis.warnings), *(c.text + "." for c in synthesis.claims)]
    return {s.strip() for part in texts for s in split_sentences(part)}


def lead_with_safety(synthesis: Synthesis, text: str) -> str:
    """``text`` led by the safety answer, unless it already opens with it."""
    if not synthesis.safety:
        return text
    lead = " ".join(synthesis.safety)
    return text if text.startswith(lead) else f"{lead}\n\n{text}"
