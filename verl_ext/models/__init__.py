"""Small models for CPU tests and development: a tiny randomly initialised Qwen2.5-VL with the real Qwen3 tokenizer.

``python -m verl_ext.models build --out DIR`` writes one; :func:`verl_ext.models.tiny_vl.build_tiny_qwen_vl` does
the same from Python.
"""
