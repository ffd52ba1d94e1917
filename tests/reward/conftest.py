"""Shared fixtures for reward tests: a real local OpenAI-compatible judge server and a small real tokenizer."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PLAIN_ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


@asynccontextmanager
async def judge_server(slow_s: float = 1.0) -> AsyncIterator[tuple[str, Counter]]:
    """Chat-completions server on 127.0.0.1; the request's ``model`` picks the behaviour:
    ``yes``/``no`` (well-formed verdicts), ``malformed``, ``slow`` (answers after ``slow_s``), ``flaky`` (malformed
    once, then yes), ``http500``. Yields the base URL and a per-model request counter."""
    calls: Counter = Counter()

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        model = body["model"]
        calls[model] += 1
        assert body["messages"][1]["content"].startswith("[Question]")
        if model == "http500":
            return web.Response(status=500)
        if model == "slow":
            await asyncio.sleep(slow_s)
        content = {
            "yes": "reasoning: the response names the reference.\ncorrect: yes",
            "no": "reasoning: a different entity.\ncorrect: no",
            "malformed": "I believe this is probably right.",
            "slow": "reasoning: late\ncorrect: yes",
            "flaky": "correct: maybe" if calls[model] == 1 else "reasoning: ok\ncorrect: yes",
        }[model]
        return web.json_response({"choices": [{"message": {"role": "assistant", "content": content}}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with TestServer(app, host="127.0.0.1") as server:
        yield str(server.make_url("/v1")), calls


def _trained_tokenizer():
    """A byte-level BPE trained in-process on a few lines, with Qwen's chat markers as special/added tokens:
    real ``PreTrainedTokenizerFast`` decoding, no files needed."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["The answer is Paris.", "search the tower height", '{"name": "t2t_search"}'], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.add_tokens(PLAIN_ADDED)
    return fast


@pytest.fixture(scope="session")
def tokenizer():
    """``NEOS_TEST_TOKENIZER`` (a tokenizer.json file, e.g. Qwen3's) if set, else a tokenizer trained in-process."""
    path = os.environ.get("NEOS_TEST_TOKENIZER")
    if not path:
        return _trained_tokenizer()
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=path)
