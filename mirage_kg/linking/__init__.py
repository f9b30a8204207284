"""Entity linking: text folding, the label index, the embedder and its vectors, the Linker."""
