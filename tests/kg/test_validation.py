"""``mirage-kg validate``: one planted defect per check is found, named and counted; a clean KG passes.

The structural checks and the shipped shapes run on every store (embedded and a live Oxigraph server); the
reasoner, the CLI and the EMCKG measurement run on the embedded store only."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mirage_kg.cli import main
from mirage_kg.model.namespaces import ENTITY, GRAPH
from mirage_kg.store import OxigraphStore, Store, ensure_schema
from mirage_kg.validation import CHECK_IDS, Report, validate

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "validation"
CHECK_FILE = FIX / "checks" / "drug-without-indication.rq"

# check -> (level, the planted defect's id in the first example)
PLANTED = {
    "dangling-reference": ("error", "KG:Ghost"),
    "missing-preflabel": ("warning", "KG:Chest_tightness"),
    "multiple-preflabels": ("error", "KG:Dyspnoea"),
    "ambiguous-label": ("warning", "KG:Cold"),
    "isa-cycle": ("error", "KG:Bronchitis"),
    "undeclared-relation": ("warning", "KG:worsened_by"),
    "unused-relation": ("info", "KG:treated_surgically_by"),
    "domain-violation": ("error", "KG:Wheezing"),
    "range-violation": ("error", "KG:Spirometry"),
    "inactive-reference": ("warning", "KG:Asthma_retired_code"),
    "duplicate-id": ("error", "KG:Asthma"),
    "literal-datatype": ("error", "KG:Spirometry"),
    "disconnected-component": ("info", "KG:Gout"),
    "isolated-node": ("info", "KG:Lonely_disease"),
}
SHIPPED_SHAPES_PLANTED = {
    "shacl:ConceptPrefLabelShape/MinCount": ("warning", "KG:Chest_tightness"),
    "shacl:PrefLabelUniqueLangShape/UniqueLang": ("error", "KG:Dyspnoea"),
    "shacl:PrefLabelShape/MinLength": ("error", "KG:Fever"),
    "shacl:ActiveShape/Datatype": ("error", "KG:Spirometry"),
    "shacl:TemplatePlaceholdersShape/Pattern": ("error", "KG:treated_surgically_by"),
}


def load(store: Store, *names: str) -> Store:
    for name in names:
        with open(FIX / name, "rb") as handle:
            store.load(handle, media_type="text/turtle", graph=f"{GRAPH}test/{name}", source=name)
    return store


def embedded(*names: str) -> OxigraphStore:
    store = OxigraphStore()
    ensure_schema(store)
    load(store, *names)
    return store


def run(*args: str) -> "object":
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# --- every store ----------------------------------------------------------------------------------------------
def test_each_planted_defect_is_found_named_and_counted(store: Store) -> None:
    report = validate(load(store, "clean.ttl", "defects.ttl"))
    assert set(PLANTED) | {"schema-missing"} == set(CHECK_IDS)  # the fixture covers every structural check
    found = {f.check: f for f in report.findings}
    for check, (level, first) in {**PLANTED, **SHIPPED_SHAPES_PLANTED}.items():
        assert check in found, f"{check} missed its planted defect"
        assert (found[check].level, found[check].count) == (level, 1), check
        assert found[check].examples[0].id == first, check
    assert set(found) == set(PLANTED) | set(SHIPPED_SHAPES_PLANTED)  # and nothing else fired
    assert report.summary == {"error": 11, "warning": 5, "info": 3}
    assert report.fails("error") and report.fails("warning") and not report.fails("none")


def test_clean_fixture_has_no_findings(store: Store) -> None:
    report = validate(load(store, "clean.ttl"), checks=[CHECK_FILE])
    assert report.findings == ()
    assert report.to_json() == {"summary": {"error": 0, "warning": 0, "info": 0}, "findings": []}


def test_user_shapes_and_sparql_checks(store: Store) -> None:
    report = validate(load(store, "clean.ttl", "defects.ttl"), structural=False, shipped_shapes=False,
                      shapes=[FIX / "extra-shapes.ttl"], checks=[CHECK_FILE])
    assert [(f.check, f.level, f.count) for f in report.findings] == [
        ("drug-without-indication", "warning", 1),
        ("shacl:DiseaseShape/MKG:has_symptom/MinCount", "warning", 5),
    ]
    drug = report.findings[0].examples[0]
    assert (drug.id, drug.label) == ("KG:Placebo", "Placebo")


# --- rules the fixture does not pin down ----------------------------------------------------------------------
def test_examples_carry_labels_and_details() -> None:
    report = validate(embedded("clean.ttl", "defects.ttl"), shipped_shapes=False)
    ambiguous = report.finding("ambiguous-label")
    assert ambiguous is not None
    assert ambiguous.examples[0].label == "Common cold"
    assert "KG:Cold, KG:Common_cold" in ambiguous.examples[0].detail
    domain = report.finding("domain-violation")
    assert domain is not None
    assert "MKG:Symptom" in domain.examples[0].detail and "MKG:Disease" in domain.examples[0].detail


def test_labels_must_be_text_and_typed_literals_well_formed() -> None:
    store = embedded("clean.ttl")
    store.update(f"""PREFIX KG: <{ENTITY}> PREFIX skos: <http://www.w3.org/2004/02/skos/core#>
        PREFIX xsd: <http://www.w3.org/2001/XMLSchema#> PREFIX MKG: <https://w3id.org/mirage-kg/schema#>
        INSERT DATA {{ GRAPH <{GRAPH}test/extra> {{
            KG:Asthma skos:altLabel 42 .
            KG:Cough MKG:active "true" .
            KG:Wheezing MKG:frequency "12.5"^^xsd:integer . }} }}""")
    finding = validate(store, shipped_shapes=False, structural=["literal-datatype"]).finding("literal-datatype")
    assert finding is not None and finding.count == 3
    details = " ".join(e.detail for e in finding.examples)
    assert "where a string or language-tagged string is expected" in details  # the integer altLabel
    assert "xsd:string where the range is xsd:boolean" in details  # untyped MKG:active
    assert "not a valid xsd:integer" in details


def test_mapping_targets_are_not_dangling_and_concept_typed_nodes_fit_any_domain() -> None:
    # clean.ttl maps KG:Asthma to an undescribed UMLS IRI and types KG:Cough only as MKG:Concept.
    report = validate(embedded("clean.ttl"), shipped_shapes=False)
    assert report.findings == ()


def test_a_store_without_the_schema_says_so() -> None:
    store = OxigraphStore()
    load(store, "clean.ttl")
    report = validate(store, shipped_shapes=False)
    finding = report.finding("schema-missing")
    assert finding is not None and (finding.level, finding.count) == ("warning", 1)
    assert "GRAPH:schema" in finding.examples[0].detail
    # Without declarations the model's relations are undeclared; IS-A still links concepts.
    undeclared = report.finding("undeclared-relation")
    assert undeclared is not None and "rdfs:subClassOf" not in {e.id for e in undeclared.examples}
    assert report.finding("disconnected-component") is None


def test_shipped_shapes_skip_past_the_limit_but_user_shapes_run() -> None:
    store = embedded("clean.ttl", "defects.ttl")
    report = validate(store, structural=False, shacl_limit=10)
    [finding] = report.findings
    assert (finding.check, finding.level, finding.count) == ("shacl-skipped", "info", 1)
    assert "--shacl-limit 0" in finding.examples[0].detail
    mine = validate(store, structural=False, shacl_limit=10, shapes=[FIX / "extra-shapes.ttl"])
    assert mine.finding("shacl:DiseaseShape/MKG:has_symptom/MinCount") is not None


def test_a_mapping_joins_two_concepts_of_the_kg_but_not_an_outside_iri() -> None:
    store = embedded("clean.ttl")
    store.update(f"""PREFIX KG: <{ENTITY}> PREFIX skos: <http://www.w3.org/2004/02/skos/core#>
        PREFIX MKG: <https://w3id.org/mirage-kg/schema#>
        INSERT DATA {{ GRAPH <{GRAPH}test/mapped> {{
            KG:Bronchial_asthma a MKG:Disease ; skos:prefLabel "Bronchial asthma"@en ; skos:exactMatch KG:Asthma .
            KG:Orphan a MKG:Disease ; skos:prefLabel "Orphan"@en ;
                skos:closeMatch <http://identifiers.org/umls/C0000001> . }} }}""")
    report = validate(store, shipped_shapes=False)
    assert [(f.check, f.count) for f in report.findings] == [("isolated-node", 1)]
    assert report.findings[0].examples[0].id == "KG:Orphan"


# --- OWL reasoning ----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_reason_finds_the_unsatisfiable_class() -> None:
    pytest.importorskip("owlready2")
    if shutil.which("java") is None:
        pytest.skip("java is not installed")
    assert validate(embedded("clean.ttl"), reason=True, shipped_shapes=False).findings == ()
    report = validate(embedded("clean.ttl", "defects.ttl"), reason=True, structural=False, shipped_shapes=False)
    [finding] = report.findings
    assert (finding.check, finding.level, finding.count) == ("owl-unsatisfiable", "error", 1)
    assert finding.examples[0].id == "KG:Impossible_infection"
    assert "KG:Bacterial_infection" in finding.examples[0].detail


def test_reason_without_java_is_an_info_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("owlready2")
    monkeypatch.setenv("PATH", "")
    report = validate(embedded("clean.ttl"), reason=True, structural=False, shipped_shapes=False)
    [finding] = report.findings
    assert (finding.check, finding.level) == ("owl-reasoner-skipped", "info")
    assert "java" in finding.examples[0].detail
    assert not report.fails("warning")


# --- CLI --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def store_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """On-disk stores: the clean KG, and the clean KG plus the defects (loaded with `mirage-kg load`)."""
    root = tmp_path_factory.mktemp("validate-cli")
    dirs = {"clean": root / "clean", "defects": root / "defects"}
    for kind, files in (("clean", ["clean.ttl"]), ("defects", ["clean.ttl", "defects.ttl"])):
        for name in files:
            result = run("load", str(FIX / name), "--store", str(dirs[kind]))
            assert result.exit_code == 0, result.output
    return dirs


def test_cli_clean_store_exits_0_with_empty_json(store_dirs: dict[str, Path]) -> None:
    result = run("validate", "--store", str(store_dirs["clean"]), "--json", "--check", str(CHECK_FILE))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"summary": {"error": 0, "warning": 0, "info": 0}, "findings": []}
    text = run("validate", "--store", str(store_dirs["clean"]))
    assert text.exit_code == 0 and "No findings" in text.output


def test_cli_json_layout_and_exit_codes(store_dirs: dict[str, Path]) -> None:
    store = str(store_dirs["defects"])
    result = run("validate", "--store", store, "--json", "--examples", "2")
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert list(data) == ["summary", "findings"] and list(data["summary"]) == ["error", "warning", "info"]
    for finding in data["findings"]:
        assert list(finding) == ["check", "level", "count", "examples"]
        assert all(list(e) == ["id", "label", "detail"] for e in finding["examples"])
        assert len(finding["examples"]) <= 2
    levels = [f["level"] for f in data["findings"]]
    assert levels == sorted(levels, key=["error", "warning", "info"].index)  # errors first
    assert run("validate", "--store", store, "--fail-on", "none").exit_code == 0
    skipped = run("validate", "--store", store, "--shacl-limit", "5", "--json")
    assert "shacl-skipped" in skipped.output and "shacl:ActiveShape/Datatype" not in skipped.output


def test_cli_text_report_names_checks_and_counts(store_dirs: dict[str, Path]) -> None:
    result = run("validate", "--store", str(store_dirs["defects"]), "--timings")
    assert result.exit_code == 1
    for check in ("dangling-reference", "isa-cycle", "shacl:PrefLabelUniqueLangShape/UniqueLang", "KG:Ghost"):
        assert check in result.output
    assert "11 errors, 5 warnings, 3 info" in result.output
    assert "time per check" in result.output


def test_cli_fail_on_warning(tmp_path: Path) -> None:
    store = tmp_path / "kg"
    (tmp_path / "warn.ttl").write_text((FIX / "clean.ttl").read_text() + """
KG:Cough skos:prefLabel "cough"@fr .
KG:Toux a MKG:Symptom ; skos:prefLabel "Cough"@en ; MKG:possible_disease KG:Asthma .
""")
    assert run("load", str(tmp_path / "warn.ttl"), "--store", str(store)).exit_code == 0
    assert run("validate", "--store", str(store)).exit_code == 0  # one ambiguous label: a warning
    assert run("validate", "--store", str(store), "--fail-on", "warning").exit_code == 1


def test_cli_usage_errors_exit_2(tmp_path: Path, store_dirs: dict[str, Path]) -> None:
    store = str(store_dirs["clean"])
    ask = tmp_path / "ask.rq"
    ask.write_text("ASK { ?s ?p ?o }")
    broken = tmp_path / "broken.rq"
    broken.write_text("SELECT ?x WHERE { ?x ?p }")
    bad_level = tmp_path / "level.rq"
    bad_level.write_text("# level: fatal\nSELECT ?x WHERE { ?x ?p ?o }")
    not_shapes = tmp_path / "data.ttl"
    not_shapes.write_text("<http://a> <http://b> <http://c> .")
    bad_turtle = tmp_path / "bad.ttl"
    bad_turtle.write_text("this is not turtle")
    cases = [
        (["--check", str(ask)], "SELECT"),
        (["--check", str(broken)], "invalid SPARQL"),
        (["--check", str(bad_level)], "fatal"),
        (["--check", str(tmp_path / "missing.rq")], "does not exist"),
        (["--shapes", str(not_shapes)], "no SHACL shapes"),
        (["--shapes", str(bad_turtle)], "cannot read SHACL shapes"),
        (["--fail-on", "sometimes"], "sometimes"),
        (["--endpoint", "http://127.0.0.1:9/query"], "not both"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(main, ["validate", "--store", store, *args])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)


def test_cli_help() -> None:
    result = run("validate", "--help")
    assert result.exit_code == 0
    for option in ("--store", "--endpoint", "--shapes", "--check", "--reason", "--fail-on", "--json"):
        assert option in result.output


# --- package promises and real data -----------------------------------------------------------------------------
def test_importing_validation_is_light() -> None:
    code = ("import sys, mirage_kg, mirage_kg.validation, mirage_kg.cli.validate_command; "
            "print(','.join(m for m in ('pyshacl', 'owlready2', 'rdflib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
    import mirage_kg

    assert mirage_kg.validate is validate
    assert isinstance(validate(embedded("clean.ttl"), shipped_shapes=False), Report)


@pytest.mark.slow
def test_emckg_is_clean(emckg_path: Path) -> None:
    from mirage_kg.loaders import LoadOptions, LoadReport, get_loader

    store = OxigraphStore()
    ensure_schema(store)
    get_loader("triples").load(store, emckg_path, LoadOptions(), LoadReport())
    report = validate(store)
    # 1,123 concepts, all connected, one prefLabel each, no label shared; typed only MKG:Concept, so
    # domain and range cannot be judged (see docs/validation.md).
    assert report.findings == ()
