"""Final-answer extraction for the Neos and ModalSearcher protocols, from a decoded multi-turn response (no verl).

A multi-turn response is the assistant's generations interleaved with the tool-response turns the agent loop
appended (ChatML: ``<|im_start|>user\\n<tool_response>...<|im_end|>\\n<|im_start|>assistant\\n``). It must be
decoded with special tokens kept, or the turn boundaries are lost; ``split_assistant_turns`` then recovers the
assistant turns and strips the special tokens it is given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from verl_ext.rollout.protocols import parse_modalsearch_turn

_CHATML_START = "<|im_start|>"
_TOOL_RESPONSE = re.compile(r"<tool_response>.*?</tool_response>", re.DOTALL)
_THINK = re.compile(r"<(think|thinking)>.*?</\1>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _strip_special(text: str, special_tokens: Iterable[str]) -> str:
    for token in sorted(special_tokens, key=len, reverse=True):
        if token:
            text = text.replace(token, "")
    return text.strip()


def split_assistant_turns(response: str, special_tokens: Iterable[str] = ()) -> list[str]:
    """Assistant turns of a decoded response, in order; tool/user turns dropped, special tokens removed.

    With ChatML markers the text before the first marker is the first assistant turn (the prompt ended with the
    assistant header) and every ``<|im_start|>assistant`` segment is another. Without them, ``<tool_response>``
    blocks are the separators.
    """
    specials = tuple(special_tokens)
    if _CHATML_START in response:
        segments = response.split(_CHATML_START)
        turns = [segments[0]]
        turns += [seg[len("assistant") :] for seg in segments[1:] if seg.startswith("assistant")]
    else:
        turns = _TOOL_RESPONSE.split(response)
    cleaned = (_strip_special(turn, specials) for turn in turns)
    return [turn for turn in cleaned if turn]


def neos_final_text(turns: list[str]) -> str:
    """Neos: the answer is the final assistant turn's plain text, reasoning removed.

    A final turn that still calls a tool means the rollout stopped mid-search (e.g. max turns): no answer. An
    unclosed reasoning block means generation was cut inside it: no answer either.
    """
    if not turns or "<tool_call>" in turns[-1]:
        return ""
    text = _THINK.sub("", turns[-1])
    if "<think>" in text or "<thinking>" in text:
        return ""
    return text.replace("</think>", "").replace("</thinking>", "").strip()


def modalsearcher_answer(turns: list[str]) -> str:
    """ModalSearcher: the content of the last ``<answer>`` block of the final assistant turn ('' if none)."""
    if not turns:
        return ""
    answers = _ANSWER.findall(turns[-1])
    return answers[-1].strip() if answers else ""


def modalsearcher_turn_ok(turn: str, *, final: bool) -> bool:
    """One turn follows the inference prompt (the rollout's own parser decides: reasoning block, then exactly one
    tool call with a ``name`` and an ``arguments`` object, or one non-empty answer); an answer ends the episode, so
    it is allowed only in the final turn. A tool call is allowed in any turn, the final one included: a rollout cut at
    the turn limit ends on a call."""
    parsed = parse_modalsearch_turn(turn)
    if parsed.error is not None:
        return False
    return final or parsed.answer is None


def modalsearcher_format_ok(turns: list[str]) -> bool:
    """Format reward r_fmt (ModalSearcher paper, Section 3.3, the reward r(τ)): 1 when all tool calls follow the
    predefined interaction format. A final answer is not required: a well-formed rollout cut at the turn limit keeps
    its format reward (it has no answer, so r_acc is 0 and its reward is 0.1). A rollout with no turn has no
    well-formed call and earns 0."""
    return bool(turns) and all(modalsearcher_turn_ok(turn, final=i == len(turns) - 1) for i, turn in enumerate(turns))
