"""Entity linking, one module a job, each importing only those before it: ``text`` (folding, singulars, acronyms,
tokens), ``embedder`` (the embedding model and the label embeddings' build), ``vectors`` (the nearest-neighbour
index), ``packed`` (the in-memory lookup and its deletion variants), ``label_tables`` (the label index's SQLite
tables), ``label_index`` (``LabelIndex``), ``linker`` (``Linker``, ``Mention``, ``Candidate``)."""
