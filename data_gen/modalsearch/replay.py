"""Replays an expert trajectory against what its policy would have seen: the question, then each observation in
turn. A step the policy could not have taken is unexplained knowledge, and the SFT data would teach it to guess:

- a ``read_url`` of a URL (or resource id) that neither the question nor an earlier observation shows;
- an ``i2i_search`` of an image that is neither a question image (``img_1`` ...) nor a shown or loaded one;
- a ``t2t_search`` or ``t2i_search`` query with a word the question and earlier observations never used;
- reasoning that names an entity (a world label, as written) before the question or an observation named it;
- an answer no observation states, unless it was read from pixels an earlier call loaded (an image question).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Any

from data_gen.common.episode import found

_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_WORD = re.compile(r"\w{3,}")


def unexplained(turns: Iterable[dict[str, Any]], question: str, names: Collection[str],
                question_images: int = 1) -> list[str]:
    """Each step of ``turns`` (a ``TrajectoryRecord``'s turns as JSON) that the question and the observations
    before it do not explain, as "turn N: why"; ``names``: the entity names reasoning is checked for."""
    known = question + "\n" + " ".join(f"img_{i + 1}" for i in range(question_images))
    pixels = False
    problems = []
    for turn in turns:
        index, text = turn["index"], turn["text"]
        reasoning = " ".join(_THINK.findall(text))
        known_lower = known.lower()
        early = sorted(n for n in names if n in reasoning and _named(n, reasoning) and n.lower() not in known_lower)
        problems += [f"turn {index}: the reasoning names {n!r} before anything showed it" for n in early]
        for call in turn.get("calls", []):
            why = _call_problem(call["tool_name"], call["arguments"], known)
            if why:
                problems.append(f"turn {index}: {why}")
            known += "\n" + (call.get("observation") or "")
            pixels |= bool(call.get("images_added"))
        answer = _ANSWER.search(text)
        if answer and turn.get("outcome") == "answer" and not pixels and not found(answer.group(1).strip(), known):
            problems.append(f"turn {index}: the answer {answer.group(1).strip()!r} is in no observation")
    return problems


def _named(name: str, text: str) -> bool:
    """``name`` as a whole word, written as given: a name, not the word ("Black" the entity, "black" the colour)."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def _call_problem(tool: str, arguments: dict[str, Any], known: str) -> str | None:
    if tool == "read_url":
        url = str(arguments.get("url", ""))
        return None if url and url in known else f"read_url of {url!r}, which nothing showed"
    if tool == "i2i_search":
        image = str(arguments.get("image", ""))
        return None if image and image in known else f"i2i_search of {image!r}, which nothing showed"
    if tool in ("t2t_search", "t2i_search"):
        query = str(arguments.get("query", ""))
        new = [w for w in _WORD.findall(query) if not found(w, known)]
        return f"{tool} query {query!r} uses {new}, which nothing said" if new else None
    return f"unknown tool {tool!r}"
