"""Triple files: ``head<TAB>relation<TAB>tail``, one fact a line, names with ``_`` for spaces (the EMCKG layout).

Comments: a line whose first character is ``#`` and that holds no tab is a comment. A ``#`` line with tabs is
either a commented-out header (``#head<TAB>relation<TAB>tail``: skipped) or ambiguous (a commented-out fact, or a
fact whose head starts with ``#``): a row problem, so it is refused (or skipped and counted with ``--lenient``),
never dropped unreported. Column names (``head relation tail``) are no fact anywhere in the file: the first row's
are refused or skipped as a header, and a header row further down (two files joined) is a row problem too.

Each name becomes an IRI in the user's namespace with its readable label and ``MKG:Concept`` type; each relation a
declared property with a label. Repeated facts collapse (RDF is a set)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from mirage_kg.errors import InputError
from mirage_kg.loaders.base import (
    Loader,
    LoadOptions,
    LoadReport,
    Problem,
    checked_lang,
    default_graph_name,
    literal_nt,
    read_lines,
)
from mirage_kg.loaders.rows.hygiene import looks_like_header
from mirage_kg.loaders.nt_terms import CONCEPT, LABEL, OBJECT_PROPERTY, PREF, RELATION, TYPE
from mirage_kg.model.namespaces import mint
from mirage_kg.progress import progress_bar
from mirage_kg.store.base import LoadReceipt, Store
from mirage_kg.model.terms import iri_ref


# Column names a triple file's first row may carry (a header is not a fact).
HEADER_WORDS = frozenset({"head", "relation", "tail", "subject", "predicate", "object", "source", "target",
                          "relationship", "rel", "s", "p", "o", "h", "r", "t", "from", "to", "edge", "type",
                          "entity1", "entity2", "head_entity", "tail_entity", "x", "y"})


_DECLARING = frozenset({TYPE, PREF, LABEL})  # the predicates of an entity's or a relation's declaration


@dataclass
class RowTally:
    """Rows and facts seen so far (the "no facts" check of a whole file)."""

    rows: int = 0
    facts: int = 0


def _advancing(rows: Iterator[tuple[int, str]], advance: Callable[[int], None]) -> Iterator[tuple[int, str]]:
    """The rows, telling the progress bar how many bytes went by every 65,536 lines."""
    done = 0
    for number, text in rows:
        done += len(text) + 1
        if number % 65536 == 0:
            advance(done)
            done = 0
        yield number, text
    advance(done)


def readable(name: str) -> str:
    """``Panic_disorder`` -> ``Panic disorder``; a quoted, escaped name (``"Devil\\\\'S_Claw"``) is unquoted."""
    if len(name) > 1 and name[0] == name[-1] == '"':
        name = name[1:-1].replace("\\\\", "\\").replace("\\'", "'")
    return " ".join(name.replace("_", " ").split())


class TriplesLoader(Loader):
    name = "triples"
    description = "head<TAB>relation<TAB>tail triple files (EMCKG layout)"

    @classmethod
    def can_load(cls, path: Path, head: bytes) -> bool:
        if path.is_dir() or path.suffix.lower() not in (".tsv", ".txt", ".triples", ".tab", ""):
            return False
        lines = head.split(b"\n")
        first = next((line for line in lines if line.strip() and not (line.startswith(b"#") and b"\t" not in line)),
                     lines[0])  # past the comment lines
        return first.count(b"\t") == 2

    def lines(self, path: Path, options: LoadOptions, report: LoadReport,
              advance: Callable[[float], None] | None = None) -> Iterator[str]:
        """N-Triples lines for the file, declaring each entity and relation once."""
        problem = Problem(options, report)
        rows: Iterator[tuple[int, str]] = read_lines(path, problem)
        if advance is not None:
            rows = _advancing(rows, advance)
        tally = RowTally()
        yield from self.row_triples(rows, path, options, problem, tally)
        if not tally.facts:
            what = "the file is empty" if not tally.rows else f"none of its {tally.rows:,} rows is a fact"
            raise InputError(f"no facts to load: {what}", path)

    def row_triples(self, rows: Iterable[tuple[int, str]], path: Path, options: LoadOptions,
                    problem: Problem, tally: RowTally | None = None, *, first_rows: bool = True) -> Iterator[str]:
        """N-Triples text for numbered rows, one chunk a fact with the declarations of every entity and relation
        it names first (so a graph is the union of its rows' triples, which ``load --update`` relies on to apply
        changed rows only). ``first_rows``: the rows start the file (its first row may be a header)."""
        tally = tally if tally is not None else RowTally()
        entities: dict[str, str] = {}
        relations: dict[str, str] = {}
        lang = checked_lang(options.lang)
        for number, text in rows:
            if not text.strip() or (text.startswith("#") and "\t" not in text):
                continue  # a comment (see the module's docstring)
            parts = text.split("\t")
            if text.startswith("#"):
                if self.is_header(text):
                    continue  # a commented-out header
                problem("comment or fact?", path, number,
                        f"{text!r} starts with # like a comment but has tab-separated fields like a row; a comment "
                        "line holds no tab: remove the tabs (a comment) or the # (a fact), or load with --lenient "
                        "to skip it")
                continue
            tally.rows += 1
            if self.is_header(text):
                where = "the first row" if first_rows and tally.rows == 1 else f"row {number}"
                problem("header row", path, number, f"{where} {text!r} is column names, not a fact; "
                        "delete it (or load with --lenient to skip it)")
                continue
            if len(parts) != 3:
                problem("wrong column count", path, number,
                        f"expected 3 tab-separated fields (head, relation, tail), found {len(parts)}")
                continue
            head, rel, tail = (p.strip() for p in parts)
            if not head or not rel or not tail:
                problem("empty field", path, number, "head, relation and tail must all be non-empty")
                continue
            out = []
            ids = []
            for name in (head, tail):
                iri = entities.get(name)
                if iri is None:
                    iri = iri_ref(mint(options.namespace, name))
                    entities[name] = iri
                    out.append(f"{iri} {TYPE} {CONCEPT} .\n{iri} {PREF} {literal_nt(readable(name), lang)} .\n")
                ids.append(iri)
            prop = relations.get(rel)
            if prop is None:
                prop = iri_ref(mint(options.relation_namespace, rel))
                relations[rel] = prop
                out.append(f"{prop} {TYPE} {RELATION} .\n{prop} {TYPE} {OBJECT_PROPERTY} .\n"
                           f"{prop} {LABEL} {literal_nt(readable(rel))} .\n")
            out.append(f"{ids[0]} {prop} {ids[1]} .\n")
            tally.facts += 1
            yield "".join(out)

    @staticmethod
    def is_header(text: str) -> bool:
        """Whether a first row is column names (skipped or refused, never a fact)."""
        return looks_like_header(text.split("\t"), HEADER_WORDS)

    @staticmethod
    def row_names(raw: bytes) -> list[bytes]:
        """The names a raw row's triples can have as subject (head, tail, relation), as ``mint`` keys them (two
        names with one key are one IRI), UTF-8 encoded. Cheap: ``load --update`` asks it of every unchanged row."""
        if raw.isascii():  # bytes.strip strips what str.strip strips only for ASCII
            return [part.strip().replace(b" ", b"_") for part in raw.split(b"\t")]
        return [part.strip().replace(" ", "_").encode("utf-8")
                for part in raw.decode("utf-8", "replace").split("\t")]

    @staticmethod
    def _keys(iri: str, options: LoadOptions) -> tuple[bytes, ...]:
        """The row names (as ``row_names`` gives them) that mint ``iri`` in this load's namespaces."""
        return tuple(unquote(iri[len(ns):]).encode("utf-8") for ns in {options.namespace, options.relation_namespace}
                     if iri.startswith(ns))

    def triple_keys(self, line: str, options: LoadOptions) -> list[bytes | tuple[bytes, bytes, bytes]]:
        """What a row must name to make the N-Triples ``line``: a name for a declaration (an entity's type and
        label, a relation's), ``(head, relation, tail)`` for a fact; names as ``row_names`` gives them."""
        subject, predicate, rest = line.split(" ", 2)
        names = self._keys(subject[1:-1], options)
        keys: list[bytes | tuple[bytes, bytes, bytes]] = list(names) if predicate in _DECLARING else []
        if rest.startswith("<"):
            for head in names:
                for rel in self._keys(predicate[1:-1], options):
                    keys.extend((head, rel, tail) for tail in self._keys(rest[1:rest.index(">")], options))
        return keys

    def rows_naming(self, rows: Iterable[tuple[int, bytes]], keys: set[bytes | tuple[bytes, bytes, bytes]],
                    plain: bool = False) -> Iterator[tuple[int, bytes]]:
        """The raw rows that name one of ``keys`` (read at each row: the caller shrinks the set). The scan of
        every unchanged row of an update, so one tight loop; ``plain``: the file is ASCII without spaces or
        carriage returns, so a row's fields are its names as they stand (and a whole row is its fact's key)."""
        if plain:
            facts = {b"\t".join(key) for key in keys if isinstance(key, tuple)}
            for number, raw in rows:
                line = raw[:-1]
                if not keys.isdisjoint(line.split(b"\t")) or line in facts:
                    parts = line.split(b"\t")
                    if len(parts) == 3 and (not keys.isdisjoint(parts) or tuple(parts) in keys):
                        yield number, raw
            return
        names = self.row_names
        for number, raw in rows:
            line = raw.rstrip(b"\r\n")
            parts = line.split(b"\t") if b" " not in line and line.isascii() else names(line)
            if len(parts) == 3:
                head, rel, tail = parts
                if head in keys or tail in keys or rel in keys or (head, rel, tail) in keys:
                    yield number, raw

    def load(self, store: Store, path: Path, options: LoadOptions, report: LoadReport) -> list[LoadReceipt]:
        graph = options.graph or default_graph_name(path, "triples")
        with progress_bar(f"loading {path.name}", total=path.stat().st_size, unit="bytes") as advance:
            receipt = store.load(self.lines(path, options, report, advance), media_type="application/n-triples",
                                 graph=graph, source=str(path))
        return [receipt]
