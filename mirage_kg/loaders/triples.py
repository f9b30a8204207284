"""Triple files: ``head<TAB>relation<TAB>tail``, one fact a line, names with ``_`` for spaces (the EMCKG layout).

Each name becomes an IRI in the user's namespace with its readable label and ``MKG:Concept`` type; each relation a
declared property with a label. Repeated facts collapse (RDF is a set)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
from mirage_kg.loaders.hygiene import looks_like_header
from mirage_kg.loaders.nt_terms import CONCEPT, LABEL, OBJECT_PROPERTY, PREF, RELATION, TYPE
from mirage_kg.namespaces import mint
from mirage_kg.progress import progress_bar
from mirage_kg.store.base import LoadReceipt, Store
from mirage_kg.terms import iri_ref


# Column names a triple file's first row may carry (a header is not a fact).
HEADER_WORDS = frozenset({"head", "relation", "tail", "subject", "predicate", "object", "source", "target",
                          "relationship", "rel", "s", "p", "o", "h", "r", "t", "from", "to", "edge", "type",
                          "entity1", "entity2", "head_entity", "tail_entity", "x", "y"})


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
        first = head.split(b"\n", 1)[0]
        return first.count(b"\t") == 2

    def lines(self, path: Path, options: LoadOptions, report: LoadReport,
              advance: "callable | None" = None) -> Iterator[str]:  # type: ignore[valid-type]
        """N-Triples lines for the file, declaring each entity and relation once."""
        problem = Problem(options, report)
        entities: dict[str, str] = {}
        relations: dict[str, str] = {}
        lang = checked_lang(options.lang)
        done = 0
        facts = rows = 0
        for number, text in read_lines(path, problem):
            if advance is not None:
                done += len(text) + 1
                if number % 65536 == 0:
                    advance(done)
                    done = 0
            if not text.strip() or text.startswith("#"):
                continue
            parts = text.split("\t")
            rows += 1
            if rows == 1 and looks_like_header(parts, HEADER_WORDS):
                problem("header row", path, number, f"the first row {text!r} is column names, not a fact; "
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
            facts += 1
            yield "".join(out)
        if advance is not None:
            advance(done)
        if not facts:
            what = "the file is empty" if not rows else f"none of its {rows:,} rows is a fact"
            raise InputError(f"no facts to load: {what}", path)

    def load(self, store: Store, path: Path, options: LoadOptions, report: LoadReport) -> list[LoadReceipt]:
        graph = options.graph or default_graph_name(path, "triples")
        with progress_bar(f"loading {path.name}", total=path.stat().st_size, unit="bytes") as advance:
            receipt = store.load(self.lines(path, options, report, advance), media_type="application/n-triples",
                                 graph=graph, source=str(path))
        return [receipt]
