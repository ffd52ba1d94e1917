"""Reading one assistant turn under each protocol: calls, answers and every kind of format error."""

from __future__ import annotations

import pytest

from verl_ext.rollout.protocols import ToolCall, parse_modalsearch_turn, parse_neos_turn, parse_turn

CALL = '<tool_call>\n{"name": "TextSearch", "arguments": {"query": ["Eiffel Tower height"]}}\n</tool_call>'


def test_neos_native_call_after_reasoning():
    parsed = parse_neos_turn("<think>I should search.</think>\n" + CALL)
    assert parsed.calls == [ToolCall("TextSearch", {"query": ["Eiffel Tower height"]})]
    assert parsed.answer is None and parsed.error is None


def test_neos_plain_text_is_the_answer_without_reasoning():
    parsed = parse_neos_turn("<think>It is 330 m.</think>\n330 metres")
    assert parsed.answer == "330 metres" and parsed.calls == []


def test_neos_arguments_as_a_json_string_are_accepted():
    parsed = parse_neos_turn('<tool_call>{"name": "FetchImage", "arguments": "{\\"urls\\": [\\"u\\"]}"}</tool_call>')
    assert parsed.calls == [ToolCall("FetchImage", {"urls": ["u"]})]


@pytest.mark.parametrize(
    ("text", "error_type"),
    [
        ("<tool_call>{not json}</tool_call>", "malformed_call"),
        ('<tool_call>{"name": "TextSearch"}</tool_call>', "malformed_call"),  # no arguments
        ('<tool_call>{"name": "TextSearch", "arguments": [1]}</tool_call>', "malformed_call"),
        ('<tool_call>{"name": "TextSearch", "arguments": {}}', "malformed_call"),  # never closed
        (CALL + CALL, "too_many_calls"),
        ("<think>unfinished reasoning", "bad_format"),
        ("<think>only reasoning</think>   ", "empty_turn"),
        ("", "empty_turn"),
    ],
)
def test_neos_format_errors(text, error_type):
    parsed = parse_neos_turn(text)
    assert parsed.error is not None and parsed.error.type == error_type
    assert parsed.calls == [] and parsed.answer is None


def test_neos_parallel_calls_when_allowed():
    parsed = parse_neos_turn(CALL + CALL, max_calls=2)
    assert len(parsed.calls) == 2 and parsed.error is None


def test_modalsearch_call_and_answer():
    call = parse_modalsearch_turn(
        '<think>look it up</think><tool_call>{"name": "t2t_search", "arguments": {"query": "x"}}</tool_call>'
    )
    assert call.calls == [ToolCall("t2t_search", {"query": "x"})]
    answer = parse_modalsearch_turn("<thinking>done</thinking>\n<answer> Paris </answer>\n")
    assert answer.answer == "Paris"


@pytest.mark.parametrize(
    ("text", "error_type"),
    [
        ('<tool_call>{"name": "t2t_search", "arguments": {}}</tool_call>', "bad_format"),  # no reasoning
        ("<think> </think><answer>Paris</answer>", "bad_format"),  # empty reasoning
        ("<think>a</think><answer>Paris</answer> trailing", "bad_format"),
        ("<think>a <answer>x</answer></think><answer>Paris</answer>", "bad_format"),  # a tag hidden in reasoning
        ("<think>a</think><answer>  </answer>", "empty_turn"),
        ("<think>a</think><tool_call>{oops</tool_call>", "malformed_call"),
        ("Paris", "bad_format"),
    ],
)
def test_modalsearch_format_errors(text, error_type):
    parsed = parse_modalsearch_turn(text)
    assert parsed.error is not None and parsed.error.type == error_type


def test_parse_turn_dispatches_by_protocol():
    assert parse_turn("neos", "Paris").answer == "Paris"
    assert parse_turn("modalsearch", "Paris").error.type == "bad_format"
