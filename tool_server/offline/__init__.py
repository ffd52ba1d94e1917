"""Backends over the embedded offline world: BM25 text/image search, reverse image search, page and image access."""
