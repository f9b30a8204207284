"""Identifier checks: one ``skos:notation`` code carried by several IRIs (``duplicate-id``)."""

from __future__ import annotations

from mirage_kg.model.namespaces import compress
from mirage_kg.validation.compact import groups_with_several
from mirage_kg.validation.report import Example
from mirage_kg.validation.structural.context import Context
from mirage_kg.validation.structural.grouping import first_rows, hashed_rows
from mirage_kg.validation.structural.queries import DATA, example, quote, sort_key, values_terms


def duplicate_id(ctx: Context) -> tuple[int, list[Example]]:
    # as ambiguous_label: counted from hashes, the members and graphs concatenated for the shown codes only
    where = f"GRAPH ?g {{ ?x skos:notation ?code }} {DATA} FILTER(isIRI(?x))"
    rows = f"SELECT ?x ?code WHERE {{ {where} }}"
    codes, carriers = hashed_rows(ctx, rows, ("code",), ("x",))
    flagged, counts, _ = groups_with_several(codes, carriers)
    if not len(flagged):
        return 0, []
    codes_only = f"SELECT ?code WHERE {{ {where} }}"  # the carriers unread
    leading = first_rows(ctx, codes_only, ("code",), flagged,
                         lambda r, at: (-int(counts[at]), sort_key(r["code"])), ctx.max_examples)
    shown_rows = [row for row, _ in leading]
    count_at = [int(counts[at]) for _, at in leading]
    if not shown_rows:
        return len(flagged), []
    details = {d["code"]: d for d in ctx.select(
        f"""SELECT ?code (GROUP_CONCAT(DISTINCT STR(?x); separator=" ") AS ?all)
        (GROUP_CONCAT(DISTINCT STR(?g); separator=" ") AS ?graphs) WHERE {{ {values_terms('code', [r['code'] for r in shown_rows])}
        {where} }} GROUP BY ?code""")}
    out = []
    for r, k in zip(shown_rows, count_at):
        d = details[r["code"]]
        members = sorted(d["all"].value.split(" "))
        graphs = sorted(compress(g) for g in d["graphs"].value.split(" "))
        out.append(example(members[0], f"notation {quote(r['code'].value)} is on {k} IRIs: "
                                       f"{', '.join(compress(m) for m in members[:5])} (graphs: {', '.join(graphs)})"))
    return len(flagged), out
