"""The compact structures of validation (``mirage_kg.validation.compact``) give exactly the findings of the
plain ones they replaced: a generated KG with many findings of every whole-graph kind (missing and repeated
prefLabels, ambiguous labels, shared notations, IS-A cycles and self-loops, components of tied sizes, links to
IRIs outside the KG, mappings, isolated and retired concepts) is checked against reference answers computed here
with Python sets, networkx and the GROUP BY queries the checks used to run, on every store."""

from __future__ import annotations

import io
import random

import networkx as nx
import numpy as np
import pytest

from mirage_kg.model.namespaces import ENTITY, GRAPH, MKG, RDF, RDFS, SKOS, compress
from mirage_kg.store import Store
from mirage_kg.validation import compact, validate
from mirage_kg.validation.structural.context import Context
from mirage_kg.validation.structural.queries import CONCEPT_PREDICATES, DATA, MAPPINGS, META_TYPES, PREFIXES, values
from mirage_kg.model.namespaces import SCHEMA_GRAPH

DATA_GRAPH = f"{GRAPH}test/generated"


def generated_kg(seed: int = 7) -> str:
    """N-Triples of a KG with many findings of each whole-graph kind, in tied sizes so that order matters."""
    rng = random.Random(seed)
    lines: list[str] = []

    def iri(name: str) -> str:
        return f"<{ENTITY}{name}>"

    def add(s: str, p: str, o: str) -> None:
        lines.append(f"{s} <{p}> {o} .")

    link, other = ENTITY + "linked_to", ENTITY + "undeclared_link"
    add(f"<{link}>", RDF + "type", f"<{MKG}Relation>")
    add(f"<{link}>", RDFS + "label", '"linked to"')
    names = [f"C{i:03d}" for i in range(240)]
    rng.shuffle(names)
    for i, name in enumerate(names):
        add(iri(name), RDF + "type", f"<{MKG}Concept>")
        if i % 17 == 3:
            continue  # missing-preflabel
        label = f"term {i % 150}" if i % 5 else f"Term {i % 150}"  # ambiguous (case-folded), groups of 1-3
        add(iri(name), SKOS + "prefLabel", f'"{label}"@en')
        if i % 23 == 5:
            add(iri(name), SKOS + "prefLabel", f'"other {i}"@en')  # multiple-preflabels
        if i % 29 == 7:
            add(iri(name), SKOS + "prefLabel", f'"Autre {i}"@fr')
            add(iri(name), SKOS + "prefLabel", f'"autre {i}"@fr')  # two in French: still one concept counted
        code = f"{i % 200}" if i % 3 else str(i % 97)
        typed = f'"{code}"^^<http://www.w3.org/2001/XMLSchema#integer>' if i % 4 == 0 else f'"{code}"'
        add(iri(name), SKOS + "notation", typed)  # duplicate-id, plain and integer codes
    # components: groups of tied sizes, each a random tree; some through an IRI outside the KG
    sizes = [60, 25, 25, 9, 9, 9, 9, 4, 4, 3, 2, 2, 2, 2]
    start = 0
    for g, size in enumerate(sizes):
        group = names[start:start + size]
        start += size
        for j in range(1, len(group)):
            a, b = group[j], group[rng.randrange(j)]
            add(iri(a), link if j % 3 else other, iri(b))
        if g % 4 == 1:
            add(iri(group[0]), link, iri(f"Ghost{g}"))  # dangling, joins the component
            add(iri(names[-1 - g]), link, iri(f"Ghost{g}"))  # and a concept from the tail with it
    # a concept only by its own links (no label, no type) that is a link's target: dangling too
    add(iri("Waypoint"), link, iri(names[230]))
    add(iri(names[231]), link, iri("Waypoint"))
    # mappings: between two concepts they join components; to an outside IRI they do not
    add(iri(names[200]), SKOS + "exactMatch", iri(names[201]))
    add(iri(names[202]), SKOS + "closeMatch", "<http://example.org/elsewhere/X1>")
    for name in names[205:215]:
        add(iri(name), f"{MKG}active", '"false"^^<http://www.w3.org/2001/XMLSchema#boolean>')
    # IS-A: a DAG, cycles of 3, 2 and 2 members, self-loops (one inside a cycle)
    for j in range(1, 60):
        add(iri(names[j]), RDFS + "subClassOf", iri(names[rng.randrange(j)]))
    for cycle in ([names[100], names[101], names[102]], [names[110], names[111]], [names[104], names[105]]):
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            add(iri(a), RDFS + "subClassOf", iri(b))
    for name in (names[120], names[121], names[100]):
        add(iri(name), RDFS + "subClassOf", iri(name))
    return "\n".join(lines) + "\n"


