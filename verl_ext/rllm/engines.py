"""How an rLLM rollout engine sends our messages to the model, and whether our images get there (no rLLM import).

rLLM's engines take one message list but send it one of two ways:

- ``chat``: ``OpenAIEngine`` without a tokenizer calls the chat completions endpoint, where the server renders the
  prompt, so the conversation must be valid OpenAI chat: native calls answered by ``tool`` messages carrying their
  ids, images only on ``user`` messages (the engine turns a message's ``images`` into ``image_url`` parts). Calls come
  back as OpenAI objects, parsed out of the text the engine returns.
- ``parser``: the engine renders the messages with rLLM's chat parser itself (``VerlEngine``; ``OpenAIEngine`` with
  a tokenizer, which then calls the text completions endpoint) and returns the raw completion text. Images reach the
  model only through the engine's processor (``VerlEngine(processor=...)``): a completions request carries text only.

Our episodes show question and tool images, so an engine on the parser route without a processor is refused before
any episode starts, instead of rolling out on image placeholders with no pixels behind them.
"""

from __future__ import annotations

from typing import Any, Literal

Route = Literal["chat", "parser"]


def message_route(engine: Any) -> Route:
    """``engine``'s route; a one-line ``ValueError`` for an engine that would leave our images behind."""
    if getattr(engine, "_use_chat_completions", False):  # OpenAIEngine's switch: set when it has no tokenizer
        return "chat"
    if getattr(engine, "processor", None) is None:
        raise ValueError(
            f"{type(engine).__name__} renders prompts as text with no processor for images, so question and tool "
            "images would never reach the model: use OpenAIEngine without a tokenizer (chat completions) or an "
            "engine with a processor, e.g. VerlEngine(processor=...)"
        )
    return "parser"
