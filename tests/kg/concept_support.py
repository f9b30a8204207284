"""A small default KG in the real formats whose concepts have every section a concept page shows: an OBO slice of
HPO with definitions, synonyms, cross-references and a parent of 60 children (to page), the HPOA rows of
tests/fixtures/default_kg (frequencies and references), and a MONDO JSON that merges Marfan syndrome across
sources by label. Built into an on-disk store folder, so ``mirage-kg serve --store`` can open it."""

from __future__ import annotations

import json
from pathlib import Path

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "default_kg"
#: the parent whose children are paged, and how many it has
MANY_CHILDREN_PARENT = "HP:0000924"
MANY_CHILDREN = 60

_RICH = {
    "HP:0001166": ('def: "Abnormally long and slender fingers (spider fingers)." [HPO:probinson]',
                   'synonym: "Long slender fingers" EXACT []', "xref: UMLS:C0003706", "xref: SNOMEDCT_US:62250003"),
    "HP:0001083": ('def: "Dislocation or malposition of the crystalline lens of the eye." [HPO:probinson]',
                   "xref: UMLS:C0013581"),
}


def obo_text() -> str:
    """hp-mini.obo with definitions and xrefs on two terms, and ``MANY_CHILDREN`` synthetic children of
    "Abnormality of the skeletal system" (every one also a parent of nothing)."""
    lines: list[str] = []
    current = None
    for line in (FIX / "hp-mini.obo").read_text(encoding="utf-8").splitlines():
        lines.append(line)
        if line.startswith("id: "):
            current = line[4:].strip()
        elif line.startswith("name: ") and current in _RICH:
            lines.extend(_RICH[current])
    lines += ["", "[Term]", f"id: {MANY_CHILDREN_PARENT}", "name: Abnormality of the skeletal system",
              'def: "An abnormality of the skeletal system." [HPO:probinson]', "is_a: HP:0000118 ! Phenotypic abnormality"]
    for i in range(1, MANY_CHILDREN + 1):
        lines += ["", "[Term]", f"id: HP:99{i:05d}", f"name: Synthetic skeletal finding {i:02d}",
                  f"is_a: {MANY_CHILDREN_PARENT} ! Abnormality of the skeletal system"]
    return "\n".join(lines) + "\n"


def build_concept_store(folder: Path) -> Path:
    """The store folder ``folder / "kg"``, built once (HPO slice, HPOA rows, MONDO, label matches)."""
    import zstandard

    from mirage_kg.loaders.base import LoadOptions, LoadReport
    from mirage_kg.build.default_kg import BuildStep, build_label_matches, mondo_lines
    from mirage_kg.loaders.hpoa import HpoaLoader
    from mirage_kg.loaders.obo import OboLoader
    from mirage_kg.model.namespaces import GRAPH
    from mirage_kg.store import OxigraphStore, ensure_schema

    path = folder / "kg"
    obo = folder / "hp-rich.obo"
    obo.write_text(obo_text(), encoding="utf-8")
    mondo = folder / "MONDO-ontology-v2099-01-01.json.zst"
    terms = json.loads((FIX / "mondo-mini.json").read_text(encoding="utf-8"))
    terms["MONDO:0007947"]["description"] = ("A disorder of the fibrous connective tissue, with skeletal, ocular "
                                             "and cardiovascular features.")
    mondo.write_bytes(zstandard.ZstdCompressor().compress(json.dumps(terms).encode()))
    store = OxigraphStore(path)
    try:
        ensure_schema(store)
        OboLoader().load(store, obo, LoadOptions(), LoadReport())
        hpoa_graph = GRAPH + "hpoa/2099-01-16"
        HpoaLoader().load(store, FIX / "mini.hpoa", LoadOptions(graph=hpoa_graph), LoadReport())
        mondo_graph = GRAPH + "obo/mondo/2099-01-01"
        store.load(mondo_lines(mondo, mondo_graph, LoadOptions(), lambda n: None),
                   media_type="application/n-triples", graph=mondo_graph, source=str(mondo))
        build_label_matches(store, [BuildStep("hpoa", hpoa_graph, "loaded"), BuildStep("mondo", mondo_graph, "loaded")])
    finally:
        store.close()
    return path
