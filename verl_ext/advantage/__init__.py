"""verl adapters for turn credit: the ``neos_turn_credit`` estimator, its per-row inputs, and the trainer mixin.

``verl_ext.advantage.estimator`` registers the estimator (importing it imports verl); ``inputs`` carries the
per-row labels to it; ``trainer_mixin`` fills ``inputs`` from TransferQueue in the v1 trainer.
"""
