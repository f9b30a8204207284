"""The answer synthesizer: turns the chains' answers into cited claims, resolves conflicts between them, answers what
the question asked, and has the model word an answer from the surviving claims only.

Everything but the wording is deterministic, and the parts are modules of their own: the KG lookups
(``grounding``), claim extraction (``claims``), the votes and contraindications (``resolution``), the texts the
synthesizer writes itself (``verbalise``) and the check of the model's wording (``wording_check``). Every question
gets an answer of its type: a multiple-choice question one letter (the chains' vote, else the model's own pick,
flagged); a free-text question with no supported claim the chains' own answer flagged "not supported by the
knowledge graph", or an abstention (``MirageConfig.no_support``). The model's wording is checked: if it drops the
claims that answer the question or asserts what no claim supports, the answer falls back to a plain verbalisation
of the cited claims. A check that cannot run (KG unreachable) flags the answer; it never passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mirage_kg import ClinicalVocabulary, Entity

from mirage_reason.answer import Claim, Conflict
from mirage_reason.backends.base import Backend, Completion, OutputConstraint
from mirage_reason.pipeline import prompts
from mirage_reason.pipeline.chain import ChainResult
from mirage_reason.pipeline.choices import LETTERS, closest_option, drop_letter_line, extract_letter, parse_options
from mirage_reason.pipeline.claims import (
    asked_intents, diagnosis_claims, find_mentions, gather_claims, held_facts, intent_claims, model_answer,
    order_claims, screen_claims, top_claims)
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.decomposer import question_intents
from mirage_reason.pipeline.grounding import Grounding
from mirage_reason.pipeline.resolution import answer_safety, check_treatments, vote_diagnosis, vote_letter
from mirage_reason.pipeline.sentences import normalise_units, tidy_reply, whole_sentences
from mirage_reason.pipeline.support import Flag, SentenceCheck, Support
from mirage_reason.pipeline.synthesis import Synthesis
from mirage_reason.pipeline.verbalise import (
    NOT_SUPPORTED, SEE_A_DOCTOR, abstention, fallback_text, lead_with_safety, no_claim_text)
from mirage_reason.pipeline.wording import render, wording_constraint, wording_form
from mirage_reason.pipeline.wording_check import WordingCheck

if TYPE_CHECKING:
    from mirage_kg import Differential, KnowledgeGraphLike

__all__ = ["Synthesizer"]


class Synthesizer:
    """Claims, conflicts and votes from the chains of one question; the wording prompt; the finished text."""

    def __init__(self, kg: KnowledgeGraphLike, backend: Backend, config: MirageConfig | None = None) -> None:
        self.kg = kg
        self.backend = backend
        self.config = config or MirageConfig()
        self.grounding = Grounding(kg, self.config)
        self.wording_check = WordingCheck(self.grounding)

    def normalise(self, text: str, mentions: Sequence[tuple[Entity, int, int]] | None = None,
                  entities: set[str] | None = None) -> str:
        """``text`` with the entities it names written as their canonical labels (``Grounding.normalise``)."""
        return self.grounding.normalise(text, mentions, entities)

    # -- the deterministic part -----------------------------------------------------------------------------------

    def analyse(self, question: str, question_entities: Sequence[Entity], chains: Sequence[ChainResult],
                *, resolve: bool = True) -> Synthesis:
        """Extract claims from every chain; with ``resolve``, vote on diagnoses, check treatments, answer the
        question's intents and pick a multiple-choice letter."""
        cfg = self.config
        vocab, problem = self.grounding.vocabulary()
        flags: list[str] = [problem] if problem else []
        q_iris = {e.iri for e in question_entities}
        evidence = [c.evidence_paths for c in chains]
        all_paths = [p for paths in evidence for p in paths]
        mentions, normalised = find_mentions(self.grounding, chains, q_iris)
        kinds = self.grounding.kinds(vocab, [m.entity for m in mentions] + list(question_entities), all_paths)

        weights = [1.0] * len(chains)
        differential: Differential | None = None
        conflicts: list[Conflict] = []
        losers: set[str] = set()
        winners: list[Entity] = []
        if resolve:
            differential = self.grounding.differential(question)
            losers, winners, conflict = vote_diagnosis(self.grounding, question_entities, chains, mentions, kinds,
                                                       weights, differential,
                                                       "diagnosis" in question_intents(question))
            if conflict is not None:
                conflicts.append(conflict)
        if not winners:  # the question names its condition ("what should I take for asthma?")
            winners = [e for e in question_entities if kinds.get(e.iri) == "disease"]
        # A claim is supported only by a path that ties it to the question or to a diagnosis the chains put to the
        # vote (claims tied only to an outvoted one are dropped as off-diagnosis).
        anchors = q_iris | {w.iri for w in winners} | {e.iri for c in conflicts for e in c.entities}
        claims = gather_claims(mentions, evidence, weights, anchors, kinds)
        kept, dropped = screen_claims(claims, mentions, q_iris, losers, cfg.max_citations)

        intents = asked_intents(question)
        options = parse_options(question)
        warnings: list[str] = []
        gaps: list[str] = []
        if resolve:
            kept, more_dropped, more_conflicts, warnings, gaps, more_flags = self._answer_what_was_asked(
                vocab, question_entities, intents, winners, kept, differential, kinds)
            dropped += more_dropped
            conflicts += more_conflicts
            flags += more_flags
        order_claims(kept, winners)
        letter = None
        if options:
            letter, choice, note = vote_letter(self.grounding, options, chains, weights, all_paths, q_iris)
            if choice is not None:
                conflicts.append(choice)
            if note:
                flags.append(note)
        return Synthesis(question, tuple(question_entities), tuple(top_claims(kept, cfg.max_claims)),
                         tuple(dropped), tuple(conflicts), tuple(normalised), tuple(warnings), resolve, intents,
                         tuple(winners), tuple(gaps), tuple(flags), options, letter, model_answer(chains, normalised),
                         cfg.no_support, held=held_facts(all_paths, q_iris), differential=differential)

    def _answer_what_was_asked(self, vocab: ClinicalVocabulary, question_entities: Sequence[Entity],
                               intents: Sequence[str], winners: Sequence[Entity], kept: list[Claim],
                               differential: Differential | None, kinds: dict[str, str]
                               ) -> tuple[list[Claim], list[Claim], list[Conflict], list[str], list[str], list[str]]:
        """The kept claims with the winning diagnosis's, those that answer the question's intents and the
        contraindication warnings; the drugs dropped as contraindicated, their conflicts, the warnings' texts,
        the gaps, and the checks that could not run."""
        flags: list[str] = []
        kept = diagnosis_claims(winners, kept, differential, kinds, self.config.max_citations)
        found_claims, gaps, problem = intent_claims(self.grounding, vocab, intents, winners, kept, kinds)
        kept += found_claims
        flags += [problem] if problem else []
        kept, dropped, warning_claims, conflicts, problem = check_treatments(
            self.grounding, vocab, question_entities, winners, kept, kinds, "avoid" in intents)
        flags += [problem] if problem else []
        kept += warning_claims
        return kept, dropped, conflicts, [c.text for c in warning_claims], gaps, flags

    def answer_safety(self, synthesis: Synthesis) -> Synthesis:
        """``synthesis`` with a safety question answered (``resolution.answer_safety``)."""
        return answer_safety(self.grounding, synthesis)

    # -- wording --------------------------------------------------------------------------------------------------

    def prompt(self, synthesis: Synthesis) -> str | None:
        """The writer's prompt, or None when there is nothing for the model to word (no supported claim, or a
        multiple-choice pick with no claim to explain it)."""
        if not synthesis.claims and not (synthesis.options and synthesis.letter is None):
            return None
        options: tuple[str, ...] = ()
        if synthesis.options:
            options = tuple(f"{letter}. {text}" for letter, text in zip(LETTERS, synthesis.options))
        return self.backend.format_chat(
            prompts.synthesizer_messages(synthesis.question, synthesis.facts, synthesis.warnings, options=options,
                                         gaps=synthesis.gaps,
                                         structured=wording_form(self.config, self.backend, synthesis)))

    def constraint(self, synthesis: Synthesis) -> OutputConstraint | None:
        """The writer's output constraint (cited sentences, the option letter), where the engine can hold it."""
        return wording_constraint(self.config, self.backend, synthesis)

    def merge_prompt(self, question: str, chains: Sequence[ChainResult]) -> str:
        """Without the synthesizer: one prompt over the chains' answers (the reference code's way)."""
        return self.backend.format_chat(prompts.merge_messages(question, [(c.sub_question, c.answer) for c in chains]))

    def finish(self, synthesis: Synthesis, completion: Completion | str | None) -> tuple[str, tuple[str, ...]]:
        """The answer text and its flags. Text no claim supports is never given as the graph's answer: a free-text
        answer no claim supports says what the graph held and shows the chains' own answer apart (its harmful
        sentences and doses withheld), or abstains; a worded answer that is unsafe, drops the claims the question
        asked for or asserts what no claim supports is replaced by the cited claims, verbalised; the writer's other
        sentences that rest on no claim are shown apart. A multiple-choice answer opens with its letter. A safety
        question's answer leads with what the graph says of the drug and the patient's conditions."""
        flags = list(synthesis.flags)
        raw = completion if isinstance(completion, str) or completion is None else completion.text
        if raw and raw.strip().startswith("{"):  # a structured reply as cited sentences, then the advice its
            # grammar leaves no room for (the synthesizer's own sentence, as in the cited claims' verbalisation)
            raw = render(raw, len(synthesis.facts))
            raw = f"{raw} {SEE_A_DOCTOR}" if raw and not synthesis.options else raw
        text = tidy_reply(raw or "")
        if isinstance(completion, Completion) and completion.finish_reason == "length":
            text = whole_sentences(text)
        if synthesis.options:
            return self._finish_choice(synthesis, text, flags)
        if not synthesis.claims:
            if synthesis.abstained:
                return lead_with_safety(synthesis, abstention(synthesis)), tuple(flags)
            own, withheld = self.wording_check.withhold(synthesis, normalise_units(synthesis.model_answer))
            flags += withheld
            flags.append(Flag(f"the answer is the model's own, {NOT_SUPPORTED}", "unsupported_text", detail=own))
            return lead_with_safety(synthesis, no_claim_text(synthesis)), tuple(flags)
        check = self.wording_check
        text, problems, notes = check.check(synthesis, text)
        if problems:
            text = fallback_text(synthesis)
            flags += check.said_of_shown(synthesis, problems, text)
        else:
            flags += notes
            text, moved = check.keep_supported(synthesis, text)
            if moved:
                flags.append(Flag(f"{len(moved)} sentence(s) of the model's wording rest on no claim or assert more "
                                  "than the claims they cite; they are shown apart, labelled as not supported by the "
                                  "knowledge graph", "unsupported_text", detail=" ".join(moved)))
            left = check.left_out(synthesis, text)
            if left:  # what is left of the wording once those sentences went no longer answers the question
                text = fallback_text(synthesis)
                flags += check.said_of_shown(synthesis, [Flag(
                    f"the model's supported sentences leave out {', '.join(left)}", "missing_claim",
                    detail="\t".join(left))], text, "the model's supported sentences")
        return lead_with_safety(synthesis, text), tuple(flags)

    def _finish_choice(self, synthesis: Synthesis, text: str, flags: list[str]) -> tuple[str, tuple[str, ...]]:
        """A multiple-choice answer: its letter (the chains' vote, else the writer's pick, else the option closest
        to what the model wrote, flagged), then the checked explanation."""
        options = synthesis.options
        letter = synthesis.letter
        if letter is None:
            letter = extract_letter(text, options)
            if letter is not None:
                flags.append(f"no chain picked an option; {letter} is the writer's own pick, {NOT_SUPPORTED}")
        if letter is None:
            letter = closest_option(options, " ".join((text, synthesis.model_answer)))
            flags.append(f"the model named no option; {letter} is the option closest to what it wrote, "
                         f"{NOT_SUPPORTED}")
        explanation = ""
        if synthesis.claims:
            checked, problems, notes = self.wording_check.check(synthesis, drop_letter_line(text))
            explanation = fallback_text(synthesis) if problems else checked
            flags += self.wording_check.said_of_shown(synthesis, problems, explanation) if problems else notes
        head = f"Answer: {letter}. {options[LETTERS.index(letter)]}"
        return (f"{head}\n\n{explanation}" if explanation else head), tuple(flags)

    def review(self, synthesis: Synthesis, text: str, flags: Sequence[str], abstained: bool = False
               ) -> tuple[Support, tuple[SentenceCheck, ...]]:
        """The verdict on the finished ``text`` and one check per sentence (``WordingCheck.review``)."""
        return self.wording_check.review(synthesis, text, flags, abstained)

    def synthesize(self, question: str, question_entities: Sequence[Entity], chains: Sequence[ChainResult],
                   *, seed: int | None = None) -> tuple[Synthesis, str, tuple[str, ...], Completion | None]:
        """One question end to end (the coordinator batches the wording step of many)."""
        synthesis = self.answer_safety(self.analyse(question, question_entities, chains))
        prompt = self.prompt(synthesis)
        completion = None
        if prompt is not None:
            completion = self.backend.generate([prompt], (), self.config.synthesizer_params(seed),
                                               constraint=self.constraint(synthesis))[0]
        text, flags = self.finish(synthesis, completion)
        return synthesis, text, flags, completion
