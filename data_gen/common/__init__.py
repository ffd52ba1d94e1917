"""Pieces both task pipelines (``data_gen.neos``, ``data_gen.modalsearch``) share: tool episodes recorded as
trajectories, split and parquet helpers, and the statistics plots (the result log is ``neos_core.results``). No verl
import."""
