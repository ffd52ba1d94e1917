"""The tool server of both papers' tools over HTTP. Imports no verl, no ray and nothing of ``verl_ext``."""
