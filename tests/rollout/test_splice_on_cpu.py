"""Merges of the stream's tail, applied in place, give what verl's whole-stream merges and alignment give."""

from __future__ import annotations

import pytest
from verl.utils.tokenizer.continuous_token import MergeResult
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from verl_ext.models.tiny_vl import HF_MODEL_TYPE
from verl_ext.rollout.splice import TAIL, merge_tail
from verl_ext.rollout.tokens import fast_text_renders

SYSTEM = {"role": "system", "content": "rules"}
QUESTION = {"role": "user", "content": "Which flag?"}
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"type": "function", "function": {"name": "TextSearch", "arguments": {"query": ["red flag"]}}}],
}


@pytest.fixture(scope="module")
def builder(tiny_vl_processor):
    return fast_text_renders(
        create_continuous_token_builder(
            tiny_vl_processor.tokenizer, hf_model_type=HF_MODEL_TYPE, processor=tiny_vl_processor
        )
    )


def verl_merge(builder, ids, mask, logprobs, merge, assistant_logprobs=None):
    result = merge(ids)
    new_mask, new_logprobs = builder.align_response_metadata(
        result, mask, logprobs, assistant_logprobs=assistant_logprobs
    )
    return result.token_ids, new_mask, new_logprobs


def spliced(builder, ids, mask, logprobs, merge, assistant_logprobs=None):
    ids, mask, logprobs = list(ids), list(mask), None if logprobs is None else list(logprobs)
    splice = merge_tail(
        builder, ids, merge, logprobs=logprobs is not None, assistant_logprobs=assistant_logprobs
    )
    expected_length = splice.mask_length(mask)
    splice.apply(ids, mask, logprobs)
    assert len(mask) == expected_length
    return ids, mask, logprobs


@pytest.mark.parametrize("response_tokens", [0, 5, 3 * TAIL])  # shorter and longer than the tail
@pytest.mark.parametrize("tracked", [True, False])
def test_an_episode_of_merges_equals_verls(builder, tiny_vl_processor, response_tokens, tracked):
    """Assistant turn (ending in <|im_end|>, after which Qwen's builder inserts a newline), observation, assistant
    turn: the same stream, mask and log-probs at every step."""
    tokenizer = tiny_vl_processor.tokenizer
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    messages = [SYSTEM, QUESTION]
    prompt = builder.build_initial_tokens(messages)
    filler = tokenizer.encode("word " * response_tokens)[:response_tokens]
    state = {
        "verl": (prompt + filler, [0] * len(filler), [0.0] * len(filler) if tracked else None),
        "ours": (prompt + filler, [0] * len(filler), [0.0] * len(filler) if tracked else None),
    }
    generated = tokenizer.encode('<tool_call>\n{"name": "TextSearch"}\n</tool_call>') + [im_end]
    generated_logprobs = [-0.25] * len(generated) if tracked else None
    observation = {"role": "tool", "content": "1. Flag of Japan\n2. Flag of Canada"}

    def assistant(runtime):
        return builder.merge_assistant_tokens(runtime, generated)

    def context(runtime):
        return builder.merge_context_tokens(messages + [CALL], messages + [CALL, observation], runtime)

    for merge, extra in ((assistant, generated_logprobs), (context, None), (assistant, generated_logprobs)):
        state["verl"] = verl_merge(builder, *state["verl"], merge, extra)
        state["ours"] = spliced(builder, *state["ours"], merge, extra)
        assert state["ours"] == state["verl"]
    ids, mask, _ = state["ours"]
    newline = tokenizer.encode("\n")[0]
    # The observation's merge put one newline after <|im_end|> (mask 0), then the observation (mask 0).
    end_of_first_turn = len(prompt) + len(filler) + len(generated)
    assert ids[end_of_first_turn] == newline and mask[end_of_first_turn - len(prompt)] == 0
    assert sum(mask) == 2 * len(generated)


def test_dropped_prefix_tokens_leave_the_stream_mask_and_log_probs(builder):
    """A builder edit that drops stale prefix tokens (as Gemma's and DeepSeek's do): hand-computed result."""
    ids = list(range(100))
    mask, logprobs = [1] * 30, [-1.0] * 30

    def drop_two_append_three(runtime):
        return MergeResult(token_ids=runtime[:-2] + [7, 8, 9], appended_token_count=3, removed_prefix_token_count=2)

    ids_out, mask_out, logprobs_out = spliced(builder, ids, mask, logprobs, drop_two_append_three)
    assert ids_out == list(range(98)) + [7, 8, 9]
    assert mask_out == [1] * 28 + [0, 0, 0]
    assert logprobs_out == [-1.0] * 28 + [0.0, 0.0, 0.0]
    assert (ids_out, mask_out, logprobs_out) == verl_merge(builder, ids, mask, logprobs, drop_two_append_three)
