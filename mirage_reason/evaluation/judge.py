"""Optional pairwise LLM judge: for every example and every pair of pipelines, a model says which answer is
better. Verdicts are cached in ``judgements.jsonl`` beside the results, so a resumed run asks nothing twice.

Answer order is swapped for half of the pairs (by a hash, so it is reproducible) to cancel position bias.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path as FsPath
from typing import Any

from mirage_reason.backends.base import Backend, GenerationParams
from mirage_reason.evaluation.datasets import Example
from mirage_reason.evaluation.runner import ResultStore

__all__ = ["JUDGE_FILE", "PairwiseJudge", "parse_verdict", "summarise_verdicts"]

JUDGE_FILE = "judgements.jsonl"

_SYSTEM = ("You are an experienced physician grading answers to a patient's medical question. Judge which answer "
           "is more accurate, more helpful and better supported; length alone is no merit.")
_VERDICT = re.compile(r"\b(tie|1|2)\b", re.IGNORECASE)


def parse_verdict(text: str) -> str | None:
    """"1", "2" or "tie" from the judge's reply (the first one it states), else None."""
    match = _VERDICT.search(text.replace("Answer 1", "1").replace("Answer 2", "2"))
    return match.group(1).lower() if match else None


def _swap(seed: int, example_id: str, a: str, b: str) -> bool:
    return hashlib.sha256(f"{seed}|{example_id}|{a}|{b}".encode()).digest()[0] % 2 == 1


class PairwiseJudge:
    """Asks ``backend`` (any OpenAI-compatible endpoint, or a scripted one in tests) to compare two answers."""

    def __init__(self, backend: Backend, model: str, *, seed: int = 0, batch_size: int = 16) -> None:
        self.backend = backend
        self.model = model
        self.seed = seed
        self.batch_size = batch_size

    def prompt(self, example: Example, first: str, second: str) -> str:
        parts = [f"Question:\n{example.question}"]
        if example.options:
            parts.append("Options:\n" + "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(example.options)))
        if example.reference:
            parts.append(f"A reference answer (for your information):\n{example.reference}")
        parts += [f"Answer 1:\n{first}", f"Answer 2:\n{second}",
                  "Which answer is better? Reply with exactly one of: 1, 2, tie."]
        return self.backend.format_chat([{"role": "system", "content": _SYSTEM},
                                         {"role": "user", "content": "\n\n".join(parts)}])

    def judge(self, examples: Sequence[Example], records: Sequence[Mapping[str, Any]], pipelines: Sequence[str],
              output_dir: FsPath, fingerprint: str) -> list[dict[str, Any]]:
        """Every verdict for this run: cached ones and new ones, in a stable order."""
        store = ResultStore(output_dir / JUDGE_FILE)
        cached = {r["key"]: r for r in store.records()}
        answers = {(r["pipeline"], r["example_id"]): r["answer"] for r in records}
        todo: list[tuple[str, Example, str, str, bool]] = []
        verdicts: list[dict[str, Any]] = []
        for example in examples:
            for a, b in itertools.combinations(pipelines, 2):
                if (a, example.id) not in answers or (b, example.id) not in answers:
                    continue
                key = f"{a}\t{b}\t{example.id}\t{fingerprint}\t{self.model}"
                if key in cached:
                    verdicts.append(cached[key])
                else:
                    todo.append((key, example, a, b, _swap(self.seed, example.id, a, b)))
        params = GenerationParams(max_new_tokens=8, temperature=0.0, top_p=1.0, top_k=0, repetition_penalty=1.0)
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start:start + self.batch_size]
            prompts = []
            for _, example, a, b, swapped in chunk:
                first, second = answers[(b if swapped else a, example.id)], answers[(a if swapped else b, example.id)]
                prompts.append(self.prompt(example, first, second))
            completions = self.backend.generate(prompts, (), params)
            new = []
            for (key, example, a, b, swapped), completion in zip(chunk, completions):
                raw = parse_verdict(completion.text)
                winner = None if raw is None else "tie" if raw == "tie" else (
                    (b if raw == "1" else a) if swapped else (a if raw == "1" else b))
                new.append({"key": key, "a": a, "b": b, "example_id": example.id, "winner": winner,
                            "swapped": swapped, "reply": completion.text[:200]})
            store.append(new)
            verdicts.extend(new)
        order = {(e.id): i for i, e in enumerate(examples)}
        return sorted(verdicts, key=lambda v: (order.get(v["example_id"], 0), v["a"], v["b"]))


def summarise_verdicts(verdicts: Sequence[Mapping[str, Any]], pipelines: Sequence[str], model: str) -> dict[str, Any]:
    """Win/tie/loss rates per pipeline, each pair's record, and the mean rank (1 = best) per example by wins."""
    stats = {p: {"wins": 0, "ties": 0, "losses": 0} for p in pipelines}
    pairs: dict[str, dict[str, int]] = {}
    per_example: dict[str, dict[str, float]] = {}
    unparsed = 0
    for v in verdicts:
        a, b, winner = v["a"], v["b"], v["winner"]
        pair = pairs.setdefault(f"{a} vs {b}", {"win": 0, "tie": 0, "lose": 0})
        score = per_example.setdefault(v["example_id"], {})
        score.setdefault(a, 0.0)
        score.setdefault(b, 0.0)
        if winner is None:
            unparsed += 1
            continue
        if winner == "tie":
            stats[a]["ties"] += 1
            stats[b]["ties"] += 1
            pair["tie"] += 1
            score[a] += 0.5
            score[b] += 0.5
        else:
            loser = b if winner == a else a
            stats[winner]["wins"] += 1
            stats[loser]["losses"] += 1
            pair["win" if winner == a else "lose"] += 1
            score[winner] += 1
    ranks: dict[str, list[float]] = {p: [] for p in pipelines}
    for scores in per_example.values():
        ordered = sorted(scores.values(), reverse=True)
        for name, value in scores.items():
            better = sum(1 for s in ordered if s > value)
            equal = sum(1 for s in ordered if s == value)
            ranks[name].append(better + (equal + 1) / 2)  # ties share the mean of their ranks
    out: dict[str, Any] = {"model": model, "comparisons": len(verdicts), "unparsed": unparsed, "pipelines": {},
                           "pairs": pairs}
    for name in pipelines:
        s = stats[name]
        n = s["wins"] + s["ties"] + s["losses"]
        out["pipelines"][name] = {**s, "win_rate": s["wins"] / n if n else None,
                                  "mean_rank": sum(ranks[name]) / len(ranks[name]) if ranks[name] else None}
    return json.loads(json.dumps(out))
