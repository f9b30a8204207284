"""The synthesizer: claims and their citations, normalisation, the weighted diagnosis vote, is-a compatibility,
contraindicated and off-diagnosis treatments, unsupported claims, abstention, and the wording step's guard rails."""

from __future__ import annotations

from fake_kg import FakeKG, ent

from mirage_kg import Path, StoreError
from mirage_kg.model.kinds import vocabulary
from mirage_reason.backends import ScriptedBackend
from mirage_reason.pipeline.chain import ChainResult
from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.pipeline.support import unsupported_text
from mirage_reason.pipeline.grounding import entity_kind
from mirage_reason.pipeline.sentences import normalise_units
from mirage_reason.pipeline.synthesizer import Synthesizer


def facts(kg: FakeKG, *labels: str) -> tuple[Path, ...]:
    return tuple(Path((s,)) for label in labels for s in kg._steps(ent(label)))


def chain(answer: str, paths: tuple[Path, ...], sub: str = "q") -> ChainResult:
    return ChainResult(sub_question=sub, question="q", answer=answer, text=answer, searches=(), seed_paths=paths,
                       trace=(), finish_reason="answered", turns=1, completion_tokens=3, prompt_tokens=10,
                       search_seconds=0.0)


def make(script: list[str] | None = None, **cfg: object) -> tuple[Synthesizer, FakeKG, ScriptedBackend]:
    kg = FakeKG()
    backend = ScriptedBackend(script or [], cycle=bool(script))
    return Synthesizer(kg, backend, MirageConfig(**cfg)), kg, backend  # type: ignore[arg-type]  # **cfg: mixed values


FEVER_COUGH = "I have a fever and a cough. What is it?"


def test_claims_cite_the_paths_that_contain_them() -> None:
    synth, kg, _ = make()
    s = synth.analyse(FEVER_COUGH, [ent("Fever"), ent("Cough")],
                      [chain("You probably have the flu; oseltamivir helps.", facts(kg, "Influenza"))])
    assert {c.entity.label for c in s.claims} == {"Influenza", "Oseltamivir"}
    flu = next(c for c in s.claims if c.entity.label == "Influenza")
    assert flu.kind == "disease" and flu.chains == (0,)
    # paths touching the question's entities come first
    assert flu.citations[0].text in ("Influenza has symptom Cough", "Influenza has symptom Fever")
    # only paths that tie it to the question count ("Influenza has symptom Fatigue" does not)
    assert len(flu.citations) == 2 and all(ent("Influenza") in p.nodes for p in flu.citations)
    assert flu.to_json()["citations"][0].keys() == {"nodes", "steps", "text", "sources"}
    # canonical labels replace synonyms; a difference of case only is left as written
    assert s.normalised_answers == ("You probably have the Influenza; oseltamivir helps.",)
    assert not s.abstained and s.conflicts == ()


def test_unsupported_claims_are_dropped_with_a_reason() -> None:
    synth, kg, _ = make()
    s = synth.analyse(FEVER_COUGH, [ent("Fever")], [chain("Influenza, or maybe migraine.", facts(kg, "Influenza"))])
    assert [c.entity.label for c in s.claims] == ["Influenza"]
    [dropped] = s.dropped
    assert dropped.entity.label == "Migraine" and dropped.status == "unsupported"


def test_question_entities_are_context_not_claims() -> None:
    synth, kg, _ = make()
    s = synth.analyse(FEVER_COUGH, [ent("Fever"), ent("Cough")], [chain("Fever and cough: influenza.",
                                                                        facts(kg, "Influenza"))])
    assert [c.entity.label for c in s.claims] == ["Influenza"]


def test_majority_weighted_vote_settles_a_diagnosis_conflict() -> None:
    synth, kg, _ = make()
    chains = [chain("It is influenza.", facts(kg, "Influenza")),
              chain("Influenza, most likely.", facts(kg, "Influenza")),
              chain("A common cold; take paracetamol.", facts(kg, "Common cold"))]
    s = synth.analyse(FEVER_COUGH, [ent("Fever"), ent("Cough")], chains)
    [conflict] = s.conflicts
    assert conflict.kind == "diagnosis" and conflict.winner == ent("Influenza")
    assert dict(conflict.votes)["KG:Influenza"] > dict(conflict.votes)["KG:Common_cold"]
    assert [c.entity.label for c in s.claims] == ["Influenza"]
    status = {c.entity.label: c.status for c in s.dropped}
    assert status == {"Common cold": "outvoted", "Paracetamol": "off-diagnosis"}