@pytest.fixture
def generated(store: Store) -> Store:
    store.load(io.BytesIO(generated_kg().encode()), media_type="application/n-triples", graph=DATA_GRAPH, source="generated")
    return store


def reference(store: Store, max_examples: int) -> dict[str, tuple[int, list[str]]]:
    """check -> (count, the first examples' ids), computed the plain way."""
    ctx = Context(store, max_examples)
    n = max_examples

    def rows(query: str) -> list[dict]:
        return list(store.select_all(PREFIXES + query))

    preds = sorted(set(CONCEPT_PREDICATES) | set(ctx.concept_links))
    found = {r["s"].value for r in rows(f"""SELECT DISTINCT ?s WHERE {{ GRAPH ?g {{ ?s ?p ?o }} {DATA}
        {values('p', preds)} FILTER(isIRI(?s)) }}""")}
    vocabulary = {r["s"].value for r in rows(f"SELECT DISTINCT ?s WHERE {{ ?s rdf:type ?k . {values('k', META_TYPES)} }}")}
    described = {r["s"].value for r in rows(f"SELECT DISTINCT ?s WHERE {{ GRAPH <{SCHEMA_GRAPH}> {{ ?s ?p ?o }} }}")}
    concepts = found - vocabulary - described
    with_pref = {r["s"].value for r in rows("SELECT DISTINCT ?s WHERE { ?s skos:prefLabel ?l }")}
    out: dict[str, tuple[int, list[str]]] = {}
    missing = sorted(concepts - with_pref)
    out["missing-preflabel"] = (len(missing), missing[:n])

    def edges(predicates: list[str], schema: bool = False) -> list[tuple[str, str]]:
        graphs = "" if schema else DATA
        return [(r["s"].value, r["o"].value) for r in rows(f"""SELECT ?s ?o WHERE {{ GRAPH ?g {{ ?s ?p ?o }}
            {graphs} {values('p', predicates)} FILTER(isIRI(?s) && isIRI(?o)) }}""")] if predicates else []

    linked = edges(ctx.concept_links)
    described_anywhere = {r["s"].value for r in rows("""SELECT DISTINCT ?s WHERE {
        { ?s skos:prefLabel ?l } UNION { ?s rdfs:label ?l } UNION { ?s skos:altLabel ?l } UNION { ?s rdf:type ?l } }""")}
    dangling = sorted({b for _, b in linked} - described_anywhere)
    out["dangling-reference"] = (len(dangling), dangling[:n])
    graph = nx.Graph()
    graph.add_edges_from(linked)
    graph.add_edges_from((a, b) for a, b in edges([p for p in ctx.links if p in MAPPINGS])
                         if a in concepts and b in concepts)
    components = sorted((sorted(c) for c in nx.connected_components(graph)), key=lambda c: (-len(c), c[0]))
    out["disconnected-component"] = (len(components) - 1, [c[0] for c in components[1:1 + n]])
    inactive = {r["x"].value for r in rows('SELECT ?x WHERE { ?x MKG:active ?a FILTER(STR(?a) IN ("false", "0")) }')}
    isolated = sorted(concepts - set(graph.nodes) - inactive)
    out["isolated-node"] = (len(isolated), isolated[:n])
    isa = nx.DiGraph(edges([RDFS + "subClassOf"], schema=True))
    cycles = [sorted(c) for c in nx.strongly_connected_components(isa) if len(c) > 1]
    cycles += [[a] for a, b in nx.selfloop_edges(isa)]
    cycles.sort(key=lambda c: (-len(c), c[0]))
    out["isa-cycle"] = (len(cycles), [c[0] for c in cycles[:n]])
    # the GROUP BY queries the grouping checks ran before
    groups = rows(f"""SELECT ?key ?lang (COUNT(DISTINCT ?x) AS ?k) (MIN(STR(?x)) AS ?first) WHERE {{
        GRAPH ?g {{ ?x skos:prefLabel ?l }} {DATA} FILTER(isIRI(?x)) BIND(LCASE(STR(?l)) AS ?key) BIND(LANG(?l) AS ?lang)
        }} GROUP BY ?key ?lang HAVING (COUNT(DISTINCT ?x) > 1)""")
    groups.sort(key=lambda r: (-int(r["k"].value), r["key"].value, r["lang"].value))
    out["ambiguous-label"] = (len(groups), [r["first"].value for r in groups[:n]])
    multiple = sorted({r["x"].value for r in rows(f"""SELECT ?x WHERE {{ GRAPH ?g {{ ?x skos:prefLabel ?l }} {DATA}
        BIND(LANG(?l) AS ?lang) }} GROUP BY ?x ?lang HAVING (COUNT(DISTINCT ?l) > 1)""")})
    out["multiple-preflabels"] = (len(multiple), multiple[:n])
    codes = rows(f"""SELECT ?code (COUNT(DISTINCT ?x) AS ?k) (MIN(STR(?x)) AS ?first) WHERE {{
        GRAPH ?g {{ ?x skos:notation ?code }} {DATA} FILTER(isIRI(?x)) }} GROUP BY ?code HAVING (COUNT(DISTINCT ?x) > 1)""")
    codes.sort(key=lambda r: (-int(r["k"].value), (float(r["code"].value), "") if r["code"].datatype else
                              (float("inf"), r["code"].value)))
    out["duplicate-id"] = (len(codes), [r["first"].value for r in codes[:n]])
    return out


