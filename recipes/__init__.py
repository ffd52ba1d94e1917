"""Hydra recipes (``recipe/*.yaml``) and the tool/agent-loop configs they point to, shipped as package data."""
