"""SPARQL text handled before a query reaches a store: its form (SELECT/ASK/CONSTRUCT/DESCRIBE), the read-only
guard (a real parse, never a keyword match), the shipped prefixes a user may leave undeclared, and bounded
property paths written the way an endpoint can evaluate them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from mirage_kg.errors import QueryError, UpdateRefusedError

if TYPE_CHECKING:
    from rdflib.plugins.sparql.parserutils import CompValue

# One token of the prologue and body that may contain '#' without it being a comment: an IRI or a string.
_NOT_COMMENT = re.compile(
    r"""<[^<>"{}|^`\\\s]*>|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|(#[^\n]*)""")
_PROLOGUE = re.compile(r"(?is)^\s*((PREFIX\s+[^\s:]*:\s*<[^>]*>|BASE\s+<[^>]*>)\s*)*")
_DECLARED = re.compile(r"(?i)\bPREFIX\s+([A-Za-z][\w.-]*|):")


def strip_comments(query: str) -> str:
    """``query`` with its comments blanked; a ``#`` inside an IRI (``<http://x.org/a#>``) or a string stays."""
    return _NOT_COMMENT.sub(lambda m: " " if m.group(1) else m.group(0), query)


def query_form(query: str) -> str:
    """SELECT, ASK, CONSTRUCT or DESCRIBE, read past the prologue (PREFIX/BASE lines and comments)."""
    text = _PROLOGUE.sub("", strip_comments(query))
    match = re.match(r"\s*(SELECT|ASK|CONSTRUCT|DESCRIBE)\b", text, re.IGNORECASE)
    return match.group(1).upper() if match else "SELECT"


def with_known_prefixes(query: str) -> str:
    """``query`` with a PREFIX line for each shipped prefix (``ontologies/prefixes.json``: MKG, HP, SNOMEDCT,
    rdfs, skos, ...) it uses without declaring, so ``SELECT ?d WHERE { ?d a MKG:Disease }`` works on any store."""
    from mirage_kg.model.namespaces import prefixes

    body = strip_comments(query)
    declared = {m.group(1) for m in _DECLARED.finditer(body)}
    used = set(re.findall(r"(?<![\w<:/#?$.-])([A-Za-z][\w-]*):(?=[\w%-])", _strip_iris_and_strings(body)))
    lines = [f"PREFIX {p}: <{iri}>" for p, iri in sorted(prefixes().items()) if p in used - declared]
    return "\n".join([*lines, query]) if lines else query


def _strip_iris_and_strings(text: str) -> str:
    return re.sub(r"""<[^<>"{}|^`\\\s]*>|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'""", " ", text)


def check_read_only(query: str, allow_service: "Iterable[str]" = ()) -> str:
    """The form of ``query`` if a SPARQL parser reads it as a query; ``UpdateRefusedError`` (a ``QueryError``) for
    an update, ``QueryError`` for anything that does not parse (so no update can pass as a query, whatever its spacing or variable names).

    A query is read-only for the host it runs on too: ``SERVICE`` (the engine would send requests to any URL the
    query names, a server-side request forgery through the read-only path) is refused unless its endpoint is one
    of ``allow_service`` (IRIs, exactly as written after the prefixes are expanded); so are ``FROM``/``FROM NAMED``
    of a ``file:`` IRI and calls of an engine's built-in SQL functions (Virtuoso's ``bif:``/``sql:``, which read
    files and URLs). The check walks rdflib's parse tree, so a comment or a string that spells ``SERVICE`` is
    neither refused nor a way round it."""
    try:
        from rdflib.plugins.sparql.parser import parseQuery, parseUpdate
    except ImportError as exc:  # rdflib is a core dependency; say so rather than skip the check
        raise QueryError("cannot check that the query is read-only: rdflib is not installed "
                         "(pip install rdflib)") from exc
    try:
        parsed = parseQuery(query)
    except Exception as exc:  # pyparsing's ParseException and rdflib's own errors
        try:
            parseUpdate(query)
        except Exception:
            raise QueryError(f"not a valid SPARQL query: {_first_line(exc)}") from None
        raise UpdateRefusedError("query sparql is read-only: this is a SPARQL update (INSERT/DELETE/LOAD/CLEAR/"
                                 "DROP/...), and updates are refused") from None
    check_no_outside_access(parsed, set(allow_service))
    name = type(parsed[1]).__name__ if len(parsed) > 1 else ""
    name = getattr(parsed[1], "name", name)
    for form in ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE"):
        if form.lower() in str(name).lower():
            return form
    raise QueryError(f"not a SPARQL query form this command runs: {name}")


