"""Entity lookup and labels: a CURIE, IRI or exact label to its ``Entity``, preferred labels (from the degree
index's file where it holds them), literal values, and relations with their labels, inverse readings and templates
(named by CURIE, IRI, label or local name)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mirage_kg.errors import InputError, UnknownEntityError
from mirage_kg.graph.facts import (BACKWARD_TEMPLATE, FORWARD_TEMPLATE, INVERSE_LABEL, NON_FACT_PREDICATES, checked_iri,
                                   chunks)
from mirage_kg.graph.indexes import IndexedGraph
from mirage_kg.graph.labels import LABEL_PREDICATES, guess_inverse, pick_label, readable_name, safe_template
from mirage_kg.model.namespaces import (MKG_RELATION, OWL, RDF, RDF_TYPE, RDFS_LABEL, SKOS_ALT, SKOS_PREF, compress,
                                        expand, is_identifier)
from mirage_kg.model.records import Entity, Relation
from mirage_kg.model.terms import iri_ref, literal


class EntityGraph(IndexedGraph):
    """``IndexedGraph`` with entity lookup, labels and relations."""

    # --- entities ------------------------------------------------------------------------------------------------
    def entity(self, ref: str | Entity) -> Entity:
        """A CURIE, an IRI or an exact label -> the ``Entity``; ``UnknownEntityError`` when the graph lacks it."""
        if isinstance(ref, Entity):
            return ref
        text = ref.strip()
        if not text:
            raise UnknownEntityError(ref, "an empty name links to nothing")
        if is_identifier(text):
            iri = checked_iri(expand(text))
            on_file = self._labels_on_file([iri])  # a node the degree index holds exists: no read of the store
            if iri not in on_file and not self._exists(iri):
                raise UnknownEntityError(ref)
            if iri in self._state().non_concepts:
                raise UnknownEntityError(ref, "it is a relation or class declaration, not a concept")
            return Entity(iri, on_file[iri] or compress(iri) if iri in on_file else self.labels([iri])[iri])
        found = self.entities_named(text)
        if not found:
            raise UnknownEntityError(ref)
        return found[0]

    def entities_named(self, text: str) -> list[Entity]:
        """Concepts whose preferred label (or rdfs:label, or synonym) is exactly ``text``, best kind first."""
        labels = [literal(text), literal(text, lang="en")]
        rows = self.store.select(
            f"SELECT DISTINCT ?e ?k WHERE {{ VALUES ?l {{ {' '.join(labels)} }} "
            f"VALUES ?k {{ {iri_ref(SKOS_PREF)} {iri_ref(RDFS_LABEL)} {iri_ref(SKOS_ALT)} }} "
            f"GRAPH ?g {{ ?e ?k ?l }} FILTER(isIRI(?e)) }}")
        order = {SKOS_PREF: 0, RDFS_LABEL: 1, SKOS_ALT: 2}
        non = self._state().non_concepts
        hits = sorted({(order[r["k"].value], compress(r["e"].value), r["e"].value) for r in rows
                       if r["e"].value not in non})
        seen: list[str] = []
        for _, _, iri in hits:
            if iri not in seen:
                seen.append(iri)
        names = self.labels(seen)
        return [Entity(iri, names[iri]) for iri in seen]

    def _exists(self, iri: str) -> bool:
        if self.store.indexed:
            return (next(self.store.quads(iri), None) is not None
                    or next(self.store.quads(obj=iri), None) is not None)
        ref = iri_ref(iri)
        return self.store.ask(f"ASK {{ {{ GRAPH ?g {{ {ref} ?p ?o }} }} UNION {{ GRAPH ?g {{ ?s ?p {ref} }} }} }}")

    def labels(self, iris: Iterable[str]) -> dict[str, str]:
        """Preferred labels: skos:prefLabel (English first), else rdfs:label, else the CURIE. The embedded store's
        nodes with facts have theirs in the degree index's file once it is built (``_labels_on_file``)."""
        wanted = list(dict.fromkeys(iris))
        on_file = self._labels_on_file(wanted)
        pref: dict[str, list[tuple[str, str | None]]] = {}
        plain: dict[str, list[tuple[str, str | None]]] = {}
        if self.store.indexed:  # point lookups in the index beat one VALUES query
            for iri in wanted:
                if iri in on_file:
                    continue
                for predicate, bucket in zip(LABEL_PREDICATES, (pref, plain)):
                    found = list(self.store.literals(iri, predicate))
                    if found:
                        bucket[iri] = found
                    if iri in pref:
                        break
        else:
            for iri, values in self._literal_values(wanted, (SKOS_PREF, RDFS_LABEL)).items():
                if SKOS_PREF in values:
                    pref[iri] = values[SKOS_PREF]
                if RDFS_LABEL in values:
                    plain[iri] = values[RDFS_LABEL]
        out = {}
        for iri in wanted:
            if iri in on_file:
                out[iri] = on_file[iri] or compress(iri)
            else:
                out[iri] = pick_label(pref.get(iri) or plain.get(iri) or []) or compress(iri)
        return out

    def _labels_on_file(self, iris: Sequence[str]) -> dict[str, str | None]:
        """The labels the degree index's file holds for ``iris`` (None: no label literal), when the file was
        built for this store state and nothing was written through this store since it was opened (a raw write
        this process made is read live, as before the file); an IRI not on file is absent. A file left by an
        earlier process is opened without building one; a store with no index file gives nothing."""
        table = self._current_degree_file()
        return table.labels(iris) if table is not None else {}

    def _literal_values(self, iris: Sequence[str], keys: Sequence[str], few_quads: bool = False
                        ) -> dict[str, dict[str, list[tuple[str, str | None]]]]:
        """iri -> predicate -> [(value, language)] of the literals each IRI has for ``keys``, in any graph.
        ``few_quads``: each IRI is the subject of a few quads (a relation's declaration), read in one scan of the
        index rather than one lookup per key (each a few random reads while the store is cold); the same values
        in the same order (the index orders a subject's quads by predicate, then object)."""
        found: dict[str, dict[str, list[tuple[str, str | None]]]] = {}
        if self.store.indexed and few_quads:
            wanted = set(keys)
            for iri in dict.fromkeys(iris):
                for quad in self.store.quads(iri):
                    if quad.predicate.value in wanted and quad.object.kind == "literal":
                        found.setdefault(iri, {}).setdefault(quad.predicate.value, []).append(
                            (quad.object.value, quad.object.lang))
            return found
        if self.store.indexed:
            # point lookups: Oxigraph plans the VALUES query below as a scan of every quad of each key (every
            # label in the store: a second at 2M quads, the first anchor of a process waited for it)
            for iri in dict.fromkeys(iris):
                for key in keys:
                    values = list(self.store.literals(iri, key))
                    if values:
                        found.setdefault(iri, {})[key] = values
            return found
        for chunk in chunks(iris):
            rows = self.store.select(
                f"SELECT ?s ?k ?v WHERE {{ VALUES ?s {{ {' '.join(iri_ref(i) for i in chunk)} }} "
                f"VALUES ?k {{ {' '.join(iri_ref(k) for k in keys)} }} GRAPH ?g {{ ?s ?k ?v }} "
                f"FILTER(isLiteral(?v)) }}")
            for r in rows:
                found.setdefault(r["s"].value, {}).setdefault(r["k"].value, []).append((r["v"].value, r["v"].lang))
        return found

    # --- relations -----------------------------------------------------------------------------------------------
    def relation(self, iri: str) -> Relation:
        """A relation with its label, inverse label and templates from the schema; falls back to its label or
        local name (and a guessed inverse reading for "has X" / "X of" labels)."""
        full = checked_iri(expand(iri) if not iri.startswith(("http://", "https://", "urn:")) else iri)
        return self.relations([full])[full]

    def relations(self, iris: Iterable[str]) -> dict[str, Relation]:
        state = self._state()
        wanted = [i for i in dict.fromkeys(iris)]
        missing = [i for i in wanted if i not in state.relations]
        table = self._current_degree_file() if missing else None
        if table is not None:
            # every fact relation with the first ones asked for: each is a few point lookups in the store, cold
            # at first (~10 ms each at full size), which anchors seeing a relation for the first time each waited
            missing += [p for p in table.predicates if p not in state.relations and p not in missing]
        if missing:
            meta = self._literal_values(
                missing, (RDFS_LABEL, SKOS_PREF, INVERSE_LABEL, FORWARD_TEMPLATE, BACKWARD_TEMPLATE), few_quads=True)
            for iri in missing:
                m = meta.get(iri, {})
                label = pick_label(m.get(RDFS_LABEL) or m.get(SKOS_PREF) or []) or readable_name(iri)
                inverse = pick_label(m.get(INVERSE_LABEL, [])) or guess_inverse(label)
                state.relations[iri] = Relation(
                    iri, label, inverse,
                    safe_template(pick_label(m.get(FORWARD_TEMPLATE, []))),
                    safe_template(pick_label(m.get(BACKWARD_TEMPLATE, []))),
                )
        return {i: state.relations[i] for i in wanted}

    def resolve_relations(self, relations: Sequence[str] | None) -> frozenset[str] | None:
        """Relation CURIEs, IRIs, labels ("has symptom") or local names ("has_symptom") -> their IRIs (None: all);
        ``InputError`` naming one the graph lacks."""
        return self._resolve_relations(relations)

    def _resolve_relations(self, relations: Sequence[str] | None) -> frozenset[str] | None:
        """CURIEs, IRIs, labels ("has symptom") or local names ("has_symptom") -> relation IRIs."""
        if relations is None:
            return None
        if isinstance(relations, str):
            relations = [relations]
        out = set()
        for rel in relations:
            if is_identifier(rel):
                out.add(checked_iri(expand(rel)))
                continue
            known = self._declared_relations()
            key = " ".join(rel.replace("_", " ").lower().split())
            if key not in known:
                names = ", ".join(sorted({compress(v) for v in known.values()}))
                raise InputError(f"unknown relation {rel!r}; give a CURIE or IRI, or one of: {names}")
            out.add(known[key])
        return frozenset(out)

    def _declared_relations(self) -> dict[str, str]:
        state = self._state()
        if state.declared_relations is None:
            rows = self.store.select(
                f"SELECT DISTINCT ?r WHERE {{ {{ GRAPH ?g {{ ?r {iri_ref(RDF_TYPE)} ?t }} "
                f"VALUES ?t {{ {iri_ref(MKG_RELATION)} {iri_ref(OWL + 'ObjectProperty')} "
                f"{iri_ref(RDF + 'Property')} }} }} "
                f"UNION {{ SELECT DISTINCT ?r WHERE {{ GRAPH ?g {{ ?s ?r ?o }} FILTER(isIRI(?o)) }} LIMIT 5000 }} }}")
            iris = sorted({r["r"].value for r in rows} - NON_FACT_PREDICATES)
            table: dict[str, str] = {}
            for iri, rel in sorted(self.relations(iris).items(), reverse=True):
                for name in (rel.label, readable_name(iri), compress(iri).split(":", 1)[-1]):
                    table[" ".join(name.replace("_", " ").lower().split())] = iri
            state.declared_relations = table
        return state.declared_relations
