"""HPO disease annotations (``phenotype.hpoa``): disease -> HPO term edges with their provenance.

Each row is one positive edge (``OMIM:619340 MKG:has_phenotype HP:0011097``; the aspect column picks the relation)
plus one annotation node that reifies it (``rdf:subject``/``rdf:predicate``/``rdf:object``) and carries the row's
evidence code, frequency, onset, sex, modifiers and references. Plain reification, not RDF-star, so every store
and N-Triples reader keeps it. ``NOT`` rows get the annotation node (``MKG:negated true``) and no edge."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

from mirage_kg.errors import InputError
from mirage_kg.loaders.base import Loader, LoadOptions, LoadReport, Problem, literal_nt, read_lines
from mirage_kg.loaders.rows.hygiene import UTF8_BOM, open_input
from mirage_kg.loaders.nt_terms import ALT, CONCEPT, PREF, SOURCE_VERSION, TYPE
from mirage_kg.loaders.obo import checked_lang
from mirage_kg.model.namespaces import ENTITY, GRAPH, MKG, RDF, mint, prefixes
from mirage_kg.progress import progress_bar
from mirage_kg.store.base import LoadReceipt, Store
from mirage_kg.model.terms import iri_ref

COLUMNS = ("database_id", "disease_name", "qualifier", "hpo_id", "reference", "evidence", "onset", "frequency",
           "sex", "modifier", "aspect", "biocuration")

# aspect -> relation (P phenotypic abnormality, I inheritance, C clinical course/onset, M modifier, H history)
ASPECT_RELATIONS = {
    "P": MKG + "has_phenotype",
    "I": MKG + "has_mode_of_inheritance",
    "C": MKG + "has_clinical_course",
    "M": MKG + "has_clinical_modifier",
    "H": MKG + "has_past_medical_history",
}
DISEASE_PREFIXES = ("OMIM", "ORPHA", "DECIPHER")
ANNOTATION_NS = ENTITY + "annotation/hpoa/"

_DISEASE = iri_ref(MKG + "Disease")
_SUBJECT = iri_ref(RDF + "subject")
_PREDICATE = iri_ref(RDF + "predicate")
_OBJECT = iri_ref(RDF + "object")
_EVIDENCE = iri_ref(MKG + "evidence")
_FREQUENCY = iri_ref(MKG + "frequency")
_ONSET = iri_ref(MKG + "onset")
_SEX = iri_ref(MKG + "sex")
_MODIFIER = iri_ref(MKG + "modifier")
_REFERENCE = iri_ref(MKG + "reference")
_NEGATED = iri_ref(MKG + "negated")
_TRUE = '"true"^^<http://www.w3.org/2001/XMLSchema#boolean>'
_HP_ID = re.compile(r"HP:\d{7}")
#: the frequency column: an HPO frequency term, n/m patients (n <= m, m > 0) or a percentage of at most 100
_FREQUENCY_FORM = re.compile(r"(HP:\d{7})|(\d+)/(\d+)|(\d+(?:\.\d+)?)%")
_HP_COLUMN = re.compile(rb"\t(HP:\d{7})\t")
_DISEASE_ID = re.compile(r"(OMIM|ORPHA|DECIPHER):[A-Za-z0-9._-]+")


def _normalise_header(text: str) -> tuple[str, ...]:
    """Both header styles: ``database_id...`` (2021 on) and ``#DatabaseID...`` (before)."""
    names = text.lstrip("#").split("\t")
    return tuple(re.sub(r"(?<=[a-z])(?=[A-Z])", "_", n).lower() for n in names)


def hpoa_metadata(path: Path) -> dict[str, str]:
    """The ``#key: value`` lines at the top (version, date, ...)."""
    meta: dict[str, str] = {}
    with open_input(path) as handle:
        for raw in handle:
            raw = raw.removeprefix(UTF8_BOM)
            if not raw.startswith(b"#") or b"\t" in raw:
                break
            key, _, value = raw.decode("utf-8", "replace").lstrip("#").partition(":")
            meta[key.strip().lower()] = value.strip()
    return meta


