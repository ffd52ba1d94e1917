"""ModalSearch-Pipeline (ModalSearcher §3, Appendix A-C) over the embedded offline world. Free of verl imports.

Stages: the interleaved graph (``graph``: nodes, typed edges, hash table with deferred edge completion) built by
``build`` from text expansion (``relations``; ``llm`` when a model is configured), retrievability-aware visual
expansion (``visual``) and verified image entity linking (``linking``); constrained path sampling (``sampler``);
composed t->i->t relations, terminal questions by modality and backward rewriting (``questions``, with the offline
answerers of ``answerers``); the programmatic expert over the real tool server (``expert``); resumable CLI, export
and report (``cli``, ``export``; records in ``schema``). Every model-backed step has an offline default that needs
no model and says so in its name.
"""