@pytest.mark.parametrize("max_examples", [5, 40])
def test_findings_equal_the_plain_structures(generated: Store, max_examples: int) -> None:
    report = validate(generated, shipped_shapes=False, max_examples=max_examples)
    expected = reference(generated, max_examples)
    for check, (count, first) in expected.items():
        finding = report.finding(check)
        assert finding is not None and count > 1, check  # the generator plants several of each
        assert finding.count == count, check
        assert [e.id for e in finding.examples] == [compress(i) for i in first], check


def test_component_sizes_and_cycle_walks_are_reported(generated: Store) -> None:
    report = validate(generated, shipped_shapes=False, structural=["disconnected-component", "isa-cycle"])
    components = report.finding("disconnected-component")
    assert components is not None
    sizes = [int(e.detail.split(" concept(s)")[0].rsplit(" ", 1)[1]) for e in components.examples]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) > 1 and sizes[-1] == sizes[-2]  # ties too
    largest = {e.detail.split("largest (")[1] for e in components.examples}
    assert len(largest) == 1 and int(largest.pop().split(" ")[0]) > sizes[0]
    cycles = report.finding("isa-cycle")
    assert cycles is not None and cycles.examples[0].detail.startswith("3 class(es) in a subClassOf cycle: ")
    walk = cycles.examples[0].detail.split(": ")[1].split(" -> ")
    assert walk[0] == walk[-1] and len(walk) == 4


def test_iri_table_ids_follow_iri_order_and_survive_hash_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    iris = [f"http://example.org/{w}" for w in ("b", "a", "é", "c", "a", "Z")]
    table = compact.IriTable(iris)
    assert table.iris(range(len(table))) == sorted(set(iris))
    assert table.ids(["http://example.org/c", "http://example.org/none"]).tolist() == [3, -1]
    # every IRI one hash: the table notices and looks up exactly
    monkeypatch.setattr(compact.IriTable, "_blob_hashes", _all_one_hash)
    collided = compact.IriTable(iris)
    assert collided.exact and not table.exact
    assert collided.ids(["http://example.org/é", "http://example.org/none"]).tolist() == [4, -1]
    assert compact.IriTable(i.encode() for i in iris).iris(range(len(table))) == table.iris(range(len(table)))


def _all_one_hash(table: compact.IriTable, window: int = 0) -> np.ndarray:
    return np.zeros(len(table), dtype=np.int64)