def hpoa_graph_name(path: Path) -> str:
    meta = hpoa_metadata(path)
    version = meta.get("version") or meta.get("date") or path.stem
    return mint(GRAPH + "hpoa/", version)


class HpoaLoader(Loader):
    name = "hpoa"
    description = "HPO disease annotations (phenotype.hpoa)"

    @classmethod
    def can_load(cls, path: Path, head: bytes) -> bool:
        if path.is_dir():
            return False
        return path.suffix.lower() == ".hpoa" or b"database_id\tdisease_name\tqualifier\thpo_id" in head

    def lines(self, path: Path, options: LoadOptions, report: LoadReport, graph: str,
              advance: Callable[[float], None], known_terms: set[str] | None = None) -> Iterator[str]:
        """N-Triples for the file. ``known_terms`` (HP IRIs), when given, makes an unknown HPO id a row problem.

        Kept whole: one pass over the rows, in which the header check, a row's checks and its triples share the
        per-disease state; moving a row's checks or its triples into a function would add a call passing a dozen
        fields to every row."""
        problem = Problem(options, report)
        lang = checked_lang(options.lang)
        meta = hpoa_metadata(path)
        version = meta.get("version") or meta.get("date") or path.stem
        hp_ns = prefixes()["HP"]
        pmap = prefixes()
        annotation_ns = ANNOTATION_NS + mint("", version) + "/"
        relations = {aspect: iri_ref(iri) for aspect, iri in ASPECT_RELATIONS.items()}
        diseases: dict[str, str] = {}  # disease id -> its first name
        other_names: set[tuple[str, str]] = set()
        yield f"{iri_ref(graph)} {SOURCE_VERSION} {literal_nt(version)} .\n"
        header_seen = False
        done = 0
        number = 0
        for number, text in read_lines(path, problem):
            done += len(text) + 1
            if number % 16384 == 0:
                advance(done)
                done = 0
            if not header_seen:
                if text.startswith("#") and "\t" not in text:
                    continue
                header_seen = True
                if _normalise_header(text) == COLUMNS:
                    continue
                problem("unexpected header", path, number,
                        f"expected the columns {' '.join(COLUMNS)}, found {' '.join(text.lstrip('#').split(chr(9)))}")
                if not _DISEASE_ID.match(text):
                    continue  # lenient: skip the odd header; a data line instead falls through and loads
            if not text:
                problem("empty line", path, number, "every line after the header is one annotation")
                continue
            fields = text.split("\t")
            if len(fields) != 12:
                problem("wrong column count", path, number, f"expected 12 tab-separated columns, found {len(fields)}")
                continue
            db_id, name, qualifier, hpo_id, reference, evidence, onset, frequency, sex, modifier, aspect, _ = fields
            if not _DISEASE_ID.fullmatch(db_id):
                problem("bad disease id", path, number,
                        f"{db_id!r} is not an OMIM:, ORPHA: or DECIPHER: id")
                continue
            if not _HP_ID.fullmatch(hpo_id):
                problem("bad HPO id", path, number, f"{hpo_id!r} is not an HP:nnnnnnn id")
                continue
            if frequency and (why := _bad_frequency(frequency)):
                problem("bad frequency", path, number, why)
                continue
            relation = relations.get(aspect)
            if relation is None:
                problem("bad aspect", path, number, f"{aspect!r} is not one of {', '.join(ASPECT_RELATIONS)}")
                continue
            if qualifier not in ("", "NOT"):
                problem("bad qualifier", path, number, f"{qualifier!r} is neither empty nor NOT")
                continue
            target = f"<{hp_ns}{hpo_id[3:]}>"
            if known_terms is not None and target not in known_terms:
                problem("unknown id", path, number, f"{hpo_id} is not a current term of the HPO in this store")
                continue
            prefix, _, local = db_id.partition(":")
            disease = iri_ref(pmap[prefix] + local)
            out = []
            first = diseases.get(db_id)
            if first is None:
                diseases[db_id] = name
                out.append(f"{disease} {TYPE} {CONCEPT} .\n{disease} {TYPE} {_DISEASE} .\n")
                if name:
                    out.append(f"{disease} {PREF} {literal_nt(name, lang)} .\n")
            elif name and name != first and (db_id, name) not in other_names:
                other_names.add((db_id, name))
                out.append(f"{disease} {ALT} {literal_nt(name, lang)} .\n")
            if qualifier != "NOT":
                out.append(f"{disease} {relation} {target} .\n")
            node = f"<{annotation_ns}{number}>"
            out.append(f"{node} {_SUBJECT} {disease} .\n{node} {_PREDICATE} {relation} .\n{node} {_OBJECT} {target} .\n")
            if evidence:
                out.append(f"{node} {_EVIDENCE} {literal_nt(evidence)} .\n")
            if frequency:
                out.append(f"{node} {_FREQUENCY} {literal_nt(frequency)} .\n")
            if onset:
                out.append(f"{node} {_ONSET} {literal_nt(onset)} .\n")
            if sex:
                out.append(f"{node} {_SEX} {literal_nt(sex.lower())} .\n")
            for value in modifier.split(";") if modifier else ():
                out.append(f"{node} {_MODIFIER} {literal_nt(value.strip())} .\n")
            for value in reference.split(";") if reference else ():
                out.append(f"{node} {_REFERENCE} {literal_nt(value.strip())} .\n")
            if qualifier == "NOT":
                out.append(f"{node} {_NEGATED} {_TRUE} .\n")
            yield "".join(out)
        advance(done)
        if not header_seen:
            problem("no header row", path, number or None, f"expected the columns {' '.join(COLUMNS)}")
        if not diseases:
            raise InputError("no annotations to load: the file holds no well-formed annotation row", path)

    @staticmethod
    def known_hpo_terms(store: Store, path: Path) -> set[str] | None:
        """The HP terms of this file that the store holds as concepts; None when it holds none (no HPO loaded)."""
        ids: set[str] = set()
        with open_input(path) as handle:
            for raw in handle:
                match = _HP_COLUMN.search(raw)
                if match:
                    ids.add(match.group(1).decode())
        hp_ns = prefixes()["HP"]
        iris = sorted(f"<{hp_ns}{i[3:]}>" for i in ids)
        known: set[str] = set()
        for start in range(0, len(iris), 2000):
            values = " ".join(iris[start:start + 2000])
            rows = store.select(f"SELECT DISTINCT ?s WHERE {{ VALUES ?s {{ {values} }} ?s {TYPE} {CONCEPT} }}")
            known.update(f"<{r['s'].value}>" for r in rows)
        return known or None

    def load(self, store: Store, path: Path, options: LoadOptions, report: LoadReport) -> list[LoadReceipt]:
        if not path.exists():
            raise InputError("no such file", path)
        graph = options.graph or hpoa_graph_name(path)
        known = self.known_hpo_terms(store, path) if options.extra.get("check_ids", True) else None
        with progress_bar(f"loading {path.name}", total=path.stat().st_size, unit="bytes") as advance:
            receipt = store.load(self.lines(path, options, report, graph, advance, known),
                                 media_type="application/n-triples", graph=graph, source=str(path))
        return [receipt]


def _bad_frequency(value: str) -> str | None:
    """Why a frequency column is impossible (``9/7``, ``3/0``, ``120%``, free text), or None when it is fine."""
    m = _FREQUENCY_FORM.fullmatch(value)
    if m is None:
        return f"frequency {value!r} is neither an HP term, n/m nor a percentage"
    if m.group(2) is not None and not 0 <= int(m.group(2)) <= int(m.group(3)) > 0:
        return f"frequency {value!r}: n/m needs 0 <= n <= m and m > 0 (n of m patients)"
    if m.group(4) is not None and float(m.group(4)) > 100:
        return f"frequency {value!r} is over 100%"
    return None
