"""Inputs that used to load silently wrong: each is now refused with the file and line (or, where a row can be
skipped, skipped and counted under --lenient), and a refused load leaves the store as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mirage_kg.cli import main
from mirage_kg.store import OxigraphStore

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIX = FIXTURES / "core"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def content(store: Path) -> set[str]:
    """The store's quads as N-Quads lines (a store that is not there: empty)."""
    if not store.exists():
        return set()
    opened = OxigraphStore(store, read_only=True)
    try:
        return {str(q) for q in opened.raw}
    finally:
        opened.close()


def facts(store: Path) -> int:
    out = run("stats", "--store", str(store), "--json")
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)["facts"]


# -- triple files ------------------------------------------------------------------------------------------------

def test_header_row_in_the_middle_of_a_tsv_is_no_fact(tmp_path: Path) -> None:
    source = tmp_path / "joined.tsv"
    source.write_text("Flu\thas_symptom\tFever\nhead\trelation\ttail\nFlu\thas_symptom\tCough\n")
    result = run("load", str(source), "--store", str(tmp_path / "kg"))
    assert result.exit_code == 1 and "joined.tsv:2" in result.output and "header" in result.output, result.output
    lenient = run("load", str(source), "--store", str(tmp_path / "kg2"), "--lenient")
    assert lenient.exit_code == 0, lenient.output
    assert "header row" in lenient.output and facts(tmp_path / "kg2") == 2


def test_a_row_whose_head_starts_with_hash_is_reported_not_dropped(tmp_path: Path) -> None:
    source = tmp_path / "hash.tsv"
    source.write_text("# a comment line holds no tab\n#head\trelation\ttail\n"
                      "#1_ranked_drug\ttreats\tFlu\nFlu\thas_symptom\tFever\n")
    result = run("load", str(source), "--store", str(tmp_path / "kg"))
    assert result.exit_code == 1 and "hash.tsv:3" in result.output and "#" in result.output, result.output
    lenient = run("load", str(source), "--store", str(tmp_path / "kg2"), "--lenient")
    assert lenient.exit_code == 0 and "hash.tsv:3" in lenient.output, lenient.output
    assert facts(tmp_path / "kg2") == 1


# -- RDF -----------------------------------------------------------------------------------------------------------

def test_raw_nul_in_an_n_triples_literal_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "nul.nt"
    source.write_bytes(b'<http://x.org/a> <http://x.org/p> "fine" .\n<http://x.org/a> <http://x.org/p> "A\x00B" .\n')
    result = run("load", str(source), "--store", str(tmp_path / "kg"))
    assert result.exit_code == 1 and "nul.nt:2" in result.output and "0x00" in result.output, result.output
    assert content(tmp_path / "kg") == set()


BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE rdf:RDF [
 <!ENTITY a "aaaaaaaaaa">
 <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
 <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
 <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
 <!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
 <!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">
]>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://x.org/">
 <rdf:Description rdf:about="http://x.org/a"><ex:p>&f;</ex:p></rdf:Description>