def test_a_table_with_colliding_hashes_validates_by_strings(generated: Store, monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    expected = validate(generated, shipped_shapes=False, max_examples=40).to_json()
    monkeypatch.setattr(compact.IriTable, "_blob_hashes", _all_one_hash)
    ctx = Context(generated, 40)
    assert ctx.concepts.exact and not ctx.reads_tsv
    assert validate(generated, shipped_shapes=False, max_examples=40).to_json() == expected


def test_string_hashes_are_the_hashes_of_their_utf8_spans() -> None:
    words = [f"http://example.org/{i}/{'é' * (i % 3)}" for i in range(50_000)] + ["", "a", "b", "ab", "ba"]
    hashes = compact.string_hashes(words, window=999)
    assert len(set(hashes.tolist())) == len(words)  # all distinct, across windows
    assert compact.string_hashes(words[:7]).tolist() == hashes[:7].tolist()
    data = ("xx" + words[3] + "|" + words[3] + "yy").encode()
    span = len(words[3].encode())
    at = compact.utf8_hashes(np.frombuffer(data, dtype=np.uint8), np.array([2, 3 + span]),
                             np.array([2 + span, 3 + 2 * span]))
    assert at.tolist() == [hashes[3], hashes[3]]  # the same bytes hash alike wherever they sit in the buffer


def test_tsv_rows_find_the_iris_the_engine_writes(tmp_path) -> None:
    from mirage_kg.store import OxigraphStore
    from mirage_kg.validation import tsv_rows

    store = OxigraphStore()
    objects = ['<http://example.org/é/x>', '"tab\\there\\n"@en', '"12"^^<http://www.w3.org/2001/XMLSchema#integer>',
               '_:blank', '<http://example.org/%3C>', '"<not an iri>"']
    lines = [f"<http://example.org/s{i}> <http://example.org/p> {o} ." for i in range(300) for o in objects]
    store.load(io.BytesIO("\n".join(lines).encode()), media_type="application/n-triples", graph=DATA_GRAPH)
    query = "SELECT ?s ?o ?none WHERE { GRAPH ?g { ?s ?p ?o } }"
    expected = [(r["s"].value, r["o"].value if r["o"].kind == "uri" else "") for r in store.select(query)]
    chunks: list[bytes] = []
    store.tsv_blocks(query, ["s", "o", "none"], chunks.append, block=500)
    assert len(chunks) > 10 and all(c.endswith(b"\n") for c in chunks)
    found = []
    for chunk in (tsv_rows.TsvChunk(c, 3) for c in chunks):
        iri = chunk.is_iri(1)
        assert chunk.is_iri(0).all() and not chunk.is_iri(2).any()
        hashes = chunk.iri_hashes(1)
        for row in range(len(chunk)):
            obj = chunk.iri(row, 1) if iri[row] else ""
            if obj:
                assert hashes[row] == compact.string_hashes([obj])[0]
            found.append((chunk.iri(row, 0), obj))
    assert sorted(found) == sorted(expected)
    with pytest.raises(Exception, match="SELECT"):
        tsv_rows.each_chunk(store, "ASK { ?s ?p ?o }", (), lambda chunk: None)


def test_component_labels_in_batches_equal_networkx() -> None:
    rng = np.random.default_rng(3)
    left, right = rng.integers(0, 5_000, 3_000), rng.integers(0, 5_000, 3_000)
    merged = compact.ComponentLabels(4_000)
    for at in range(0, 3_000, 700):  # batches, and nodes beyond the first 4,000 arriving late
        merged.grow(int(max(left[: at + 700].max(), right[: at + 700].max())) + 1)
        merged.union(left[at: at + 700], right[at: at + 700])
    graph = nx.Graph(zip(left.tolist(), right.tolist()))
    ours: dict[int, set[int]] = {}
    for node in np.flatnonzero(merged.touched).tolist():
        ours.setdefault(int(merged.labels[node]), set()).add(node)
    assert sorted(map(sorted, ours.values())) == sorted(map(sorted, nx.connected_components(graph)))


def test_groups_with_several_counts_distinct_members() -> None:
    keys = np.array([5, 5, 5, 7, 7, 9, 1, 1], dtype=np.int64)
    members = np.array([1, 1, 2, 3, 3, 4, 8, 9], dtype=np.int64)
    flagged, counts, first = compact.groups_with_several(keys, members)
    assert flagged.tolist() == [1, 5] and counts.tolist() == [2, 2]
    assert keys[first].tolist() == [1, 5]


def test_tsv_values_read_back_as_the_terms_select_gives() -> None:
    from mirage_kg.store import OxigraphStore
    from mirage_kg.validation import tsv_rows

    xsd = "http://www.w3.org/2001/XMLSchema#"
    objects = ['"plain"', '"quote \\" back \\\\ tab \\t nl \\n cr \\r"', '"é ✓ 𝄞"@fr', '"x"@en-GB', '""',
               f'"12"^^<{xsd}integer>', f'"-7"^^<{xsd}integer>', f'"1.5"^^<{xsd}integer>', f'"1.50"^^<{xsd}decimal>',
               f'"12"^^<{xsd}decimal>', f'"1.0E3"^^<{xsd}double>', f'"2.5e-3"^^<{xsd}double>', f'"NaN"^^<{xsd}double>',
               f'"true"^^<{xsd}boolean>', f'"yes"^^<{xsd}boolean>', f'"2020-13-01"^^<{xsd}date>',
               f'"s"^^<{xsd}string>', '"12"', '<http://example.org/o>', '_:b7', '"\\u0001 ctl"']
    lines = [f"<http://example.org/s{i}> <http://example.org/p> {o} ." for i, o in enumerate(objects)]
    store = OxigraphStore()
    store.load(io.BytesIO("\n".join(lines).encode()), media_type="application/n-triples", graph=DATA_GRAPH)
    query = f"SELECT ?s ?o ?lang WHERE {{ GRAPH <{DATA_GRAPH}> {{ ?s ?p ?o }} BIND(LANG(?o) AS ?lang) }}"
    expected = sorted(store.select(query), key=lambda r: r["s"].value)
    variables = ("s", "o", "lang")
    found: list[dict] = []
    tsv_rows.each_chunk(store, query, variables, lambda chunk: found.extend(chunk.terms(row, variables)
                                                                            for row in range(len(chunk))))
    found.sort(key=lambda r: r["s"].value)
    assert len(found) == len(expected) == len(objects)
    for ours, theirs in zip(found, expected):
        assert ours == theirs
