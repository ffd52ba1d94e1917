"""Evaluation harness and analytics: ``python -m verl_ext.eval`` (see ``__main__``)."""
