"""Neos evidence-dependent task synthesis (Neos §3.3, App. A) over the embedded offline world. Free of verl imports.

Stages: seeds -> distinguishing-set DAGs -> structures with visual checkpoints -> identifiability (``synth``) ->
blind visual grounding (``observer``) -> verbalization + step-to-span coverage (``verbalize``) -> shortcut probes
and the offline expert as real tool-server episodes (``agents``) -> append-only results (``store``) -> verl parquet,
SFT JSONL and splits (``export``). ``python -m data_gen neos`` runs it all (``cli``).
"""
