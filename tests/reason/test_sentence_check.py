"""A sentence of the model's wording is supported only if what it asserts is what its cited facts state: a [n]
marker alone supports nothing. And flags about left-out claims describe the text the reader is finally shown."""

from __future__ import annotations

import re

from fake_kg import ENTITIES, TRIPLES, FakeKG, ent

from mirage_kg import Path
from mirage_reason.backends import ScriptedBackend
from mirage_reason.pipeline.chain import ChainResult
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.support import unsupported_text
from mirage_reason.pipeline.synthesizer import Synthesizer

QUESTION = "I have palpitations. What could it be and what should I take?"


def heart_kg() -> FakeKG:
    entities = {**ENTITIES, "Atrial fibrillation": ("afib",), "Warfarin": ("Coumadin",), "Apixaban": (),
                "Palpitations": ()}
    triples = [*TRIPLES, ("Atrial fibrillation", "has_symptom", "Palpitations"),
               ("Atrial fibrillation", "need_medication", "Warfarin"),
               ("Atrial fibrillation", "need_medication", "Apixaban")]
    return FakeKG(entities=entities, triples=triples)


def writer(template: str):  # type: ignore[no-untyped-def]
    """A model that writes ``template``, each ``{Label}`` replaced by the number of the fact naming Label."""

    def write(prompt: str) -> str:
        numbers = {text: n for n, text in re.findall(r"^\[(\d+)\] (.+)$", prompt, re.MULTILINE)}

        def number(match: re.Match[str]) -> str:
            return next(n for text, n in numbers.items() if match.group(1) in text)

        return re.sub(r"\{(\w+)\}", number, template)

    return write


def ask(template: str):  # type: ignore[no-untyped-def]
    kg = heart_kg()
    synth = Synthesizer(kg, ScriptedBackend(writer(template)), MirageConfig())
    paths = tuple(Path((s,)) for s in kg._steps(ent("Atrial fibrillation")))
    result = ChainResult(sub_question="q", question="q", answer="Atrial fibrillation; warfarin or apixaban.",
                         text="", searches=(), seed_paths=paths, trace=(), finish_reason="answered", turns=1,
                         completion_tokens=3, prompt_tokens=10, search_seconds=0.0)
    s, text, flags, _ = synth.synthesize(QUESTION, [ent("Palpitations")], [result])
    support, checks = synth.review(s, text, flags)
    return s, text, flags, support, checks


def check_of(checks, words: str):  # type: ignore[no-untyped-def]
    return next(c for c in checks if words in c.text)


def test_an_invented_sentence_with_a_citation_is_not_supported() -> None:
    # what SmolLM2 wrote over the demo KG: a real [n], an invented assertion
    s, text, flags, support, checks = ask(
        "You may have atrial fibrillation [{Palpitations}]. Apixaban can treat it [{Apixaban}]. Palpitations can "
        "be a sign of atrioventricular tachycardia (AVT), which is the fastest beating heart rhythm in the human "
        "body [{Warfarin}].")
    assert "atrioventricular" not in text and "fastest" not in text  # not the graph's answer
    assert "atrioventricular tachycardia" in unsupported_text(flags)  # shown apart, under its label
    assert support.verdict == "partial"
    _, bad_checks = Synthesizer(heart_kg(), ScriptedBackend([]), MirageConfig()).review(
        s, "Palpitations can be a sign of atrioventricular tachycardia (AVT), which is the fastest beating heart "
           "rhythm in the human body [2].", ())
    [bad] = bad_checks
    assert not bad.supported
    for word in ("atrioventricular", "tachycardia", "avt", "fastest", "human", "body"):
        assert word in bad.reason.casefold()


def test_a_faithful_paraphrase_stays_supported() -> None:
    s, text, flags, support, checks = ask(
        "You may have atrial fibrillation [{Palpitations}]. Atrial fibrillation can be treated with warfarin "
        "[{Warfarin}]. Apixaban is also a medication for it [{Apixaban}]. Apixaban can be taken for atrial "
        "fibrillation [{Apixaban}].")
    assert "Atrial fibrillation can be treated with warfarin" in text
    assert "Apixaban is also a medication for it" in text and "Apixaban can be taken" in text
    assert all(c.supported for c in checks), [(c.text, c.reason) for c in checks]
    assert support.verdict == "grounded" and not unsupported_text(flags)


def test_a_sentence_citing_a_fact_about_another_drug_is_not_supported() -> None:
    # Warfarin is a claim, but the fact about Apixaban does not say that Warfarin treats anything
    s, text, flags, support, checks = ask(
        "You may have atrial fibrillation [{Palpitations}]. Apixaban can treat it [{Apixaban}]. Warfarin treats "
        "atrial fibrillation [{Apixaban}].")
    assert "Apixaban can treat it" in text
    assert "Warfarin treats" not in text and "Warfarin treats" in unsupported_text(flags)
    assert support.verdict == "partial"
    _, alone = Synthesizer(heart_kg(), ScriptedBackend([]), MirageConfig()).review(
        s, "Warfarin treats atrial fibrillation [" + str(1 + s.facts.index(
            next(f for f in s.facts if "Apixaban" in f))) + "].", ())
    [bad] = alone
    assert not bad.supported and "Warfarin" in bad.reason


def test_a_sentence_that_negates_its_fact_is_not_supported() -> None:
    s, text, flags, support, checks = ask(
        "You may have atrial fibrillation [{Palpitations}]. Apixaban can treat it [{Apixaban}]. Warfarin does not "
        "treat atrial fibrillation [{Warfarin}].")
    assert "does not" not in text and "Warfarin does not treat" in unsupported_text(flags)
    assert support.verdict == "partial"


def test_a_left_out_flag_describes_the_text_finally_shown() -> None:
    # the wording names no medication: the answer falls back to the cited claims, which name both drugs
    s, text, flags, support, checks = ask("You may have atrial fibrillation [{Palpitations}].")
    assert "Apixaban" in text and "Warfarin" in text
    for flag in flags:
        for label in ("Apixaban", "Warfarin", "Atrial fibrillation"):
            assert not ("leaves out" in flag and label in flag and label in text), flag
    assert any(getattr(f, "code", "") == "missing_claim" for f in flags)  # the replacement is still said
    assert support.verdict == "partial"


def test_a_left_out_claim_is_checked_after_unsupported_sentences_go() -> None:
    # the only sentence naming a drug is invented, so it goes apart: what is left must still answer the question
    s, text, flags, support, checks = ask(
        "You may have atrial fibrillation [{Palpitations}]. Apixaban, the fastest drug in the human body, treats "
        "it [{Apixaban}].")
    first_drug = next(c.entity.label for c in s.claims if c.kind == "drug")
    assert first_drug in text and "fastest" not in text
    assert any(f"the model's supported sentences left out {first_drug}, so the answer gives the cited claims" in f
               for f in flags), flags
    assert support.verdict == "partial"


def test_content_words_drop_connectives_and_fold_inflections() -> None:
    from mirage_reason.pipeline.sentence_check import content_words

    assert content_words("Atrial fibrillation can be treated with warfarin [2].") == \
        ["atrial", "fibrillation", "treat", "warfarin"]
    assert content_words("It is the fastest beating heart rhythm.") == ["fastest", "beat", "heart", "rhythm"]
