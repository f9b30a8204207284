"""Label checks: concepts without a prefLabel, concepts with several prefLabels in one language, and one prefLabel
(ignoring case) on several concepts."""

from __future__ import annotations

import numpy as np

from mirage_kg.model.namespaces import compress
from mirage_kg.validation.compact import groups_with_several
from mirage_kg.validation.report import Example
from mirage_kg.validation.structural.context import Context
from mirage_kg.validation.structural.grouping import first_rows, hashed_rows
from mirage_kg.validation.structural.queries import DATA, example, quote, sort_key, values_terms


def missing_preflabel(ctx: Context) -> tuple[int, list[Example]]:
    missing = np.flatnonzero(~ctx.with_preflabel)  # ids: in IRI order
    return len(missing), [example(x, "no skos:prefLabel") for x in ctx.concepts.iris(missing[: ctx.max_examples])]


def multiple_preflabels(ctx: Context) -> tuple[int, list[Example]]:
    # counted from hashes of (concept, language) and label; the labels concatenated for the shown concepts only
    where = f"GRAPH ?g {{ ?x skos:prefLabel ?l }} {DATA} BIND(LANG(?l) AS ?lang)"
    rows = f"SELECT ?x ?lang ?l WHERE {{ {where} }}"  # ?lang unbound on a value that is not a literal
    keys, labels, concepts = hashed_rows(ctx, rows, ("x", "lang"), ("l",), ("x",))
    _, _, first = groups_with_several(keys, labels)
    flagged = np.unique(concepts[first])
    if not len(flagged):
        return 0, []
    concepts_only = f"SELECT ?x WHERE {{ GRAPH ?g {{ ?x skos:prefLabel ?l }} {DATA} }}"  # the labels unread
    shown_rows = [row for row, _ in first_rows(ctx, concepts_only, ("x",), flagged,
                                               lambda r, _: sort_key(r["x"]), ctx.max_examples)]
    if not shown_rows:
        return len(flagged), []
    inner = f"""SELECT ?x (SAMPLE(?lang) AS ?language) (MAX(?k) AS ?most) WHERE {{
        {{ SELECT ?x ?lang (COUNT(DISTINCT ?l) AS ?k) WHERE {{ {values_terms('x', [r['x'] for r in shown_rows])}
           {where} }} GROUP BY ?x ?lang HAVING (COUNT(DISTINCT ?l) > 1) }}
    }} GROUP BY ?x"""
    found = sorted(ctx.select(inner), key=lambda r: sort_key(r["x"]))
    shown = " ".join(f"({r['x'].sparql()} {r['language'].sparql()})" for r in found)
    labels_of = {(d["x"].value, d["lang"].value): d["all"].value for d in ctx.select(
        f"""SELECT ?x ?lang (GROUP_CONCAT(DISTINCT STR(?l); separator=" | ") AS ?all) WHERE {{ {where}
        VALUES (?x ?lang) {{ {shown} }} }} GROUP BY ?x ?lang""")}
    out = []
    for r in found:
        lang = r["language"].value or "no language"
        text = labels_of[(r["x"].value, r["language"].value)]
        out.append(example(r["x"].value, f"{r['most'].value} prefLabels in {lang!r}: {text[:200]}"))
    return len(flagged), out


def ambiguous_label(ctx: Context) -> tuple[int, list[Example]]:
    # Counted from hashes of (lower-cased label, language) and concept: a GROUP BY with COUNT(DISTINCT) held a
    # hash set per label (GBs at UMLS size); the members are concatenated for the shown groups only.
    where = f"""GRAPH ?g {{ ?x skos:prefLabel ?l }} {DATA} FILTER(isIRI(?x))
        BIND(LCASE(STR(?l)) AS ?key) BIND(LANG(?l) AS ?lang)"""
    rows = f"SELECT ?x ?key ?lang WHERE {{ {where} }}"
    keys, concepts = hashed_rows(ctx, rows, ("key", "lang"), ("x",))
    flagged, counts, _ = groups_with_several(keys, concepts)
    if not len(flagged):
        return 0, []
    keys_only = f"SELECT ?key ?lang WHERE {{ {where} }}"  # the concepts unread
    leading = first_rows(ctx, keys_only, ("key", "lang"), flagged,
                         lambda r, at: (-int(counts[at]), sort_key(r["key"]), sort_key(r["lang"])),
                         ctx.max_examples)
    shown_rows = [row for row, _ in leading]
    count_of = {(row["key"], row["lang"]): int(counts[at]) for row, at in leading}
    if not shown_rows:
        return len(flagged), []
    shown = " ".join(f"({r['key'].sparql()} {r['lang'].sparql()})" for r in shown_rows)
    details = {(d["key"].value, d["lang"].value): d for d in ctx.select(
        f"""SELECT ?key ?lang (SAMPLE(STR(?l)) AS ?label) (GROUP_CONCAT(DISTINCT STR(?x); separator=" ") AS ?all)
        WHERE {{ {where} VALUES (?key ?lang) {{ {shown} }} }} GROUP BY ?key ?lang""")}
    out = []
    for r in shown_rows:
        d = details[(r["key"].value, r["lang"].value)]
        members = sorted(d["all"].value.split(" "))
        names = ", ".join(compress(m) for m in members[:5]) + (", ..." if len(members) > 5 else "")
        out.append(example(members[0], f"prefLabel {quote(d['label'].value)} is on "
                                       f"{count_of[(r['key'], r['lang'])]} concepts: {names}"))
    return len(flagged), out
