"""The check of the model's wording against the claims. A worded answer may name only the question's entities, the
claims' and those on their cited paths; a sentence is a problem when it tells the reader to do something harmful,
names a drug the graph contraindicates here as if it were safe, states a dose no claim states or recommends what no
claim supports; an answer that leaves out the diagnosis or what the question asked for is replaced by the cited
claims. Each sentence of the finished text is then checked for the claims it rests on, and the answer gets its
verdict (grounded, partial, unsupported). A check that cannot run (KG unreachable) is a problem; it never passes."""

from __future__ import annotations

import re
from collections.abc import Sequence

from mirage_kg import Entity, MirageError

from mirage_reason.pipeline import sentence_check
from mirage_reason.pipeline.claims import INTENT_ANSWERS, far_end
from mirage_reason.pipeline.grounding import Grounding
from mirage_reason.pipeline.resolution import patient_conditions
from mirage_reason.pipeline.sentences import (
    ADVICE, NEGATED, RECOMMENDS, WARNS, dose_key, names_phrase, normalise_units, split_sentences)
from mirage_reason.pipeline.support import DOSE, Flag, SentenceCheck, Support, flag_json, harmful_in
from mirage_reason.pipeline.synthesis import Synthesis
from mirage_reason.pipeline.verbalise import fallback_text, own_sentences

__all__ = ["WordingCheck", "allowed_entities", "stated_doses", "verdict"]


