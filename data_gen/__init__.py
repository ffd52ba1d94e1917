"""Data generation: the embedded offline world, the KG layer and both papers' task pipelines."""
