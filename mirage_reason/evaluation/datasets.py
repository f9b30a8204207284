"""Evaluation datasets behind one loader contract: every source becomes a list of :class:`Example`.

Names: ``genmedgpt5k`` (free text), ``genmedgpt5k-linked`` (the 248 rows with gold KG entities), ``explaincpe``
(Chinese multiple choice, test split by default) and ``jsonl`` (a user's own file, schema in docs/evaluation.md).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mirage_kg import InputError, compress, expand

__all__ = ["DATASETS", "LETTERS", "Example", "default_data_dir", "entity_curie", "load_dataset"]

LETTERS = "ABCDEFGHIJ"
Kind = Literal["free", "choice"]


@dataclass(frozen=True)
class Example:
    """One question with whatever gold it has: a reference answer, a gold option letter, gold KG entities (CURIEs)."""

    id: str
    question: str
    reference: str | None = None
    options: tuple[str, ...] = ()
    gold_letter: str | None = None
    gold_question_entities: tuple[str, ...] = ()
    gold_answer_entities: tuple[str, ...] = ()
    kind: Kind = "free"
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "reference": self.reference, "options": list(self.options),
                "gold_letter": self.gold_letter, "gold_question_entities": list(self.gold_question_entities),
                "gold_answer_entities": list(self.gold_answer_entities), "kind": self.kind}


def default_data_dir() -> Path:
    """``$MIRAGE_KG_DATA``, else ``../shared/data`` beside the repository (a source checkout), else an error."""
    env = os.environ.get("MIRAGE_KG_DATA")
    if env:
        return Path(env)
    repo_root = Path(__file__).resolve().parents[2]
    for candidate in (repo_root.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    raise InputError("no data folder: set MIRAGE_KG_DATA to the folder holding genmedgpt5k/ and explaincpe/, "
                     "or point --data at the dataset file")


def entity_curie(name_or_id: str) -> str:
    """A gold entity as a CURIE: a CURIE with a known prefix or an IRI is kept (compressed); anything else is an
    EMCKG-style name and becomes ``KG:<name>`` with spaces as ``_`` (the triple loader's entity namespace)."""
    text = name_or_id.strip()
    if text.startswith(("http://", "https://", "urn:", "<")):
        return compress(expand(text))
    prefix, sep, _ = text.partition(":")
    if sep and " " not in text:
        try:
            return compress(expand(text))
        except InputError:
            pass
    return "KG:" + "_".join(text.split())


def _entities(value: Any, where: str) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        items: Iterable[Any] = value.split(",")
    elif isinstance(value, list):
        items = value
    else:
        raise InputError(f"entities must be a list of strings or a comma-separated string, not {type(value).__name__}",
                         where)
    return tuple(dict.fromkeys(entity_curie(str(v)) for v in items if str(v).strip()))


def _resolve(data: str | Path | None, relative: tuple[str, ...], name: str) -> Path:
    """``data`` may be the file itself, or a folder holding it directly or under the dataset's own subfolder."""
    if data is None:
        base = default_data_dir()
        path = base.joinpath(*relative)
    else:
        given = Path(data)
        if given.is_dir():
            for candidate in (given / relative[-1], given.joinpath(*relative)):
                if candidate.is_file():
                    return candidate
            raise InputError(f"no {relative[-1]} in this folder (nor in {Path(*relative)} under it)", given)
        path = given
    if not path.is_file():
        raise InputError(f"dataset {name!r} not found; point --data at it or set MIRAGE_KG_DATA", path)
    return path


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", path, exc.lineno) from None


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"invalid JSON: {exc.msg}", path, number) from None
            if not isinstance(row, dict):
                raise InputError("each line must be a JSON object", path, number)
            rows.append((number, row))
    return rows


def _genmedgpt5k(data: str | Path | None) -> list[Example]:
    path = _resolve(data, ("genmedgpt5k", "genmedgpt5k.json"), "genmedgpt5k")
    rows = _read_json(path)
    if not isinstance(rows, list):
        raise InputError("expected a JSON list of {input, output} objects", path)
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not row.get("input"):
            raise InputError(f"row {i} has no 'input'", path)
        out.append(Example(id=f"genmedgpt5k-{i}", question=str(row["input"]).strip(),
                           reference=str(row.get("output") or "").strip() or None))
    return out


def _genmedgpt5k_linked(data: str | Path | None) -> list[Example]:
    path = _resolve(data, ("genmedgpt5k", "linked_248.jsonl"), "genmedgpt5k-linked")
    out = []
    for i, (number, row) in enumerate(_read_jsonl(path)):
        if not row.get("input"):
            raise InputError("row has no 'input'", path, number)
        where = f"{path}:{number}"
        out.append(Example(id=f"linked-{i}", question=str(row["input"]).strip(),
                           reference=str(row.get("output") or "").strip() or None,
                           gold_question_entities=_entities(row.get("input_KG"), where),
                           gold_answer_entities=_entities(row.get("output_KG"), where)))
    return out