def test_vote_weights_evidence_coverage_and_match_to_the_question() -> None:
    synth, kg, _ = make()
    flu, cold = facts(kg, "Influenza"), facts(kg, "Common cold")
    # one chain each: influenza explains both question findings and has the wider neighbourhood
    s = synth.analyse(FEVER_COUGH, [ent("Fever"), ent("Cough")],
                      [chain("A common cold.", cold), chain("Influenza.", flu)])
    assert s.conflicts[0].winner == ent("Influenza")
    # two chains repeating the cold (which explains the cough only) do not outvote influenza's coverage
    s = synth.analyse(FEVER_COUGH, [ent("Fever"), ent("Cough")],
                      [chain("A common cold.", cold), chain("Common cold again.", cold), chain("Influenza.", flu)])
    assert s.conflicts[0].winner == ent("Influenza")
    # at equal coverage (both explain a cough) the chains' votes decide
    s = synth.analyse("I have a cough. What is it?", [ent("Cough")],
                      [chain("A common cold.", cold), chain("Common cold again.", cold), chain("Influenza.", flu)])
    assert s.conflicts[0].winner == ent("Common cold")
    assert [c.entity.label for c in s.claims] == ["Common cold"]


def test_a_diagnosis_and_its_subtype_do_not_conflict() -> None:
    synth, kg, _ = make()
    s = synth.analyse("I feel tiredness all the time.", [ent("Fatigue")],
                      [chain("Type 2 diabetes mellitus.", facts(kg, "Type 2 diabetes mellitus")),
                       chain("Diabetes mellitus.", facts(kg, "Diabetes mellitus"))])
    assert s.conflicts == ()
    assert {c.entity.label for c in s.claims} == {"Type 2 diabetes mellitus", "Diabetes mellitus"}


def test_sibling_subtypes_do_conflict() -> None:
    synth, kg, _ = make()
    s = synth.analyse("I pass a lot of urine (polyuria).", [ent("Polyuria")],
                      [chain("Type 2 diabetes mellitus.", facts(kg, "Type 2 diabetes mellitus", "Diabetes mellitus")),
                       chain("Type 1 diabetes mellitus.", facts(kg, "Type 1 diabetes mellitus")),
                       chain("Type 1 diabetes mellitus.", facts(kg, "Type 1 diabetes mellitus"))])
    [conflict] = s.conflicts
    assert conflict.winner == ent("Type 1 diabetes mellitus")


def test_contraindicated_drug_is_dropped_with_a_warning() -> None:
    synth, kg, _ = make()
    question = "I have a stomach ulcer and the flu. What should I take?"
    s = synth.analyse(question, [ent("Peptic ulcer disease"), ent("Influenza")],
                      [chain("Take ibuprofen.", facts(kg, "Influenza")),
                       chain("Oseltamivir is the drug.", facts(kg, "Influenza"))])
    assert {c.entity.label: c.status for c in s.dropped} == {"Ibuprofen": "contraindicated"}
    kinds = {c.entity.label: c.kind for c in s.claims}
    assert kinds == {"Oseltamivir": "drug", "Ibuprofen": "warning"}
    warning = next(c for c in s.claims if c.kind == "warning")
    assert warning.text == "Ibuprofen is contraindicated in Peptic ulcer disease"
    assert s.warnings == ("Ibuprofen is contraindicated in Peptic ulcer disease",)
    [conflict] = s.conflicts
    assert conflict.kind == "treatment" and conflict.evidence[0].text == warning.text


def test_drug_contraindicated_in_the_winning_diagnosis_of_another_chain() -> None:
    synth, kg, _ = make()
    # one chain diagnoses asthma, the other recommends propranolol (for migraine): both survive, but the KG
    # contraindicates propranolol in asthma, so it goes
    s = synth.analyse("Wheezing and headache?", [ent("Wheezing"), ent("Headache")],
                      [chain("This is asthma.", facts(kg, "Asthma")),
                       chain("Propranolol for the headache.", facts(kg, "Migraine"))])
    assert {c.entity.label: c.status for c in s.dropped}.get("Propranolol") == "contraindicated"


