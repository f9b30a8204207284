"""The loader contract: each source format is one module with a ``Loader`` that says whether it can read a path
(pronto's ``can_parse`` idea) and streams N-Triples lines into the store, all or nothing.

Dirty rows are an ``InputError`` naming file, line and problem; with ``lenient`` they are skipped and every skip is
counted by reason in a ``LoadReport`` (nothing is skipped silently)."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Any, ClassVar, cast

from mirage_kg.errors import InputError
from mirage_kg.loaders.rows.hygiene import read_lines  # noqa: F401  (the loaders' shared line reader)
from mirage_kg.model.namespaces import ENTITY, GRAPH, MKG
from mirage_kg.store.base import LoadReceipt, Store
from mirage_kg.model.terms import escape_string


@dataclass
class LoadOptions:
    """What the user asked of a load. Format-specific options (``--sab``, ``--lang``...) live in ``extra``."""

    graph: str | None = None
    namespace: str = ENTITY
    relation_namespace: str = MKG
    lang: str = "en"
    lenient: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadReport:
    """Rows a lenient load skipped, by reason, with the first examples of each."""

    max_examples: int = 5
    skipped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: things that loaded but not as the user may expect (a header-only language refset), one line each
    warnings: list[str] = field(default_factory=list)

    def warn(self, message: str, path: str | Path | None = None) -> None:
        self.warnings.append(f"{path}: {message}" if path is not None else message)

    def skip(self, reason: str, path: str | Path | None, line: int | None, detail: str = "") -> None:
        self.skipped[reason] += 1
        bucket = self.examples.setdefault(reason, [])
        if len(bucket) < self.max_examples:
            bucket.append({"file": str(path), "line": line, "detail": detail})

    @property
    def total(self) -> int:
        return sum(self.skipped.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "skipped": self.total,
            "warnings": list(self.warnings),
            "reasons": [
                {"reason": r, "count": n, "examples": self.examples.get(r, [])} for r, n in self.skipped.most_common()
            ],
        }

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2), encoding="utf-8")


class Problem:
    """Raise or record a row problem, depending on leniency."""

    def __init__(self, options: LoadOptions, report: LoadReport) -> None:
        self.lenient = options.lenient
        self.report = report

    def __call__(self, reason: str, path: str | Path | None, line: int | None, detail: str = "") -> None:
        if not self.lenient:
            raise InputError(f"{reason}{': ' + detail if detail else ''}", path, line)
        self.report.skip(reason, path, line, detail)


def row_line(fields: Sequence[str]) -> int:
    """The line number a row reader carries as the row's last item (UMLS' ``rrf_rows``, SNOMED CT's rows): the
    rows stay ``list[str]`` for the hot loops, so the one int among them is read back here."""
    return cast(int, fields[-1])


class RowsNeedWholeRelease(Exception):
    """A changed row that a row difference cannot stand for (an N-Triples blank node: its label belongs to its
    file); ``load --update`` compares the whole release instead."""


class Loader:
    """Base class: subclasses set ``name`` and implement ``can_load`` and ``load``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    @classmethod
    def can_load(cls, path: Path, head: bytes) -> bool:
        return False

    def load(self, store: Store, path: Path, options: LoadOptions, report: LoadReport) -> list[LoadReceipt]:
        raise NotImplementedError


def default_graph_name(path: Path, kind: str) -> str:
    """One named graph per source: ``GRAPH:<kind>/<file or folder name>``."""
    from mirage_kg.model.namespaces import mint

    return mint(GRAPH + kind + "/", path.name)


def checked_lang(lang: str | None) -> str | None:
    """``--lang`` as the language tag of the labels a loader writes (``en``, ``pt-BR``); empty for none."""
    if not lang:
        return None
    if not re.fullmatch(r"[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*", lang):
        raise InputError(f"--lang {lang!r} is not a language tag (such as en or pt-BR) for the labels of this source")
    return lang


def literal_nt(value: str, lang: str | None = None) -> str:
    body = f'"{escape_string(value)}"'
    return f"{body}@{lang}" if lang else body
