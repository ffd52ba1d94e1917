"""Small models for CPU tests and development: a tiny randomly initialised Qwen2.5-VL with the real Qwen3 tokenizer;
and released architectures without weights, for GPU benchmarks at real shapes.

``python -m verl_ext.models build --out DIR`` writes the tiny one (:func:`verl_ext.models.tiny_vl.build_tiny_qwen_vl`
from Python); ``python -m verl_ext.models shape --like qwen3-vl-8b --out DIR`` a real shape
(:mod:`verl_ext.models.shapes`).
"""
