"""The data model: the records the graph API returns, CURIEs and IRIs, RDF terms, clinical kinds."""
