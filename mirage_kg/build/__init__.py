"""Building a KG beyond one loader: the default KG, cross-source label matches."""
