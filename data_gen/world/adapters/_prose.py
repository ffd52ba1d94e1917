"""Small helpers for writing facts paragraphs in plain English."""

from __future__ import annotations


def join_list(items: list[str]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    if not items:
        raise ValueError("join_list needs at least one item")
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
