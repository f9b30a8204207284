"""LLM-free answers from the graph: the differential diagnosis and the retriever that leads with it."""
