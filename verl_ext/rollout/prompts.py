"""Protocol prompts, in our own words: the rules of Neos' and ModalSearcher's agents, not the papers' sentences.

Neos passes its tools natively (the chat template lists them); ModalSearcher's ReAct format lists them in the
system prompt as JSON, because the model writes calls as text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from verl_ext.rollout.protocols import Protocol

_NEOS_SYSTEM = (
    "You answer hard questions about images by gathering evidence with tools. Each turn, either make exactly one "
    "tool call or, when the evidence settles it, reply with the final answer as plain text and no tool call. "
    "The question image is img_1; every image that FetchImage or CropImage loads gets the next id (img_2, img_3, "
    "...) and stays usable for the rest of the episode. Only FetchImage and CropImage show you pixels; the other "
    "tools describe what they found in text. Crop boxes are [left, top, right, bottom] in 0-1000 coordinates."
)

_MODALSEARCH_SYSTEM = (
    "You answer questions by searching text and images. Every turn, first think inside <think>...</think>, then "
    'either call one tool as <tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call> or give the final '
    "answer as <answer>...</answer>. Copy page_ and image_ ids exactly as tools print them. Available tools:\n"
    "{tools}"
)

_FINAL_TURN = {
    "neos": (
        "Tools are now disabled. Reply with your final answer: the most concise answer that the evidence you "
        "collected supports best, as plain text."
    ),
    "modalsearch": (
        "Tools are now disabled. Think briefly, then give the most concise answer that the evidence you collected "
        "supports best, inside <answer>...</answer>."
    ),
}


def system_prompt(protocol: Protocol, tool_schemas: Sequence[dict[str, Any]]) -> str:
    if protocol == "neos":
        return _NEOS_SYSTEM
    listing = "\n".join(json.dumps(schema["function"], ensure_ascii=False) for schema in tool_schemas)
    return _MODALSEARCH_SYSTEM.format(tools=listing)


def final_turn_instruction(protocol: Protocol) -> str:
    return _FINAL_TURN[protocol]


def user_prompt(question: str, n_images: int) -> list[dict[str, str]]:
    """The user turn of a verl RL row (``prompt``): one ``<image>`` placeholder per input image, then the question."""
    return [{"role": "user", "content": "<image>\n" * n_images + question}]