def test_no_evidence_means_abstention_and_no_model_call() -> None:
    synth, _, backend = make(no_support="abstain")
    s, text, flags, completion = synth.synthesize(FEVER_COUGH, [ent("Fever"), ent("Cough")],
                                                  [chain("Surely influenza.", ()), chain("", ())])
    assert s.abstained and completion is None and backend.calls == []
    assert "will not guess" in text and "Fever, Cough" in text
    assert [c.status for c in s.dropped] == ["unsupported"]


def test_an_abstention_says_what_the_graph_held_and_why_no_claim_survived() -> None:
    synth, kg, _ = make(no_support="abstain")
    # asthma and the common cold have a cough (and sort first), influenza a fever and a cough
    evidence = facts(kg, "Asthma", "Common cold", "Influenza")
    s, text, _, _ = synth.synthesize(FEVER_COUGH, [ent("Fever"), ent("Cough")], [chain("Surely lethapsclerosis.",
                                                                                       evidence)])
    assert s.abstained and "will not guess" in text
    # the facts through the entity tied to most of the question's findings come first
    assert "Among the facts the reasoning saw: Influenza has symptom Cough; Influenza has symptom Fever" in text
    assert "No claim survived: the chains' answers named nothing the knowledge graph holds." in text


def test_no_evidence_under_the_flag_policy_gives_the_models_answer_flagged() -> None:
    synth, _, backend = make()  # no_support="flag", the default
    s, text, flags, completion = synth.synthesize(FEVER_COUGH, [ent("Fever"), ent("Cough")],
                                                  [chain("Surely flu.", ()), chain("", ())])
    assert not s.abstained and completion is None and backend.calls == []
    # the model's words are never given as the graph's answer: the answer says what the graph held and why no
    # claim survived; the model's own answer comes apart, under its label
    assert text.startswith("No claim of the knowledge graph supports an answer to this question. The knowledge graph "
                           "links the question to Fever, Cough.")
    assert "Influenza (no evidence path the chains saw contains it)" in text and "Surely" not in text
    assert flags == ("the answer is the model's own, not supported by the knowledge graph",)
    assert flags[0].code == "unsupported_text" and unsupported_text(flags) == "Surely Influenza."
    support, sentences = synth.review(s, text, flags)
    assert support.verdict == "unsupported" and all(c.supported for c in sentences)


def test_writer_sees_only_surviving_claims_and_its_extra_mentions_are_flagged() -> None:
    synth, kg, backend = make(["Influenza fits [1]. Sumatriptan could also help. Take 500 milligrams."])
    s, text, flags, _ = synth.synthesize(
        FEVER_COUGH, [ent("Fever"), ent("Cough")],
        [chain("Influenza.", facts(kg, "Influenza")), chain("Influenza.", facts(kg, "Influenza")),
         chain("Common cold, paracetamol.", facts(kg, "Common cold"))])
    prompt = backend.calls[0].prompts[0]
    assert "[1] Influenza has symptom" in prompt
    assert "Paracetamol" not in prompt and "Common cold" not in prompt
    # the wording names a drug no claim supports and recommends a dose of nothing: the claims are verbalised instead
    assert text.startswith("The knowledge graph points to Influenza. From the knowledge graph: Influenza has symptom")
    assert "Sumatriptan" not in text
    assert flags == ("the model's wording mentions Sumatriptan, which no surviving claim supports",
                     "it states a dose (500 mg) that no claim states",
                     "the model's wording recommends what no claim supports: 'Take 500 mg.'")
    assert [f.code for f in flags] == ["unsupported_entity", "unsupported_dose", "unsupported_recommendation"]
    support, sentences = synth.review(s, text, flags)
    assert support.verdict == "partial" and "replaced by the cited claims" in support.reason
    assert sentences and all(c.supported for c in sentences)