#: function namespaces whose calls reach outside the store (Virtuoso's built-in SQL functions: files, HTTP, SQL)
_OUTSIDE_FUNCTIONS = ("http://www.openlinksw.com/schemas/bif#", "http://www.openlinksw.com/schemas/sql#", "bif:", "sql:")


def check_no_outside_access(parsed: Any, allow_service: set[str]) -> None:
    """Refuse what in a parsed query reaches beyond the store (see ``check_read_only``), one line saying why."""
    from rdflib.plugins.sparql.algebra import translatePrologue
    from rdflib.plugins.sparql.parserutils import CompValue

    prologue = None

    def iri(term: Any) -> str | None:
        """The IRI a parsed term names (prefixes and BASE applied); None for a variable."""
        nonlocal prologue
        if isinstance(term, CompValue) and term.name == "pname":
            if term.get("prefix") in ("bif", "sql"):
                return f"{term.get('prefix')}:{term.get('localname') or ''}"  # Virtuoso declares these itself
            if prologue is None:
                prologue = translatePrologue(parsed[0], None)
            try:
                return str(prologue.absolutize(term))
            except Exception:  # an undeclared prefix: the engine could only read it as its own
                return f"{term.get('prefix')}:{term.get('localname') or ''}"
        if type(term).__name__ == "Variable":
            return None
        return str(term)

    for kind, term in _outside_nodes(parsed, CompValue):
        if kind == "SERVICE":
            endpoint = iri(term)
            if endpoint is None:
                raise UpdateRefusedError("SERVICE with a variable endpoint is refused: federated queries could send "
                                         "requests to any host (name the endpoint, and allow it with "
                                         "--allow-service)")
            if endpoint not in allow_service:
                raise UpdateRefusedError(f"SERVICE <{endpoint}> is refused: a federated query makes this server "
                                         "send requests to another host or read local files; allow an endpoint "
                                         "explicitly with --allow-service URL")
        elif kind == "FROM":
            graph = iri(term) or ""
            if graph.lower().startswith("file:"):
                raise UpdateRefusedError(f"FROM <{graph}> is refused: a dataset of local files is not read")
        elif kind == "FUNCTION":
            name = iri(term) or ""
            if name.startswith(_OUTSIDE_FUNCTIONS):
                raise UpdateRefusedError(f"{name} is refused: the engine's built-in SQL functions read files and "
                                         "URLs outside the graph")


def _outside_nodes(parsed: Any, comp_value: type[CompValue]) -> Iterator[tuple[str, Any]]:
    """(SERVICE | FROM | FUNCTION, the term it names) for each such node of rdflib's parse tree."""
    stack: list[Any] = [parsed]
    while stack:
        node = stack.pop()
        if isinstance(node, comp_value):
            if node.name == "ServiceGraphPattern":
                yield "SERVICE", node.get("term")
            elif node.name == "DatasetClause":
                yield "FROM", node["default"] if "default" in node else node.get("named")
            elif node.name == "Function":
                yield "FUNCTION", node.get("iri")
            stack.extend(node.values())
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)) or type(node).__name__ == "ParseResults":
            stack.extend(node)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def bounded_path_ask(subject: str, step: str, max_hops: int, obj: str, *, nested: bool = True) -> str:
    """An ASK for "a walk of 1..``max_hops`` ``step``s joins ``subject`` and ``obj``" (both already written as
    SPARQL terms). ``nested`` writes it as one property path, ``S/(S/(S)?)?``, which shares the prefix work; an
    engine that mis-evaluates nested optional paths (Virtuoso 7 answers false) gets a UNION of fixed-length
    sequences instead. Never ``*`` or ``+``: those are unbounded."""
    if nested:
        expr = step
        for _ in range(max_hops - 1):
            expr = f"{step}/({expr})?"
        return f"ASK {{ {subject} {expr} {obj} }}"
    branches = [f"{{ {subject} {'/'.join([step] * n)} {obj} }}" for n in range(1, max_hops + 1)]
    return f"ASK {{ {' UNION '.join(branches)} }}"
