"""The foundation every other package stands on: the formats and plumbing that the tool server, the verl plugins
(``verl_ext``), data generation (``data_gen``) and the benchmarks all share, so that imports only run downhill
(``neos_core`` <- ``tool_server`` <- ``verl_ext`` <- ``data_gen`` <- ``bench``).

- ``world``: the offline world's format (records and URLs, ``world.model``), read-only access to a built world
  (``world.store``) and the registry packages it is built from (``world.sources``); ``data_gen.world`` builds it.
- ``usage``: the command-line contract (one-line usage errors, exit code 2, flag-naming value checks).
- ``results``: the append-only, crash-safe result log of every long run.
- ``neos_tasks``: the records the Neos task pipeline writes and the walkthrough reads.
- ``keyed_dirs`` and ``entry_lock``: built artefacts and per-entry locks in a cache that several processes share.

Its own package rather than the lowest user's: the tool server is the lowest user of the world format and the CLI
contract, but ``tool_server.usage`` imported by every command line, or the registry cache under the verl plugins,
would name them by an accident of who needed them first. Standard library and pydantic only: no verl, no Ray,
nothing of the packages above it (``tests/cli/test_import_layers_on_cpu.py`` holds the rule).
"""
