"""Pieces both task pipelines (``data_gen.neos``, ``data_gen.modalsearch``) share: the crash-safe result log, tool
episodes recorded as trajectories, split and parquet helpers, and the statistics plots. No verl import."""