def test_a_contraindicated_drug_in_the_written_answer_gets_its_warning_in_the_text() -> None:
    question = "I have a stomach ulcer and the flu. What should I take?"
    entities = [ent("Peptic ulcer disease"), ent("Influenza")]
    chains = [chain("Take ibuprofen.", facts(FakeKG(), "Influenza")),
              chain("Oseltamivir is the drug.", facts(FakeKG(), "Influenza"))]
    synth, _, _ = make(["Ibuprofen will ease the flu [2]. Oseltamivir also helps [1]."])
    _, text, flags, _ = synth.synthesize(question, entities, chains)
    # naming it as if it were safe is a harmful instruction: the cited claims replace the wording, warning included
    assert "will ease" not in text and "Warning: Ibuprofen is contraindicated in Peptic ulcer disease." in text
    assert flags == ("it names Ibuprofen as if it were safe, but the knowledge graph contraindicates it in Peptic "
                     "ulcer disease",)
    assert flags[0].code == "harmful_instruction"
    # a writer that already states the warning is left as written, and nothing is flagged when it is not named
    synth, _, _ = make(["Ibuprofen is contraindicated in peptic ulcer disease; oseltamivir helps."])
    _, text, flags, _ = synth.synthesize(question, entities, chains)
    assert "Warning:" not in text and flags == ()
    synth, _, _ = make(["Oseltamivir helps [1]."])
    assert synth.synthesize(question, entities, chains)[1:3] == ("Oseltamivir helps [1].", ())


def test_sentences_that_name_no_claim_are_shown_apart() -> None:
    synth, kg, _ = make(["Influenza fits your fever [1]. It spreads in winter. What about Influenza? Please see a "
                         "doctor."])
    s, text, flags, _ = synth.synthesize(FEVER_COUGH, [ent("Fever")], [chain("Influenza.", facts(kg, "Influenza"))])
    assert text == "Influenza fits your fever [1]. Please see a doctor."
    assert unsupported_text(flags) == "It spreads in winter. What about Influenza?"
    assert [f.code for f in flags] == ["unsupported_text"]
    support, sentences = synth.review(s, text, flags)
    assert support.verdict == "partial" and [c.supported for c in sentences] == [True, True]


def test_empty_wording_falls_back_to_the_claims() -> None:
    synth, kg, _ = make(["<think>I was thinking and never fini"])
    s, text, flags, _ = synth.synthesize(FEVER_COUGH, [ent("Fever")], [chain("Influenza.", facts(kg, "Influenza"))])
    assert "From the knowledge graph: Influenza has symptom" in text
    assert "no usable answer" in flags[0]


def test_resolve_false_only_extracts() -> None:
    synth, kg, _ = make()
    s = synth.analyse(FEVER_COUGH, [ent("Fever"), ent("Cough")],
                      [chain("Influenza.", facts(kg, "Influenza")), chain("Common cold.", facts(kg, "Common cold"))],
                      resolve=False)
    assert s.conflicts == () and {c.entity.label for c in s.claims} == {"Influenza", "Common cold"}


def test_entity_kind_and_units() -> None:
    kg = FakeKG()
    vocab = vocabulary(kg)  # the fake's entities are untyped: the schema's roles and domain/range type them
    paths = facts(kg, "Influenza", "Asthma")
    assert entity_kind(ent("Influenza"), paths, vocab) == "disease"
    assert entity_kind(ent("Cough"), paths, vocab) == "finding"
    assert entity_kind(ent("Salbutamol"), paths, vocab) == "drug"
    assert entity_kind(ent("Nausea"), (), vocab) == "finding"  # from its edges in the KG, not the paths
    assert entity_kind(ent("Blood glucose test"), (), vocab) == "test"
    assert normalise_units("500 milligrams, 100 mcg, 5 ml, 2 grams, 10 IU, 3 micrograms") == \
        "500 mg, 100 µg, 5 mL, 2 g, 10 IU, 3 µg"
    assert normalise_units("5 mgs daily; version 2 ml.") == "5 mg daily; version 2 mL."


def test_wording_that_recommends_an_unsupported_treatment_falls_back_to_the_claims() -> None:
    # Bleach is not in the KG, so no linker finds it: the recommendation check does
    synth, kg, _ = make(["Drink bleach, it treats asthma [1]."])
    question = "I am wheezing. What is it and what should I take?"
    s, text, flags, _ = synth.synthesize(question, [ent("Wheezing")], [chain("Asthma; salbutamol.", facts(kg, "Asthma"))])
    assert "bleach" not in text.lower() and "Salbutamol" in text and "From the knowledge graph:" in text
    assert any("recommends what no claim supports: 'Drink bleach, it treats asthma [1].'" in f for f in flags)


