"""The concept record behind the web app's concept page, from ``mirage_kg`` (``Graph.concept`` and its pages) and
over HTTP (``/v1/concept`` and its pages), on a small default KG in the real formats (tests/kg/concept_support.py):
definitions, synonyms, cross-references, parents, paged children, HPOA annotations with frequencies and references,
one fact count that the fact pages add up to, and what the sources lack said plainly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="the [serve] extra is not installed: pip install 'mirage-kg[serve]'")
pytest.importorskip("zstandard", reason="the [sources] extra is not installed: pip install 'mirage-kg[sources]'")

from fastapi.testclient import TestClient  # noqa: E402

from mirage_kg import KnowledgeGraph, demo_store, open_store  # noqa: E402
from mirage_reason.service import create_app  # noqa: E402

from tests.kg.concept_support import MANY_CHILDREN, MANY_CHILDREN_PARENT, build_concept_store  # noqa: E402


@pytest.fixture(scope="module")
def kg(tmp_path_factory: pytest.TempPathFactory) -> KnowledgeGraph:
    return KnowledgeGraph(open_store(str(build_concept_store(tmp_path_factory.mktemp("concepts")))),
                          embedding_model="none")


@pytest.fixture(scope="module")
def client(kg: KnowledgeGraph) -> Iterator[TestClient]:
    with TestClient(create_app(kg)) as test_client:
        yield test_client


def test_a_merged_disease_has_its_definition_xrefs_and_annotations(kg: KnowledgeGraph, client: TestClient) -> None:
    record = client.get("/v1/concept", params={"id": "Marfan syndrome", "limit": 5}).json()
    assert record == kg.concept("MONDO:0007947", limit=5).to_json()  # the HTTP record is mirage_kg's
    assert record["entity"] == {"id": "MONDO:0007947", "label": "Marfan syndrome"}
    assert {e["id"] for e in record["same_as"]} == {"OMIM:154700", "ORPHA:558"}
    assert record["definitions"][0]["text"].startswith("A disorder of the fibrous connective tissue")
    assert record["definitions"][0]["source"] == "MONDO:0007947"
    assert {s["text"] for s in record["synonyms"]} == {"MFS", "Marfan's syndrome"}  # its own label left out
    assert {x["id"] for x in record["xrefs"] if x["kind"] == "exact"} >= {"OMIM:154700", "ORPHA:558"}
    assert [p["id"] for p in record["parents"]] == ["MONDO:0000001"]
    assert [t["id"] for t in record["types"]] == ["MKG:Disease"]
    # the annotations of both sources' rows, most frequent first, each with its frequency and reference
    notes = record["annotations"]
    assert notes["total"] == 13  # the 7 OMIM and 6 Orphanet rows of mini.hpoa (not the label matches' records)
    assert len(notes["items"]) == 5 and notes["offset"] == 0
    first = notes["items"][0]
    assert first["frequency"] == "HP:0040281" and first["frequency_label"] == "Very frequent (80-99%)"
    assert first["references"] == [first["subject"]["id"]] and first["evidence"] == "TAS"
    fraction = [a for a in client.get("/v1/concept/annotations", params={"id": "MONDO:0007947", "limit": 50})
                .json()["items"] if a["frequency"] == "45/58"]
    assert fraction[0]["frequency_label"] == "45/58 (78%)" and fraction[0]["object"]["label"] == "Aortic root aneurysm"
    # a larger cohort reads as the firmer figure: 124/197 (63%) before 34/53 (64%)
    order = [a["frequency"] for a in client.get("/v1/concept/annotations", params={"id": "MONDO:0007947",
                                                                                 "limit": 50}).json()["items"]]
    assert order.index("124/197") < order.index("34/53")
    # one fact count: the relation counts add up to it, and so do the fact pages
    assert sum(r["count"] for r in record["relations"]) == record["facts"]
    listed = client.get("/v1/concept/facts", params={"id": "MONDO:0007947", "limit": 500}).json()
    assert listed["total"] == listed["matching"] == record["facts"] == len(listed["neighbours"])
    assert record["lacks"] == ["children"]


def test_a_phenotype_with_many_children_pages_them_and_its_facts(client: TestClient) -> None:
    record = client.get("/v1/concept", params={"id": MANY_CHILDREN_PARENT}).json()
    assert record["children"]["total"] == MANY_CHILDREN and len(record["children"]["items"]) == 20
    assert record["facts"] == MANY_CHILDREN + 1  # its children's is-a edges and its own
    pages = [client.get("/v1/concept/children", params={"id": MANY_CHILDREN_PARENT, "offset": o, "limit": 25}).json()
             for o in (0, 25, 50)]
    ids = [c["id"] for p in pages for c in p["items"]]
    assert len(ids) == len(set(ids)) == MANY_CHILDREN and [len(p["items"]) for p in pages] == [25, 25, 10]
    facts = [client.get("/v1/concept/facts", params={"id": MANY_CHILDREN_PARENT, "offset": o, "limit": 50}).json()
             for o in (0, 50)]
    assert [len(p["neighbours"]) for p in facts] == [50, MANY_CHILDREN + 1 - 50]
    assert {p["total"] for p in facts} == {record["facts"]}
    down = client.get("/v1/concept/facts", params={"id": MANY_CHILDREN_PARENT, "relation": "rdfs:subClassOf",
                                                   "direction": "backward", "limit": 5}).json()
    assert down["matching"] == MANY_CHILDREN and down["total"] == record["facts"] and len(down["neighbours"]) == 5
    assert all(n["direction"] == "backward" for n in down["neighbours"])
    assert "synonyms" in record["lacks"] and "annotations" in record["lacks"]


def test_a_phenotype_has_its_synonyms_xrefs_and_the_diseases_annotated_with_it(client: TestClient) -> None:
    record = client.get("/v1/concept", params={"id": "HP:0001166"}).json()
    assert {s["text"] for s in record["synonyms"]} == {"Spider fingers", "Long slender fingers"}
    assert {(x["id"], x["kind"], x["in_kg"]) for x in record["xrefs"]} == {
        ("UMLS:C0003706", "close", False), ("SNOMEDCT:62250003", "close", False)}
    diseases = {a["subject"]["id"] for a in record["annotations"]["items"]}
    assert {"OMIM:154700", "ORPHA:558", "OMIM:900001"} <= diseases
    assert all(a["object"]["id"] == "HP:0001166" for a in record["annotations"]["items"])


def test_the_demo_kg_record_says_what_its_source_lacks() -> None:
    kg = KnowledgeGraph(demo_store(), embedding_model="none")
    with TestClient(create_app(kg)) as client:
        record = client.get("/v1/concept", params={"id": "KG:Asthma"}).json()
        assert record["definitions"] and record["synonyms"][0]["text"] == "bronchial asthma"
        assert record["facts"] == kg.degrees([record["iri"]])[record["iri"]]
        assert record["lacks"] == ["cross-references", "children", "annotations"]
        assert client.get("/v1/concept", params={"id": "KG:Nothing_here"}).status_code == 404
        bad = client.get("/v1/concept/facts", params={"id": "KG:Asthma", "relation": "no such relation"})
        assert bad.status_code == 400 and "relation" in bad.json()["error"]["message"]
