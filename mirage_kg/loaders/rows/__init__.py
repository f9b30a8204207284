"""Row readers the loaders share: input hygiene, row picking by field values, UMLS edge blocks."""
