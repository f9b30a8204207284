"""A user's own checks (``validate --check FILE.rq``): a SPARQL SELECT whose every row is one problem.

The check id is the file name without ``.rq``; the level is error unless a comment line says otherwise
(``# level: warning``). Rows name the problem through ``?id`` (else the first variable), ``?label`` and
``?detail`` (else the remaining variables, ``name=value``), as ROBOT's report queries do."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mirage_kg.errors import InputError
from mirage_kg.model.namespaces import compress
from mirage_kg.store.base import Store, query_form
from mirage_kg.model.terms import Term
from mirage_kg.validation.report import LEVELS, Example, Finding, Level

_LEVEL_LINE = re.compile(r"^\s*#\s*level\s*:\s*(\w+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class CustomCheck:
    """A SPARQL SELECT with an id and a level."""

    id: str
    query: str
    level: Level = "error"
    path: str | None = None


def read_check(path: str | Path) -> CustomCheck:
    """The check in ``path``; an ``InputError`` naming the file when it is not a SELECT or does not parse."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the check: {exc}", path) from exc
    level: Level = "error"
    match = _LEVEL_LINE.search(text)
    if match:
        named = match.group(1).lower()
        found = next((known for known in LEVELS if known == named), None)
        if found is None:
            raise InputError(f"unknown level {named!r} in '# level:' (use {', '.join(LEVELS)})", path)
        level = found
    if query_form(text) != "SELECT":
        raise InputError(f"a check must be a SELECT query, not {query_form(text)}", path)
    _syntax_check(text, path)
    check_id = path.name.removesuffix(".rq").removesuffix(".sparql")
    return CustomCheck(id=check_id, query=text, level=level, path=str(path))


def _syntax_check(text: str, path: Path) -> None:
    """Parse (and run on an empty dataset) with Oxigraph, so a typo is a usage error before the store is opened."""
    import pyoxigraph as ox

    try:
        solutions = ox.Store().query(text)
        if isinstance(solutions, ox.QuerySolutions):  # (a SELECT: read_check asked)
            list(solutions)
    except SyntaxError as exc:
        raise InputError(f"invalid SPARQL: {exc}", path) from exc


def _show(term: Term) -> str:
    return compress(term.value) if term.kind == "uri" else term.value


def run_check(store: Store, check: CustomCheck, *, max_examples: int = 5) -> Finding:
    """Run one check; the finding counts every row and keeps the first ``max_examples``."""
    rows = store.select(check.query)
    examples = []
    for row in rows[:max_examples]:
        names = list(row)
        id_var = "id" if "id" in row else (names[0] if names else None)
        label = row["label"].value if "label" in row else ""
        if "detail" in row:
            detail = row["detail"].value
        else:
            detail = ", ".join(f"{k}={_show(v)}" for k, v in row.items() if k not in (id_var, "label"))
        ident = row[id_var] if id_var else None
        examples.append(Example(id=_show(ident) if ident is not None else "", label=label, detail=detail,
                                iri=ident.value if ident is not None and ident.kind == "uri" and not label else None))
    return Finding(check.id, check.level, len(rows), tuple(examples))