class WordingCheck:
    """The wording checks of one synthesizer, reading the text through its ``grounding`` (links cached per text)."""

    def __init__(self, grounding: Grounding) -> None:
        self.grounding = grounding

    def check(self, synthesis: Synthesis, text: str) -> tuple[str, list[str], list[str]]:
        """``text`` (units normalised, unstated warnings appended), what is wrong with it (no text; an entity no
        claim supports; a recommendation that names no supported drug or procedure, "drink bleach, it treats
        asthma"; a diagnosis or an asked-for claim left out: the caller falls back on the claims) and notes (a
        contraindicated drug named without its warning: the warning is appended)."""
        if not text:
            return "", [Flag("the model wrote no usable answer; the claims are listed as they are",
                             "empty_wording")], []
        text = normalise_units(text)
        problems: list[str] = []
        notes: list[str] = []
        allowed = allowed_entities(synthesis)
        warnings = {c.entity.iri: c for c in synthesis.claims if c.kind == "warning"}
        treatments = {c.entity.iri for c in synthesis.claims if c.kind in ("drug", "procedure")}
        found = self.grounding.mentions(text)
        named = {e.iri for e, _, _ in found}
        unstated: list[str] = []
        for entity, _, _ in found:
            warning = warnings.pop(entity.iri, None)
            if warning is not None:
                # The writer named a drug the graph contraindicates here (small models even recommend it): the
                # warning must be in the text the user reads, not only in the claims.
                if warning.text.lower() not in text.lower():
                    unstated.append(warning.text)
                    notes.append(Flag(f"the answer mentions {entity.label}, which the knowledge graph "
                                      f"contraindicates ({warning.text})", "contraindicated"))
            elif entity.iri not in allowed:
                problems.append(Flag(f"the model's wording mentions {entity.label}, which no surviving claim "
                                     "supports", "unsupported_entity"))
                allowed.add(entity.iri)
        at = 0
        for sentence in split_sentences(text):
            start = text.find(sentence, at)
            at = start + len(sentence)
            inside = [(ent, s, e) for ent, s, e in found if start <= s < at]
            # harmful substances and actions, drugs the graph contraindicates here, doses: whatever else it names
            problems += self.sentence_problems(synthesis, sentence, inside, allowed, entities=False)
            if RECOMMENDS.search(sentence) and not NEGATED.search(sentence):
                if not any(ent.iri in treatments for ent, _, _ in inside):
                    problems.append(Flag(f"the model's wording recommends what no claim supports: "
                                         f"{sentence.strip()!r}", "unsupported_recommendation"))
        missing = self.left_out(synthesis, text, named)
        if missing:
            problems.append(Flag(f"the model's wording leaves out {', '.join(missing)}", "missing_claim",
                                 detail="\t".join(missing)))
        if unstated:
            text += "\n\n" + " ".join(f"Warning: {w}." for w in unstated)
        return text, problems, notes

    def left_out(self, synthesis: Synthesis, text: str, named: set[str] | None = None) -> list[str]:
        """The labels of what the question asked for (the diagnosis, the first claim of each asked-for kind) that
        ``text`` does not name (``named``: the entities it names, when already linked)."""
        named = {e.iri for e, _, _ in self.grounding.mentions(text)} if named is None else named
        required = [d for d in synthesis.diagnoses if d.iri not in {e.iri for e in synthesis.question_entities}]
        for intent in synthesis.intents:
            if intent in INTENT_ANSWERS:
                kind = INTENT_ANSWERS[intent][0]
                required += [c.entity for c in synthesis.claims if c.kind == kind][:1]
        return [e.label for e in dict.fromkeys(required)
                if e.iri not in named and e.label.casefold() not in text.casefold()]

    def said_of_shown(self, synthesis: Synthesis, flags: Sequence[str], shown: str,
                      wording: str = "the model's wording") -> list[str]:
        """``flags`` with each left-out flag said of ``shown``, the text the reader gets: what it still leaves
        out, or that the model's ``wording`` left it out and the cited claims, which name it, replaced it."""
        out: list[str] = []
        for flag in flags:
            if not isinstance(flag, Flag) or flag.code != "missing_claim" or not flag.detail:
                out.append(flag)
                continue
            labels = flag.detail.split("\t")
            still = [label for label in self.left_out(synthesis, shown) if label in labels]
            if still:
                out.append(Flag(f"the answer leaves out {', '.join(still)}", "missing_claim", detail=flag.detail))
            else:
                out.append(Flag(f"{wording} left out {', '.join(labels)}, so the answer gives the cited claims "
                                "instead, which name it", "missing_claim", detail=flag.detail))
        return out

    def withhold(self, synthesis: Synthesis, text: str) -> tuple[str, list[Flag]]:
        """The model's own text with each harmful or dose sentence replaced by a note of what was withheld."""
        found = self.grounding.mentions(text)
        out, flags, at = [], [], 0
        for sentence in split_sentences(text):
            start = text.find(sentence, at)
            at = start + len(sentence)
            spans = [(e, s, t) for e, s, t in found if start <= s < at]
            bad = [f for f in self.sentence_problems(synthesis, sentence, spans, set(), entities=False)
                   if f.code in ("harmful_instruction", "unsupported_dose")]
            if bad:
                out.append(f"[withheld: {bad[0].code.replace('_', ' ')}]")
                flags += [Flag(f"the model's own answer: {f}; the sentence is withheld", f.code) for f in bad]
            else:
                out.append(sentence.strip())
        return " ".join(out), flags

    def keep_supported(self, synthesis: Synthesis, text: str) -> tuple[str, list[str]]:
        """``text`` without the sentences that name no claim (advice and the synthesizer's own sentences stay),
        and those sentences; the cited claims, verbalised, when nothing that states a fact is left."""
        _, checks = self.review(synthesis, text, ())
        moved = [c.text for c in checks if not c.supported]
        if not moved:
            return text, []
        kept = [c for c in checks if c.supported]
        if not [c for c in kept if c.claims]:
            return fallback_text(synthesis), moved
        keep = {c.text for c in kept}
        paragraphs = []
        for paragraph in text.split("\n\n"):
            sentences = [x.strip() for x in split_sentences(paragraph) if x.strip() in keep]
            if sentences:
                paragraphs.append(" ".join(sentences))
        return "\n\n".join(paragraphs), moved

    def review(self, synthesis: Synthesis, text: str, flags: Sequence[str], abstained: bool = False
               ) -> tuple[Support, tuple[SentenceCheck, ...]]:
        """The verdict on the finished ``text`` and one check per sentence: the claims it rests on (``[n]`` markers,
        the claims' entities it names, the facts it repeats) and whether the graph supports it. Sentences the
        synthesizer wrote itself (the cited facts, gaps, warnings, the abstention) rest on the graph by
        construction; advice to see a doctor states no fact; anything else needs a claim and no problem."""
        claims = list(synthesis.claims)
        facts = synthesis.facts
        ours = own_sentences(synthesis)
        found = self.grounding.mentions(text)
        allowed = allowed_entities(synthesis)
        checks: list[SentenceCheck] = []
        start = 0
        for sentence in split_sentences(text):
            at = text.find(sentence, start)
            start = at + len(sentence)
            named: set[int] = set()
            for n in re.findall(r"\[(\d+)\]", sentence):
                if 1 <= int(n) <= len(facts):
                    named.update(i for i, c in enumerate(claims) if c.text == facts[int(n) - 1])
            spans = [(e, s, t) for e, s, t in found if at <= s < start]
            iris = {e.iri for e, _, _ in spans}
            folded = sentence.casefold()
            for i, c in enumerate(claims):
                if c.entity.iri in iris or c.text.casefold() in folded or names_phrase(folded, c.entity.label):
                    named.add(i)
            clean = sentence.strip()
            if clean in ours:
                checks.append(SentenceCheck(clean, tuple(sorted(named)), True,
                                            "written by the synthesizer from the knowledge graph"))
                continue
            problems = [str(f) for f in self.sentence_problems(synthesis, sentence, spans, allowed)]
            if problems:
                checks.append(SentenceCheck(clean, tuple(sorted(named)), False, "; ".join(problems)))
            elif re.search(r"\?(?:[\"')\]]|\s*\[\d+\])*$", clean):
                checks.append(SentenceCheck(clean, tuple(sorted(named)), False, "a question asserts nothing"))
            elif ADVICE.search(sentence) and not named:
                checks.append(SentenceCheck(clean, (), True, "advice; states no medical fact"))
            elif named:
                gap = self._assertion_gap(synthesis, text, sentence, at, named)
                checks.append(SentenceCheck(clean, tuple(sorted(named)), gap is None,
                                            gap or "states what the claims it cites state"))
            else:
                checks.append(SentenceCheck(clean, (), False, "no claim of the knowledge graph supports it"))
        return verdict(synthesis, checks, flags, abstained), tuple(checks)

    def _assertion_gap(self, synthesis: Synthesis, text: str, sentence: str, at: int, named: set[int]) -> str | None:
        """Why ``sentence`` (at ``at`` in ``text``) asserts more than its cited claims state, or None
        (``sentence_check``): the claims of its ``[n]`` markers, else the claims it names (``named``)."""
        numbers = sentence_check.markers(sentence)
        facts = synthesis.facts
        bad = [n for n in numbers if not 1 <= n <= len(facts)]
        cited_facts = {facts[n - 1] for n in numbers if 1 <= n <= len(facts)}
        if numbers:
            cited = [c for c in synthesis.claims if c.text in cited_facts]
        else:
            cited = [c for i, c in enumerate(synthesis.claims) if i in named]
        end = at + len(sentence)
        mentions = [(e, s - at, t - at, method) for e, s, t, method in self.grounding.linked(text) if at <= s < end]
        return sentence_check.assertion_gap(sentence, mentions, cited, synthesis.question_entities,
                                            by_marker=bool(numbers), bad_markers=bad)

    def sentence_problems(self, synthesis: Synthesis, sentence: str, spans: Sequence[tuple[Entity, int, int]],
                          allowed: set[str], *, entities: bool = True) -> list[Flag]:
        """What makes one sentence unsafe or unsupported, whatever else it names: a harmful substance or action
        (``ontologies/harmful.tsv``), a drug the graph contraindicates in the question's conditions named as if it
        were safe, a dose no claim states, and (``entities``) an entity no surviving claim supports. A check that
        cannot run is a problem too: the sentence is not shown as checked."""
        problems: list[Flag] = []
        for words, term in harmful_in(sentence):
            problems.append(Flag(f"it tells the reader to use or do something harmful ({words!r}: {term.why})",
                                 "harmful_instruction"))
        if not WARNS.search(sentence):
            try:
                for drug, where in self._contraindicated_named(synthesis, spans):
                    problems.append(Flag(f"it names {drug.label} as if it were safe, but the knowledge graph "
                                         f"contraindicates it in {where}", "harmful_instruction"))
            except MirageError as exc:
                problems.append(Flag(f"the contraindication check could not run on this sentence ({exc})",
                                     "check_unavailable"))
        stated = stated_doses(synthesis)
        for dose in DOSE.finditer(normalise_units(sentence)):
            if dose_key(dose.group(0)) not in stated:
                problems.append(Flag(f"it states a dose ({dose.group(0).strip()}) that no claim states",
                                     "unsupported_dose"))
        if entities:
            for entity, _, _ in spans:
                if entity.iri not in allowed:
                    problems.append(Flag(f"it names {entity.label}, which no surviving claim supports",
                                         "unsupported_entity"))
        return problems

    def _contraindicated_named(self, synthesis: Synthesis, spans: Sequence[tuple[Entity, int, int]]
                               ) -> list[tuple[Entity, str]]:
        """The drugs among ``spans`` that the KG contraindicates in one of the patient's conditions, with where.
        MirageError when the KG cannot answer."""
        if not spans:
            return []
        conditions = patient_conditions(synthesis)
        warned = {c.entity.iri: c for c in synthesis.claims if c.kind == "warning"}
        vocab, problem = self.grounding.vocabulary()
        if problem is not None:
            raise MirageError(problem)
        out = []
        for entity, _, _ in spans:
            if entity.iri in conditions and entity.iri not in warned:
                continue
            against = [p for p in self.grounding.contraindications(vocab, entity)
                       if far_end(p, entity).iri in conditions]
            if entity.iri in warned and not against:
                against = list(warned[entity.iri].citations)
            if against:
                out.append((entity, ", ".join(dict.fromkeys(far_end(p, entity).label for p in against))))
        return out