def test_wording_that_drops_the_claims_asked_for_falls_back() -> None:
    synth, kg, _ = make(["Please rest and see a doctor."])
    question = "I am wheezing. What is it and what should I take?"
    _, text, flags, _ = synth.synthesize(question, [ent("Wheezing")], [chain("Asthma; salbutamol.", facts(kg, "Asthma"))])
    # the flag is said of the text shown: the cited claims, which name both
    assert flags[0] == "the model's wording left out Asthma, Salbutamol, so the answer gives the cited claims " \
                       "instead, which name it"
    assert "Salbutamol" in text and "Asthma" in text and "leaves out" not in " ".join(flags)


def test_intents_are_answered_from_the_kg_for_the_winning_diagnosis() -> None:
    # the chains name the diagnosis only; the question asks what to take and which tests
    synth, kg, _ = make()
    s = synth.analyse("I pass a lot of urine (polyuria). What should I take, and which tests do I need?",
                      [ent("Polyuria")], [chain("Diabetes mellitus.", facts(kg, "Diabetes mellitus"))])
    assert s.intents == ("tests", "treatment") and [d.label for d in s.diagnoses] == ["Diabetes mellitus"]
    kinds = {c.entity.label: c.kind for c in s.claims}
    assert kinds["Blood glucose test"] == "test"  # looked up by role, cited by its KG path
    test = next(c for c in s.claims if c.entity.label == "Blood glucose test")
    assert test.chains == () and test.text == "Diabetes mellitus needs the medical test Blood glucose test"
    assert s.gaps == ("The knowledge graph lists no medication for Diabetes mellitus.",)


def test_a_claim_needs_a_path_to_the_question_not_just_its_name_in_the_evidence() -> None:
    synth, kg, _ = make()
    # Migraine appears in the evidence (Migraine has symptom Nausea) but nothing ties it to a fever
    s = synth.analyse("I have a fever. What is it?", [ent("Fever")],
                      [chain("Influenza or migraine.", facts(kg, "Influenza") + facts(kg, "Migraine"))])
    assert [c.entity.label for c in s.claims] == ["Influenza"]
    [migraine] = s.dropped
    assert migraine.status == "unsupported" and "ties it to the question" in migraine.reason


def test_a_check_that_cannot_run_flags_the_answer() -> None:
    synth, kg, _ = make(["Oseltamivir helps [1]."])

    def broken(*args: object, **kwargs: object) -> object:
        raise StoreError("the endpoint http://kg.example/sparql timed out")

    kg.anchor = broken  # type: ignore[method-assign]
    question = "I have the flu. What should I take?"
    _, text, flags, _ = synth.synthesize(question, [ent("Influenza")],
                                         [chain("Oseltamivir.", facts(kg, "Influenza"))])
    assert any(f.startswith("the contraindication check could not run for Oseltamivir") and "timed out" in f
               for f in flags)
    # an answer whose check could not run is never called grounded
    support, _ = synth.review(synth.analyse(question, [ent("Influenza")],
                                            [chain("Oseltamivir.", facts(kg, "Influenza"))]), text, flags)
    assert support.verdict == "partial" and "could not run" in support.reason


def test_multiple_choice_always_gets_a_letter() -> None:
    question = "What treats the flu?\n\nOptions:\nA. Oseltamivir\nB. Salbutamol\n\nAnswer with the letter (A-B)."
    # the chains' vote
    synth, kg, backend = make(["Influenza is treated with oseltamivir [1]."])
    votes = [chain("Answer: A", facts(kg, "Influenza")), chain("Answer: A", facts(kg, "Influenza")),
             chain("Answer: B", facts(kg, "Influenza"))]
    s, text, flags, _ = synth.synthesize(question, [ent("Influenza")], votes)
    assert s.letter == "A" and text.startswith("Answer: A. Oseltamivir") and not s.abstained
    assert not [f for f in flags if "own pick" in f]  # the KG backs Oseltamivir for influenza
    # no chain picks and no KG evidence: the writer's own pick, flagged
    synth, _, _ = make(["I think B."])
    s, text, flags, _ = synth.synthesize(question, [ent("Influenza")], [chain("Not sure.", ())])
    assert text.startswith("Answer: B. Salbutamol") and any("writer's own pick" in f for f in flags)
    # nobody names a letter: the option closest to what the model wrote, flagged, never an abstention
    synth, _, _ = make(["No idea at all."])
    s, text, flags, _ = synth.synthesize(question, [ent("Influenza")], [chain("Maybe salbutamol?", ())])
    assert text.startswith("Answer: B.") and any("closest" in f for f in flags) and not s.abstained
