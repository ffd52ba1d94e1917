"""The tool server of both papers' tools over HTTP. Imports no verl, no ray and nothing of ``verl_ext``
or ``data_gen``: the world format and the CLI contract it shares with them are ``neos_core``'s."""
