"""Tool-server access: ``client`` (plain aiohttp, no verl) and ``verl_tools`` (stock verl ``BaseTool`` wrappers).

Import the submodule you need; this package imports neither, so the client stays usable without verl.
"""