def allowed_entities(synthesis: Synthesis) -> set[str]:
    """The entities a worded answer may name: the question's, the claims' and those on their cited paths."""
    allowed = {e.iri for e in synthesis.question_entities}
    for claim in synthesis.claims:
        allowed.add(claim.entity.iri)
        allowed.update(n.iri for p in claim.citations for n in p.nodes)
    return allowed


def stated_doses(synthesis: Synthesis) -> set[str]:
    """Every dose a claim or one of its cited paths states, as :func:`dose_key` reads it."""
    texts = [c.text for c in synthesis.claims] + [p.text for c in synthesis.claims for p in c.citations]
    return {dose_key(m.group(0)) for t in texts for m in DOSE.finditer(normalise_units(t))}


def verdict(synthesis: Synthesis, checks: Sequence[SentenceCheck], flags: Sequence[str], abstained: bool
            ) -> Support:
    """The answer's verdict: unsupported (it abstains, no claim supports it, the pick is the model's own),
    partial (the wording was replaced or shown apart, a check could not run, some sentences rest on no claim) or
    grounded (every sentence rests on cited claims)."""
    codes = {flag_json(f)["code"] for f in flags}
    if abstained:
        return Support("unsupported", "no claim of the knowledge graph survived; the answer abstains")
    if not synthesis.claims and not (synthesis.options and synthesis.letter is not None):
        return Support("unsupported", "no claim of the knowledge graph supports an answer; what the model "
                                      "wrote is shown apart, under its own label")
    if synthesis.options and (synthesis.letter is None or "model_pick" in codes
                              or any("own pick" in f or "closest" in f for f in flags)):
        return Support("unsupported", "the knowledge graph does not back the option picked")
    replaced = [c for c in ("harmful_instruction", "unsupported_dose", "unsupported_entity",
                            "unsupported_recommendation", "missing_claim", "empty_wording") if c in codes]
    if replaced:
        return Support("partial", "the model's wording was replaced by the cited claims ("
                       + ", ".join(c.replace("_", " ") for c in replaced) + ")")
    if "unsupported_text" in codes:
        return Support("partial", "the answer shows the cited claims; the model's sentences no claim supports "
                                  "are shown apart, under their own label")
    if "check_unavailable" in codes:
        return Support("partial", "a check could not run; the answer is not fully checked")
    factual = [c for c in checks if c.reason != "advice; states no medical fact"]
    unsupported = [c for c in factual if not c.supported]
    if unsupported and len(unsupported) == len(factual):
        return Support("unsupported", "no sentence of the answer rests on a claim of the knowledge graph")
    if unsupported:
        return Support("partial", f"{len(unsupported)} of {len(factual)} sentences rest on no claim")
    return Support("grounded", "every sentence rests on claims the knowledge graph supports, cited")
