"""The words the pipeline says to the model: chain instructions, the search-block tags, the decomposer, the
synthesizer, the no-synthesizer merge and the LLM-only baseline. All wording lives here so it can be read and tuned
in one place; nothing here decides anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mirage_kg import Path

__all__ = [
    "ABSTAIN_TEXT",
    "QUERY_BEGIN",
    "QUERY_END",
    "RESULT_BEGIN",
    "RESULT_END",
    "abstain_text",
    "budget_spent_note",
    "last_search_note",
    "chain_messages",
    "decomposer_messages",
    "structured_chain_messages",
    "structured_decomposer_messages",
    "fact_lines",
    "llm_only_messages",
    "merge_messages",
    "result_block",
    "synthesizer_messages",
]

# The reference code's search block. Plain-text tags, not special tokens, so that stop strings fire on them.
QUERY_BEGIN = "<|KG_QUERY_BEGIN|>"
QUERY_END = "<|KG_QUERY_END|>"
RESULT_BEGIN = "<|KG_RESULT_BEGIN|>"
RESULT_END = "<|KG_RESULT_END|>"

Messages = list[dict[str, str]]

_CHAIN_SYSTEM = """\
You are a careful medical assistant who reasons step by step and checks facts in a medical knowledge graph.
To look facts up, write a search block and stop:
- {begin}entity name{end} lists the facts around one entity (its symptoms, tests, drugs, related diseases);
- {begin}first entity||second entity{end} shows how two entities are connected.
The facts then appear between {rbegin} and {rend}. You may search at most {n_r} times.
Rely on the facts from the knowledge graph; when they are not enough, say so instead of guessing.
Finish with a short final answer (two or three sentences) to the question."""


def chain_messages(
    sub_question: str, question: str, facts: Sequence[str], n_r: int, *, search: bool = True
) -> Messages:
    """The opening of one reasoning chain: instructions, the seed facts, the (sub-)question."""
    system = _CHAIN_SYSTEM.format(begin=QUERY_BEGIN, end=QUERY_END, rbegin=RESULT_BEGIN, rend=RESULT_END, n_r=n_r)
    if not search or n_r == 0:
        system = ("You are a careful medical assistant. Rely on the facts from the medical knowledge graph given "
                  "below; when they are not enough, say so instead of guessing. Finish with a short final answer "
                  "(two or three sentences).")
    parts = []
    if facts:
        parts.append("Facts from the knowledge graph:\n" + "\n".join(f"- {fact}" for fact in facts))
    if sub_question.strip() != question.strip():
        parts.append(f"This is part of a larger question: {question}")
    parts.append(f"Question: {sub_question}")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


_STRUCTURED_CHAIN_SYSTEM = """\
You are a careful medical assistant who checks facts in a medical knowledge graph before answering.
Each turn, reply with one JSON action:
- {{"action": "anchor", "entity": "E"}} lists the facts around entity E (its symptoms, tests, drugs, diseases);
- {{"action": "bridge", "entity": "A", "other": "B"}} shows how entities A and B are connected;
- {{"action": "answer", "answer": "..."}} ends with your short answer (two or three sentences).
The facts of a search appear after it. You may search at most {n_r} times. Rely on the facts from the knowledge
graph; when they are not enough, say so instead of guessing."""


def structured_chain_messages(sub_question: str, question: str, facts: Sequence[str], n_r: int,
                              entities: Sequence[str]) -> Messages:
    """The opening of a chain whose every turn is a JSON action the engine constrains (anchor, bridge, answer)."""
    parts = []
    if facts:
        parts.append("Facts from the knowledge graph:\n" + "\n".join(f"- {fact}" for fact in facts))
    if entities:
        parts.append("Entities you can search: " + ", ".join(entities[:12]) + (", ..." if len(entities) > 12 else ""))
    if sub_question.strip() != question.strip():
        parts.append(f"This is part of a larger question: {question}")
    parts.append(f"Question: {sub_question}")
    return [{"role": "system", "content": _STRUCTURED_CHAIN_SYSTEM.format(n_r=n_r)},
            {"role": "user", "content": "\n\n".join(parts)}]


def fact_lines(paths: Sequence[Path]) -> list[str]:
    """The facts as prompt lines, one-step facts that share their entity and relation on one line ("Influenza has
    symptom Fever, Cough and Fatigue"): the retriever's evidence is mostly a few hubs' neighbours, and this says it
    in a third of the tokens. Longer paths keep a line each. Lines come in the order of their first fact."""
    groups: dict[tuple[str, str, str], list[Path]] = {}
    order: list[tuple[str, str, str] | int] = []
    for i, path in enumerate(paths):
        if len(path.steps) != 1:
            order.append(i)
            continue
        step = path.steps[0]
        key = (step.start.iri, step.relation.iri, step.direction)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(path)
    lines = []
    for item in order:
        if isinstance(item, int):
            lines.append(paths[item].text)
            continue
        steps = [p.steps[0] for p in groups[item]]
        ends = [s.end.label for s in steps]
        joined = ends[0] if len(ends) == 1 else ", ".join(ends[:-1]) + " and " + ends[-1]
        first = steps[0]
        if first.direction == "forward":
            lines.append(first.relation.verbalise(first.start.label, joined, "forward"))
        else:
            lines.append(first.relation.verbalise(joined, first.start.label, "backward"))
    return lines


def result_block(lines: Sequence[str], note: str | None = None) -> str:
    """The text inserted after a search block; a note (no match, budget spent, ...) goes first."""
    body = ([note] if note else []) + list(lines)
    return f"\n\n{RESULT_BEGIN}\n" + "\n".join(body) + f"\n{RESULT_END}\n\n"


def budget_spent_note(n_r: int) -> str:
    return f"The search budget of {n_r} searches is spent: no more searches. Answer now from the facts you have."


def last_search_note(n_r: int) -> str:
    return f"(That was your last search of {n_r}. Answer from the facts you have.)"


_DECOMPOSER_SYSTEM = ("You split medical questions into simple sub-questions. Each sub-question is about one medical "
                      "entity of the question, names that entity explicitly (never 'it' or 'this condition') and can "
                      "be answered on its own.")


def decomposer_messages(question: str, entity_labels: Sequence[str], n_q: int) -> Messages:
    entities = ", ".join(entity_labels)
    user = (f"Question: {question}\n"
            f"Medical entities in it: {entities}\n\n"
            f"Write at most {n_q} sub-questions, one per line, numbered 1., 2., ... and nothing else.\n"
            "Sub-questions:")
    return [{"role": "system", "content": _DECOMPOSER_SYSTEM}, {"role": "user", "content": user}]


def structured_decomposer_messages(question: str, entity_labels: Sequence[str], n_q: int) -> Messages:
    """The decomposer's prompt when the engine constrains its reply to a JSON list of (entity, question) items."""
    entities = ", ".join(entity_labels)
    user = (f"Question: {question}\n"
            f"Medical entities in it: {entities}\n\n"
            f"Reply in JSON: {{\"sub_questions\": [{{\"entity\": one of the entities, \"question\": a short "
            f"sub-question about it}}, ...]}} with at most {n_q} items, one per entity.")
    return [{"role": "system", "content": _DECOMPOSER_SYSTEM}, {"role": "user", "content": user}]


def synthesizer_messages(question: str, facts: Sequence[str], warnings: Sequence[str] = (), *,
                         options: Sequence[str] = (), gaps: Sequence[str] = (),
                         structured: tuple[bool, bool, Sequence[tuple[int, str]]] = (False, False, ())) -> Messages:
    """The final wording step: the model may use the numbered facts and nothing else. With ``options`` (a
    multiple-choice question), it starts with the letter it picks. ``structured`` (sentences, letter, lead): the
    engine holds the reply to JSON, cited sentences (the first on each (fact, entity) of ``lead``) and/or the letter
    (``wording.wording_constraint``)."""
    numbered = "\n".join(f"[{i}] {fact}" for i, fact in enumerate(facts, start=1))
    system = ("You write short, clear answers for patients. Use ONLY the numbered facts you are given, cite them "
              "by number like [1], and never add a diagnosis, drug or test that is not in the facts. Remind the "
              "reader to see a doctor.")
    user = f"Question: {question}\n\n"
    if options and "Options:" not in question:
        user += "Options:\n" + "\n".join(options) + "\n\n"
    user += f"Facts:\n{numbered}\n" if facts else "Facts: (the knowledge graph has none for this question)\n"
    if gaps:
        user += "\nNot in the knowledge graph (say so):\n" + "\n".join(f"- {g}" for g in gaps) + "\n"
    if warnings:
        user += "\nWarnings (mention them):\n" + "\n".join(f"- {w}" for w in warnings) + "\n"
    sentences, letter, lead = structured
    if sentences or letter:
        fields = (['"choice": the letter of the one correct option'] if letter else []) + (
            ['"lead": [' + ", ".join(f'{{"cite": {n}, "text": "... {label} ..."}}' for n, label in lead) + "]"]
            if lead else []) + (
            [f'"sentences": [{{"cite": n, "text": "..."}}] (at most {3 - len(lead)} more)'] if sentences else [])
        user += ("\nReply in JSON: {" + ", ".join(fields) + "}. Each text is one short sentence for the patient, in "
                 "the words of its fact [n], naming what the fact is about." if sentences else
                 "\nReply in JSON: {" + ", ".join(fields) + "}.")
    elif options:
        user += "\nStart with 'Answer: X' (the letter of the one correct option), then explain in a few sentences."
    else:
        user += "\nWrite the answer in one or two paragraphs."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def merge_messages(question: str, answers: Sequence[tuple[str, str]]) -> Messages:
    """Without the synthesizer: one prompt that combines the chains' answers (the reference code's way)."""
    parts = [f"Sub-question {i}: {sub}\nAnswer {i}: {ans or '(no answer)'}"
             for i, (sub, ans) in enumerate(answers, start=1)]
    user = (f"Question: {question}\n\nAnswers to its sub-questions:\n\n" + "\n\n".join(parts)
            + "\n\nCombine them into one final answer to the question, in one or two paragraphs.")
    return [{"role": "system", "content": "You are a careful medical assistant."}, {"role": "user", "content": user}]


def llm_only_messages(question: str) -> Messages:
    return [{"role": "system", "content": "You are a careful medical assistant."},
            {"role": "user", "content": f"{question}\n\nAnswer in one or two paragraphs."}]


ABSTAIN_TEXT = ("The knowledge graph holds nothing that supports an answer to this question, so I will not guess. "
                "Please ask a doctor.")


def abstain_text(known_labels: Sequence[str]) -> str:
    if not known_labels:
        return ("I could not match this question to anything in the knowledge graph, so I will not guess. "
                "Please ask a doctor.")
    return (f"The knowledge graph knows {', '.join(known_labels)}, but none of its facts supports an answer to this "
            "question, so I will not guess. Please ask a doctor.")
