"""Literal checks: an ill-typed literal, a value outside its property's ``xsd:`` range, or a label that is not text
(``literal-datatype``), each queried only on the predicates the profile shows can have one."""

from __future__ import annotations

from mirage_kg.model.namespaces import MKG, RDF, RDFS, SKOS, XSD, compress
from mirage_kg.model.terms import iri_ref
from mirage_kg.validation.report import Example
from mirage_kg.validation.structural.context import Context
from mirage_kg.validation.structural.queries import DATA, example, quote, values

# Properties whose values are text: xsd:string or rdf:langString, nothing else.
TEXT_PROPERTIES = tuple(SKOS + p for p in ("prefLabel", "altLabel", "hiddenLabel", "definition")) + (
    RDFS + "label", RDFS + "comment", MKG + "inverseLabel", MKG + "forwardTemplate", MKG + "backwardTemplate")
# xsd datatypes whose lexical forms SPARQL can check by casting (derived integer types are checked as integers).
_INTEGER_TYPES = ("integer", "int", "long", "short", "byte", "nonNegativeInteger", "positiveInteger",
                  "nonPositiveInteger", "negativeInteger", "unsignedLong", "unsignedInt", "unsignedShort",
                  "unsignedByte")
_CASTS = {"boolean": "boolean", "decimal": "decimal", "double": "double", "float": "float", "date": "date",
          "dateTime": "dateTime", "time": "time", **{t: "integer" for t in _INTEGER_TYPES}}


def literal_datatype(ctx: Context) -> tuple[int, list[Example]]:
    """Three kinds of wrong literal, each queried only on the predicates the profile shows can have one."""
    text = {XSD + "string", RDF + "langString"}
    branches = []
    castable = [(p, dt) for p, kinds in ctx.profile.items() for dt in kinds
                if dt is not None and dt.startswith(XSD) and dt[len(XSD):] in _CASTS]
    if castable:  # ill-typed: the lexical form does not cast to its own datatype
        pairs = " ".join(f"({iri_ref(p)} {iri_ref(dt)})" for p, dt in castable)
        casts = " ".join(f"IF(?dt = xsd:{dt}, xsd:{cast}(STR(?o)), " for dt, cast in _CASTS.items())
        branches.append(f"""SELECT ?s ?p ?o ("ill" AS ?why) ?dt WHERE {{ VALUES (?p ?dt) {{ {pairs} }}
            GRAPH ?g {{ ?s ?p ?o }} {DATA} FILTER(DATATYPE(?o) = ?dt)
            BIND({casts}"unreachable"{')' * len(_CASTS)} AS ?ok) FILTER(!BOUND(?ok)) }}""")
    ranges = ctx.select(f"""SELECT DISTINCT ?p ?r WHERE {{ ?p rdfs:range ?r
        FILTER(isIRI(?r) && STRSTARTS(STR(?r), "{XSD}")) }}""")
    off = []
    for r in ranges:
        allowed = text if r["r"].value == XSD + "string" else {r["r"].value}
        if any(dt not in allowed for dt in ctx.profile.get(r["p"].value, {})):
            off.append(f"({iri_ref(r['p'].value)} {iri_ref(r['r'].value)})")
    if off:  # a value outside the property's declared xsd range (an IRI, or another datatype)
        branches.append(f"""SELECT ?s ?p ?o ("range" AS ?why) ?dt WHERE {{ VALUES (?p ?dt) {{ {' '.join(off)} }}
            GRAPH ?g {{ ?s ?p ?o }} {DATA} FILTER(!isLiteral(?o)
                || (?dt = xsd:string && LANG(?o) = "" && DATATYPE(?o) NOT IN (xsd:string, rdf:langString))
                || (?dt != xsd:string && (LANG(?o) != "" || DATATYPE(?o) != ?dt))) }}""")
    not_text = [p for p in TEXT_PROPERTIES if any(dt not in text for dt in ctx.profile.get(p, {}))]
    if not_text:  # a label, definition or template that is not a string
        branches.append(f"""SELECT ?s ?p ?o ("text" AS ?why) (xsd:string AS ?dt) WHERE {{ {values('p', not_text)}
            GRAPH ?g {{ ?s ?p ?o }} {DATA}
            FILTER(!isLiteral(?o) || (LANG(?o) = "" && DATATYPE(?o) NOT IN (xsd:string, rdf:langString)))
            }}""")
    if not branches:
        return 0, []
    inner = f"SELECT DISTINCT ?s ?p ?o ?why ?dt WHERE {{ {' UNION '.join(f'{{ {b} }}' for b in branches)} }}"
    total, rows = ctx.count_and_examples(inner, ["s", "p", "o"])
    out = []
    for r in rows:
        obj = r["o"]
        shown = quote(obj.value) if obj.kind == "literal" else compress(obj.value)
        found = compress(obj.datatype) if obj.kind == "literal" and obj.datatype else (
            "rdf:langString" if obj.lang else ("xsd:string" if obj.kind == "literal" else "an IRI"))
        if r["why"].value == "ill":
            detail = f"{compress(r['p'].value)} {shown}: not a valid {compress(r['dt'].value)}"
        elif r["why"].value == "text":
            detail = f"{compress(r['p'].value)} {shown}: {found} where a string or language-tagged string is expected"
        else:
            detail = f"{compress(r['p'].value)} {shown}: {found} where the range is {compress(r['dt'].value)}"
        out.append(example(r["s"].value, detail))
    return total, out
