"""The terms every loader writes, serialised for N-Triples once, so that each line is a plain string join."""

from mirage_kg.model.namespaces import (
                                  MKG,
                                  MKG_CONCEPT,
                                  MKG_RELATION,
                                  OWL,
                                  RDF_TYPE,
                                  RDFS_LABEL,
                                  RDFS_SUBCLASS,
                                  SKOS_ALT,
                                  SKOS_DEFINITION,
                                  SKOS_PREF,
)
from mirage_kg.model.terms import iri_ref

TYPE = iri_ref(RDF_TYPE)
CONCEPT = iri_ref(MKG_CONCEPT)
RELATION = iri_ref(MKG_RELATION)
OBJECT_PROPERTY = iri_ref(OWL + "ObjectProperty")
LABEL = iri_ref(RDFS_LABEL)
PREF = iri_ref(SKOS_PREF)
ALT = iri_ref(SKOS_ALT)
DEFINITION = iri_ref(SKOS_DEFINITION)
SUBCLASS = iri_ref(RDFS_SUBCLASS)
ACTIVE = iri_ref(MKG + "active")
SOURCE_VERSION = iri_ref(MKG + "sourceVersion")
