"""OBO (pronto) and OWL (owlready2) ontologies on the synthetic tests/fixtures/obo/mini.obo and owl/mini.owl, and
the xref mapping to conventional CURIE prefixes they share."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_loaders_contract import FIXTURES, load, objects, triples

from mirage_kg.errors import InputError
from mirage_kg.loaders.obo import term_iri, xref_target
from mirage_kg.model.namespaces import expand
from mirage_kg.store import OxigraphStore

OBO = FIXTURES / "obo" / "mini.obo"
OWL = FIXTURES / "owl" / "mini.owl"
TST = "http://purl.obolibrary.org/obo/TST_"


def loaded(fmt: str, path: Path, **options: object) -> set[tuple[str, str, str]]:
    store = OxigraphStore()
    load(store, fmt, path, **options)  # type: ignore[arg-type]
    return triples(store)


@pytest.mark.parametrize(("xref", "curie"), [
    ("UMLS:C0015967", "UMLS:C0015967"),
    ("UMLS_CUI:C0015967", "UMLS:C0015967"),
    ("SNOMEDCT_US:386661006", "SNOMEDCT:386661006"),
    ("SNOMEDCT_US_2023_03_01:386661006", "SNOMEDCT:386661006"),
    ("SCTID:386661006", "SNOMEDCT:386661006"),
    ("SNOMED_CT:386661006", "SNOMEDCT:386661006"),
    ("MSH:D005334", "MESH:D005334"),
    ("MESH:D005334", "MESH:D005334"),
    ("ICD10CM:R50.9", "ICD10CM:R50.9"),
    ("OMIM:100100", "OMIM:100100"),
    ("MIM:100100", "OMIM:100100"),
    ("Orphanet:558", "ORPHA:558"),
    ("ORPHANET:558", "ORPHA:558"),
    ("ORPHA:558", "ORPHA:558"),
    ("MONDO:0005015", "MONDO:0005015"),
    ("HP:0001945", "HP:0001945"),
    ("NCIT:C3038", "NCIT:C3038"),
    ("DOID:9352", "DOID:9352"),
])
def test_xref_prefix_variants_map_to_the_conventional_prefix(xref: str, curie: str) -> None:
    assert xref_target(xref) == expand(curie)


@pytest.mark.parametrize("xref", ["OMIMPS:PS100100", "ICD10:E11", "ICD-10:E11", "UMLS:12345", "FOO:1", "MEDDRA:1",
                                  "no-colon", "UMLS:"])
def test_other_xrefs_map_to_nothing(xref: str) -> None:
    assert xref_target(xref) is None


def test_term_iris() -> None:
    assert term_iri("HP:0001945", "urn:x/") == expand("HP:0001945")
    assert term_iri("TST:0000001", "urn:x/") == TST + "0000001"  # unknown prefix: an OBO PURL
    assert term_iri("https://example.org/a", "urn:x/") == "https://example.org/a"
    assert term_iri("part_of", "urn:x/") == "urn:x/part_of"


def test_obo_terms_labels_hierarchy_and_relations() -> None:
    found = loaded("obo", OBO)
    term = TST + "0000002"
    assert objects(found, term, "skos:prefLabel") == {'"abnormal heart rhythm"@en'}
    assert objects(found, term, "skos:altLabel") == {'"arrhythmia"@en', '"irregular pulse"@en'}
    assert objects(found, term, "skos:definition") == {'"An irregular "beat" of the heart."@en'}
    assert objects(found, term, "rdfs:subClassOf") == {TST + "0000001"}
    # part_of names BFO:0000050 through its Typedef xref; located_in has no xref and is minted
    assert objects(found, term, "BFO:0000050") == {TST + "0000004"}
    assert objects(found, "BFO:0000050", "rdfs:label") == {'"part of"'}
    assert objects(found, TST + "0000005", "MKG:located_in") == {TST + "0000004"}
    assert objects(found, "MKG:located_in", "rdf:type") == {"MKG:Relation", "owl:ObjectProperty"}
    assert objects(found, TST + "0000005", "skos:altLabel") == {'"tachycardia"@en'}


def test_obo_xrefs_exact_when_qualified_close_otherwise() -> None:
    found = loaded("obo", OBO)
    term = TST + "0000002"
    # MONDO:equivalentTo qualifier, and the header's treat-xrefs-as-equivalent: DOID
    assert objects(found, term, "skos:exactMatch") == {"MONDO:0000222", "DOID:123"}
    assert objects(found, term, "skos:closeMatch") == {
        "UMLS:C0000011", "UMLS:C0000012", "SNOMEDCT:1000000201", "MESH:D000011", "ICD10CM:I49.9", "OMIM:100001",
        "ORPHA:1234"}
    assert objects(found, term, "oboInOwl:hasDbXref") == {'"FOO:42"', '"OMIMPS:PS100001"'}  # kept, not lost


def test_obo_obsolete_terms_left_out_or_marked() -> None:
    found = loaded("obo", OBO)
    assert not {t for t in found if t[0] == TST + "0000003" or t[2] == TST + "0000003"}
    assert objects(found, TST + "0000004", "rdfs:subClassOf") == set()  # its only parent is obsolete
    kept = loaded("obo", OBO, keep_inactive=True)
    assert objects(kept, TST + "0000003", "MKG:active") == {'"false"'}
    assert objects(kept, TST + "0000004", "rdfs:subClassOf") == {TST + "0000003"}


def test_obo_graph_and_version() -> None:
    store = OxigraphStore()
    receipts, _ = load(store, "obo", OBO)
    assert receipts[0].graph.endswith("/obo/tst/2099-01-31")
    assert objects(triples(store), "GRAPH:obo/tst/2099-01-31", "MKG:sourceVersion") == {'"tst/releases/2099-01-31"'}


def test_obo_lenient_drops_a_dangling_reference_and_loads_the_rest(tmp_path: Path) -> None:
    copy = tmp_path / "mini.obo"
    shutil.copy(OBO, copy)
    copy.write_text(copy.read_text(encoding="utf-8").replace("is_a: TST:0000002\n", "is_a: TST:0000404\n"),
                    encoding="utf-8")
    store = OxigraphStore()
    _, report = load(store, "obo", copy, lenient=True)
    assert report.skipped["unknown id"] == 1
    found = triples(store)
    assert objects(found, TST + "0000005", "skos:prefLabel") == {'"fast heart rate"@en'}
    assert objects(found, TST + "0000005", "rdfs:subClassOf") == set()


def test_owl_classes_restrictions_and_xrefs() -> None:
    found = loaded("owl", OWL)
    term = "MONDO:9000002"
    assert objects(found, term, "skos:prefLabel") == {'"synthetic sugar disorder"@en'}
    assert objects(found, term, "skos:altLabel") == {'"sugar sickness"@en', '"sweet disorder"@en'}
    assert objects(found, term, "skos:definition") == {'"A made-up disorder of sugar."@en'}
    assert objects(found, term, "rdfs:subClassOf") == {"MONDO:9000001"}  # the deprecated parent is left out
    assert objects(found, term, "BFO:0000050") == {"MONDO:9000004"}  # an existential restriction
    # an axiom annotation source "MONDO:equivalentTo" makes the OMIM xref exact; a skos:exactMatch stays exact
    assert objects(found, term, "skos:exactMatch") == {"OMIM:100021", "UMLS:C0000022"}
    assert objects(found, term, "skos:closeMatch") == {"UMLS:C0000021", "MESH:D000021"}
    assert not {t for t in found if t[0] == "MONDO:9000003"}  # deprecated
    assert objects(found, "MONDO:9000001", "skos:prefLabel") == {'"synthetic disease"@en'}


def test_owl_graph_name_from_the_version_iri() -> None:
    receipts, _ = load(OxigraphStore(), "owl", OWL)
    assert receipts[0].graph.endswith("/obo/tst/2099-02-28")


def test_owl_broken_xml_is_an_input_error_naming_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.owl"
    broken.write_text(OWL.read_text(encoding="utf-8").replace("</owl:Class>", "</owl:Clas>", 1), encoding="utf-8")
    store = OxigraphStore()
    before = len(store.raw)
    with pytest.raises(InputError) as caught:
        load(store, "owl", broken)
    assert caught.value.path == str(broken)
    assert len(store.raw) == before


def test_owl_bad_utf8_names_the_line_and_lenient_repairs_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.owl"
    data = OWL.read_bytes().replace(b"synthetic organ", b"synthetic \xffrgan")
    bad.write_bytes(data)
    line = data[: data.index(b"\xff")].count(b"\n") + 1
    with pytest.raises(InputError, match="invalid UTF-8") as caught:
        load(OxigraphStore(), "owl", bad)
    assert caught.value.line == line
    store = OxigraphStore()
    _, report = load(store, "owl", bad, lenient=True)
    assert report.skipped["invalid UTF-8"] == 1
    assert objects(triples(store), "MONDO:9000004", "skos:prefLabel") == {'"synthetic \ufffdrgan"@en'}