def _options(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, dict):  # {"A": "...", "B": "..."}
        keys = sorted(value)
        if [k.upper() for k in keys] != list(LETTERS[: len(keys)]):
            raise InputError(f"option keys must be consecutive letters from A, not {keys}", where)
        return tuple(str(value[k]) for k in keys)
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        if len(value) > len(LETTERS):
            raise InputError(f"at most {len(LETTERS)} options, not {len(value)}", where)
        return tuple(str(v) for v in value)
    raise InputError("options must be a list of strings or an object keyed by letter", where)


def _gold_letter(answer: Any, options: tuple[str, ...], where: str) -> str:
    text = str(answer).strip()
    letters = LETTERS[: len(options)]
    if len(text) == 1 and text.upper() in letters:
        return text.upper()
    if text in options:  # the option's text itself
        return letters[options.index(text)]
    raise InputError(f"answer {text!r} is neither one of the letters {letters} nor an option's text", where)


def _explaincpe(data: str | Path | None) -> list[Example]:
    path = _resolve(data, ("explaincpe", "test.json"), "explaincpe")
    rows = _read_json(path)
    if not isinstance(rows, list):
        raise InputError("expected a JSON list of {question, options, answer} objects", path)
    split = path.stem
    out = []
    for i, row in enumerate(rows):
        where = f"{path} (row {i})"
        if not isinstance(row, dict) or not row.get("question") or "options" not in row or "answer" not in row:
            raise InputError("each row needs question, options and answer", where)
        options = _options(row["options"], where)
        out.append(Example(id=f"explaincpe-{split}-{row.get('id', i)}", question=str(row["question"]).strip(),
                           reference=str(row.get("explanation") or "").strip() or None, options=options,
                           gold_letter=_gold_letter(row["answer"], options, where), kind="choice"))
    return out


def _jsonl(data: str | Path | None) -> list[Example]:
    if data is None:
        raise InputError("the jsonl dataset needs --data FILE (one JSON object a line; see docs/evaluation.md)")
    path = Path(data)
    if not path.is_file():
        raise InputError("no such file", path)
    out: list[Example] = []
    seen: set[str] = set()
    for number, row in _read_jsonl(path):
        where = f"{path}:{number}"
        question = row.get("question")
        if not isinstance(question, str) or not question.strip():
            raise InputError("'question' (a non-empty string) is required", path, number)
        example_id = str(row["id"]) if row.get("id") is not None else f"line-{number}"
        if example_id in seen:
            raise InputError(f"duplicate id {example_id!r}", path, number)
        seen.add(example_id)
        options = _options(row["options"], where) if row.get("options") else ()
        reference = row.get("reference")
        gold_letter = None
        if options:
            if row.get("answer") is not None:
                gold_letter = _gold_letter(row["answer"], options, where)
        elif reference is None and row.get("answer") is not None:
            reference = row["answer"]  # a free-text question's "answer" is its reference
        out.append(Example(id=example_id, question=question.strip(),
                           reference=str(reference).strip() if reference is not None else None,
                           options=options, gold_letter=gold_letter,
                           gold_question_entities=_entities(row.get("question_entities"), where),
                           gold_answer_entities=_entities(row.get("answer_entities"), where),
                           kind="choice" if options else "free"))
    if not out:
        raise InputError("no questions in this file", path)
    return out


DATASETS: dict[str, Callable[[str | Path | None], list[Example]]] = {
    "genmedgpt5k": _genmedgpt5k,
    "genmedgpt5k-linked": _genmedgpt5k_linked,
    "explaincpe": _explaincpe,
    "jsonl": _jsonl,
}


def load_dataset(name: str, data: str | Path | None = None, limit: int | None = None, seed: int = 0) -> list[Example]:
    """The examples of dataset ``name`` (from ``data``, a file or folder, else the default data folder).

    ``limit`` keeps a random sample of that many examples, drawn with ``seed`` and kept in file order, so the same
    arguments always give the same questions and ids stay those of the full file."""
    key = name.strip().lower()
    if key not in DATASETS:
        raise InputError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
    examples = DATASETS[key](data)
    if limit is not None:
        if limit < 1:
            raise InputError(f"--limit must be at least 1, not {limit}")
        if limit < len(examples):
            keep = sorted(random.Random(seed).sample(range(len(examples)), limit))
            examples = [examples[i] for i in keep]
    return examples
