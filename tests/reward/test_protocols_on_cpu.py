"""Turn splitting, Neos final text, and ModalSearcher answer extraction and format check."""

from __future__ import annotations

import pytest

from verl_ext.reward.protocols import (
    modalsearcher_answer,
    modalsearcher_format_ok,
    modalsearcher_turn_ok,
    neos_final_text,
    split_assistant_turns,
)

SPECIAL = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
CALL = '<thinking>Need the tower height.</thinking>\n<tool_call>{"name": "t2t_search", "arguments": {"query": "x"}}</tool_call>'
ANSWER = "<thinking>The page says 330 m.</thinking><answer>330 metres</answer>"
TOOL_TURN = "<|im_end|>\n<|im_start|>user\n<tool_response>\nresult\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def test_split_chatml_turns() -> None:
    response = CALL + TOOL_TURN + ANSWER + "<|im_end|><|endoftext|>"
    assert split_assistant_turns(response, SPECIAL) == [CALL, ANSWER]


def test_split_without_chatml_uses_tool_responses() -> None:
    response = CALL + "\n<tool_response>r</tool_response>\n" + ANSWER
    assert split_assistant_turns(response) == [CALL, ANSWER]


def test_neos_final_text() -> None:
    assert neos_final_text(["<think>hmm</think>\n\nThe answer is Paris."]) == "The answer is Paris."
    assert neos_final_text([CALL]) == ""  # stopped mid-search
    assert neos_final_text(["<think>cut off before the end"]) == ""
    assert neos_final_text([]) == ""


def test_modalsearcher_answer() -> None:
    assert modalsearcher_answer([CALL, ANSWER]) == "330 metres"
    assert modalsearcher_answer([ANSWER, CALL]) == ""  # only the final turn counts
    assert modalsearcher_answer(["<answer>a</answer> <answer> b </answer>"]) == "b"


@pytest.mark.parametrize(
    ("turns", "ok"),
    [
        ([CALL, CALL, ANSWER], True),
        ([ANSWER], True),
        ([ANSWER.replace("thinking", "think")], True),  # Qwen3-style reasoning tags
        ([CALL], True),  # cut at the turn limit on a well-formed call: no answer is needed
        ([CALL, CALL], True),
        ([CALL, "<thinking>r</thinking><tool_call>{not json}</tool_call>"], False),  # cut on a malformed call
        ([CALL, '<thinking>r</thinking><tool_call>{"name": "t2t_search", "argu'], False),  # cut mid-call
        ([CALL, ANSWER, ANSWER], False),  # answer before the final turn
        (["<answer>330</answer>"], False),  # no reasoning
        (["<thinking> </thinking><answer>330</answer>"], False),  # empty reasoning
        (["<thinking>r</thinking><answer> </answer>"], False),  # empty answer
        (["<thinking>r</thinking><answer>330</answer> trailing words"], False),
        (["preamble <thinking>r</thinking><answer>330</answer>"], False),
        ([CALL + CALL[CALL.index("<tool_call>") :], ANSWER], False),  # two tool calls in one turn
        ([CALL.replace("</tool_call>", "</tool_call><answer>x</answer>"), ANSWER], False),  # call and answer
        (["<thinking>r</thinking><tool_call>{not json}</tool_call>", ANSWER], False),
        (['<thinking>r</thinking><tool_call>{"name": "t2t_search"}</tool_call>', ANSWER], False),  # no arguments
        (['<thinking>r</thinking><tool_call>{"name": "t", "arguments": "q"}</tool_call>', ANSWER], False),
        (["<thinking>r <answer>x</answer></thinking><answer>330</answer>"], False),  # tag hidden in reasoning
        ([], False),
    ],
)
def test_modalsearcher_format(turns: list[str], ok: bool) -> None:
    assert modalsearcher_format_ok(turns) is ok


def test_turn_check_depends_on_position() -> None:
    assert modalsearcher_turn_ok(CALL, final=False) and modalsearcher_turn_ok(CALL, final=True)
    assert modalsearcher_turn_ok(ANSWER, final=True) and not modalsearcher_turn_ok(ANSWER, final=False)
