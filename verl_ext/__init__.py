"""verl plugins for multimodal deep-search agents (Neos, ModalSearcher).

Importing this package is cheap and imports no verl; ``verl_ext.plugin`` is what verl loads on ``import verl``.
"""