</rdf:RDF>
"""


def test_rdfxml_entity_expansion_is_bounded(tmp_path: Path) -> None:
    source = tmp_path / "laughs.rdf"
    source.write_text(BILLION_LAUGHS)
    result = run("load", str(source), "--store", str(tmp_path / "kg"))
    assert result.exit_code == 1 and "laughs.rdf" in result.output and "entit" in result.output, result.output
    assert content(tmp_path / "kg") == set()
    # namespace shortcuts, the entities real RDF/XML uses, still load
    shortcuts = tmp_path / "shortcuts.rdf"
    shortcuts.write_text('<?xml version="1.0"?>\n<!DOCTYPE rdf:RDF [ <!ENTITY ex "http://x.org/"> ]>\n'
                         '<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:ex="http://x.org/">\n'
                         ' <rdf:Description rdf:about="&ex;a"><ex:p rdf:resource="&ex;b"/></rdf:Description>\n'
                         '</rdf:RDF>\n')
    fine = run("load", str(shortcuts), "--store", str(tmp_path / "kg2"))
    assert fine.exit_code == 0, fine.output
    assert any("<http://x.org/a> <http://x.org/p> <http://x.org/b>" in q for q in content(tmp_path / "kg2"))


def test_relative_iris_in_turtle_need_a_base(tmp_path: Path) -> None:
    source = tmp_path / "relative.ttl"
    source.write_text("@prefix ex: <http://x.org/> .\n<thing> ex:p ex:o .\n")
    result = run("load", str(source), "--store", str(tmp_path / "kg"))
    assert result.exit_code == 1 and "relative.ttl" in result.output and "base" in result.output.lower(), \
        result.output
    assert content(tmp_path / "kg") == set()
    based = tmp_path / "based.ttl"
    based.write_text("@base <http://x.org/data/> .\n@prefix ex: <http://x.org/> .\n<thing> ex:p ex:o .\n")
    assert run("load", str(based), "--store", str(tmp_path / "kg2")).exit_code == 0
    quads = content(tmp_path / "kg2")
    assert any(q.startswith("<http://x.org/data/thing> ") for q in quads)
    assert not any("file:" in q for q in quads)


def test_a_huge_turtle_literal_is_a_clear_error_and_no_store_is_left(tmp_path: Path) -> None:
    source = tmp_path / "huge.ttl"
    with open(source, "w") as handle:
        handle.write('<http://x.org/a> <http://x.org/p> "')
        handle.write("a" * 20_000_000)
        handle.write('" .\n')
    store = tmp_path / "kg"
    result = run("load", str(source), "--store", str(store))
    assert result.exit_code == 1 and "huge.ttl" in result.output, result.output
    assert "MemoryError" not in result.output and "Traceback" not in result.output
    assert not store.exists()  # the store this load would have created is not left holding only the schema
    # into an existing store: untouched
    existing = tmp_path / "kg2"
    assert run("load", str(FIX / "small.tsv"), "--store", str(existing)).exit_code == 0
    before = content(existing)
    assert run("load", str(source), "--store", str(existing)).exit_code == 1
    assert content(existing) == before


# -- OBO, OWL, HPOA ------------------------------------------------------------------------------------------------

def test_a_second_obo_stanza_with_the_same_id_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "twice.obo"
    source.write_text("format-version: 1.2\nontology: tst\n\n[Term]\nid: TST:0000001\nname: first name\n\n"
                      "[Term]\nid: TST:0000002\nname: other\n\n[Term]\nid: TST:0000001\nname: second name\n")
    result = run("load", str(source), "--store", str(tmp_path / "kg"))
    assert result.exit_code == 1 and "twice.obo:13" in result.output and "TST:0000001" in result.output, \
        result.output
    lenient = run("load", str(source), "--store", str(tmp_path / "kg2"), "--lenient")
    assert lenient.exit_code == 0, lenient.output
    names = {q for q in content(tmp_path / "kg2") if "TST_0000001" in q and "prefLabel" in q}
    assert len(names) == 1 and "first name" in next(iter(names))


def test_truncated_owl_prints_one_clean_error(tmp_path: Path) -> None:
    pytest.importorskip("owlready2")
    source = tmp_path / "cut.owl"
    source.write_bytes((FIXTURES / "owl" / "mini.owl").read_bytes()[:1500])
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "mirage_kg.cli", "load", str(source), "--store",
                           str(tmp_path / "kg")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().startswith("Error:") and "cut.owl" in done.stderr and "line" in done.stderr


@pytest.mark.parametrize("frequency", ["9/7", "3/0", "120%", "often"])
def test_impossible_hpoa_frequencies_are_refused(tmp_path: Path, frequency: str) -> None:
    source = tmp_path / "freq.hpoa"
    lines = (FIXTURES / "hpoa" / "mini.hpoa").read_text().splitlines(keepends=True)
    lines = [line.replace("\t3/7\t", f"\t{frequency}\t") for line in lines]
    source.write_text("".join(lines))
    number = next(i for i, line in enumerate(lines, 1) if f"\t{frequency}\t" in line)
    result = run("load", str(source), "--store", str(tmp_path / "kg"), "--format", "hpoa")
    assert result.exit_code == 1 and f"freq.hpoa:{number}" in result.output and "frequency" in result.output, \
        result.output


def test_possible_hpoa_frequencies_still_load(tmp_path: Path) -> None:
    source = tmp_path / "freq.hpoa"
    text = (FIXTURES / "hpoa" / "mini.hpoa").read_text()
    source.write_text(text.replace("\t3/7\t", "\t7/7\t", 1))
    assert run("load", str(source), "--store", str(tmp_path / "kg"), "--format", "hpoa").exit_code == 0


# -- load --update -------------------------------------------------------------------------------------------------

def test_update_with_an_unrelated_file_needs_force(tmp_path: Path, emckg_path: Path) -> None:
    store = tmp_path / "kg"
    source = tmp_path / "triples.tsv"
    shutil.copyfile(emckg_path, source)
    assert run("load", str(source), "--store", str(store)).exit_code == 0
    before = content(store)
    other = tmp_path / "other" / "triples.tsv"
    other.parent.mkdir()
    other.write_text("Alpha\tr\tBeta\nBeta\tr\tGamma\nGamma\tr\tDelta\nDelta\tr\tEpsilon\nEpsilon\tr\tAlpha\n")
    refused = run("load", str(other), "--store", str(store), "--update")
    assert refused.exit_code == 1 and "--force" in refused.output, refused.output
    assert content(store) == before
    forced = run("load", str(other), "--store", str(store), "--update", "--force")
    assert forced.exit_code == 0, forced.output
    assert facts(store) == 5


def test_update_with_another_source_kind_needs_force(tmp_path: Path) -> None:
    store = tmp_path / "kg"
    assert run("load", str(FIX / "small.tsv"), "--store", str(store)).exit_code == 0
    before = content(store)
    graph = "triples/small.tsv"
    refused = run("load", str(FIXTURES / "obo" / "mini.obo"), "--store", str(store), "--update", "--graph", graph)
    assert refused.exit_code == 1 and "--force" in refused.output and "obo" in refused.output, refused.output
    assert content(store) == before
