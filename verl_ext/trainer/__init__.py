"""The Neos v1 trainer and its framework-free parts (``sampler``: adaptive mixed-group sampling)."""
