"""A faster text path for verl's VL Continuous Token builders: same tokens, a fraction of the cost per turn.

verl's VL builders render every incremental observation twice through the processor (a synthetic
system+user+assistant prefix, then prefix + the new messages) and diff the ids. For a message list without media
the processor does nothing but tokenize, yet it pays for tensor conversion and a placeholder check that walks the
ids one tensor at a time, and the constant synthetic prefix (with the tool schemas in its system block) is rendered
and tokenized again on every turn. ``fast_text_renders`` keeps the builder and its boundary logic and changes only
how a media-free render is done: the chat template to text, the processor's own tokenizer (its Rust encoder) to
ids, memoised per process.

Identical by construction (the processor tokenizes media-free text with that same tokenizer), and checked: the first
media-free render of each builder class and conversation shape is done both ways, and the fast path is dropped for
that shape if they differ.

Second, the incremental renders (``render_delta_token_id``: synthetic prefix vs prefix + new messages) are done
without the tool schemas. Chat templates put the tool list in the system block, which both renders share and the
diff drops, so the delta is the same while the text to render and tokenize shrinks from thousands of tokens to the
observation. Checked the same way, once per builder class and per kind (with or without media).

Third, ``text_merge_executor``: one thread per process for the media-free merges of long observations. The encoder
call used here (``encode_batch_fast``) releases the GIL, so tokenizing a long observation there runs beside the
event loop, which meanwhile serves the other episodes (their generate calls, tool replies and short merges).

Fourth, tool observations with text content skip the template altogether: per builder class and message shape the
template's text around each content is found once (``template_skeleton``: rendered with sentinels; refused for
templates that trim, escape, drop or repeat the content, which a probe content shows, or whose added text does not
start at a special token), and each observation is that text filled in and tokenized, the observation alone. The
first use of each skeleton is checked against verl's two renders, and a skeleton that differs is dropped. What it
cannot see is a template that renders a tool message differently depending on what its text says; Qwen2.5-VL's
inserts it verbatim.

Fifth, renders with images (ids only: the driver needs no pixel tensors, verl's postprocessing computes them from
the episode's images) skip the processor call, whose cost is mostly Python around the work (a placeholder check
that walks the ids one by one: ~10 ms of a ~20 ms question render): the processor's template, each image's
placeholder text from the processor's size formula (once it has given the text of the processor's own image path
for the process's first image) or else from that image path (cached per process: ``media.py``), its own
substitution, and the Rust encoder a message at a time (the system block with the tool schemas is memoised). Checked
against verl's render once per builder class and conversation shape, like the text path. An image the processor
refuses goes to verl's render, which raises the processor's own error (the agent loop withholds such an image).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from PIL import Image
from verl.utils.tokenizer.chat_template import apply_chat_template

from verl_ext.rollout.lru import LRU
from verl_ext.rollout.media import IMAGE_REPLACEMENTS, has_media, image_key

log = logging.getLogger(__name__)

_MEMO_ITEMS = 4096
_memo: LRU[list[int]] = LRU(_MEMO_ITEMS)
_segments: LRU[list[int]] = LRU(1024)  # message texts of renders with images -> ids
_lock = threading.Lock()  # renders run in the default executor's threads
_verified: dict[tuple, bool] = {}
_tools_free: dict[tuple[type, bool], bool] = {}
_fast_classes: dict[type, type] = {}
_skeletons: dict[str, tuple[str, ...] | None] = {}  # None: the template is not of that kind for these messages
_size_formula_ok: dict[int, bool] = {}  # id(processor) -> its size formula gave its image path's text
_MISSING = object()
_PROBE = ' \n  <p a="1">\'x\' & {{ y }}</p>\t\n '
_executor: ThreadPoolExecutor | None = None

# Media-free text (characters) above which a merge leaves the event loop: ~1,000 characters take ~0.5 ms to
# tokenize, several times the cost of the hop to an idle thread; and the episodes in flight in the process from
# which it does (with fewer, nothing else waits for the event loop).
OFF_LOOP_MERGE_CHARS = 1000
OFF_LOOP_MIN_EPISODES = 2


def text_chars(messages: list[dict[str, Any]]) -> int:
    """Characters of text in ``messages`` (string contents and text parts)."""
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(c.get("text") or "") for c in content if isinstance(c, dict))
    return total


def text_merge_executor() -> ThreadPoolExecutor:
    """The process's one thread for long media-free merges (a dedicated thread: the default executor queues the
    image renders of every episode)."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="neos-text-merge")
        return _executor


def _encode(tokenizer: Any, text: str) -> list[int]:
    """``text`` to ids with the tokenizer's Rust encoder. ``encode_batch_fast`` (no offsets) rather than ``encode``:
    about a third cheaper, and it releases the GIL while it works, which ``encode`` does not (measured: a thread in
    ``encode`` stops the event loop for as long as it runs)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return list(tokenizer(text)["input_ids"])
    if hasattr(backend, "encode_batch_fast"):
        return backend.encode_batch_fast([text])[0].ids
    return backend.encode(text).ids


def _encode_messages(tokenizer: Any, text: str) -> list[int]:
    """``_encode(text)`` a message at a time, each memoised: the system block with the tool schemas (~6 KB, ~1.6 ms
    to encode) is the same in every episode. Each piece starts at the special token ``text`` starts with, where the
    tokenizer splits before any merge, so the pieces' ids concatenate to the whole's (the checks of renders with
    images against verl's catch a tokenizer for which they do not)."""
    start = next((t for t in _special_tokens(tokenizer) if text.startswith(t)), None)
    if start is None:
        return _encode(tokenizer, text)
    ids: list[int] = []
    for piece in text.split(start)[1:]:
        ids += _segments.get_or_compute(start + piece, partial(_encode, tokenizer, start + piece))
    return ids


class _ImageRefused(Exception):
    """The processor refuses this image (a ValueError of its image path), not an API our fast path lacks."""


class _TextRenderMemo:
    """Mixed in front of a VL builder class: overrides ``render_tokens_with_mm`` for media-free renders and for
    renders with images alone (ids only); videos, audio and ``mm_inputs_out`` go through verl's."""

    def render_tokens_with_mm(
        self, messages, images, *, videos=None, audios=None, add_generation_prompt=True, tools=None, mm_inputs_out=None
    ) -> list[int]:
        slow = super().render_tokens_with_mm  # type: ignore[misc]
        kwargs = {"videos": videos, "audios": audios, "add_generation_prompt": add_generation_prompt, "tools": tools}
        if images and not (videos or audios or mm_inputs_out is not None):
            return self._render_with_images(messages, images, add_generation_prompt, tools, partial(slow, **kwargs))
        if images or videos or audios or mm_inputs_out is not None or has_media(messages):
            return slow(messages, images, mm_inputs_out=mm_inputs_out, **kwargs)
        # Checked once per builder class and conversation shape (roles, generation prompt, tools or not).
        shape = (type(self), tuple(m.get("role") for m in messages), add_generation_prompt, bool(tools))
        if _verified.get(shape) is False:
            return slow(messages, images, **kwargs)
        key = json.dumps(
            [id(self.processor), messages, tools, add_generation_prompt, self.chat_template_kwargs],
            sort_keys=True,
            default=str,
        )
        hit = _memo.get(key)
        if hit is not None:
            return list(hit)
        ids = _encode(self.tokenizer, self._render_text(messages, add_generation_prompt, tools))
        if shape not in _verified:
            same = ids == slow(messages, images, **kwargs)
            _verified[shape] = same
            if not same:
                log.warning("fast text renders differ from %s's processor renders; using the processor", type(self))
                return slow(messages, images, **kwargs)
        _memo.put(key, ids)
        return list(ids)

    def _render_with_images(
        self,
        messages: list[dict[str, Any]],
        images: list[Any],
        add_generation_prompt: bool,
        tools: Any,
        slow: Callable[[list[dict[str, Any]], list[Any]], list[int]],
    ) -> list[int]:
        """A render with images (ids only) without the processor call's per-call cost (its placeholder check walks
        the ids in Python: ~10 ms for a prompt with tool schemas): the template through the processor, as verl
        renders it; each image's placeholder text as the processor expands it, cached (``_image_replacement``), put
        in place of the placeholders in order; the Rust encoder, a message at a time. Checked against ``slow``
        (verl's render) once per builder class and conversation shape."""
        shape = (type(self), "images", tuple(m.get("role") for m in messages), add_generation_prompt, bool(tools))
        processor = self.processor
        token = getattr(processor, "image_token", None)
        if _verified.get(shape) is False or token is None or not all(isinstance(im, Image.Image) for im in images):
            return slow(messages, images)
        text = self._render_text(messages, add_generation_prompt, tools, owner=processor)
        if text.count(token) != len(images):  # let the processor raise its own error
            return slow(messages, images)
        try:  # a processor whose call or size formula differs from what this expects falls back
            replacements = [self._image_replacement(image) for image in images]
            pieces = text.split(token)
            expanded = pieces[0] + "".join(r + piece for r, piece in zip(replacements, pieces[1:], strict=True))
        except _ImageRefused:  # the processor's own call raises its own error for that image
            return slow(messages, images)
        except (AttributeError, TypeError, ValueError) as e:
            log.warning("fast image renders unavailable for %s (%r); using the processor", type(processor), e)
            _verified[shape] = False
            return slow(messages, images)
        ids = _encode_messages(self.tokenizer, expanded)
        if shape not in _verified:
            reference = slow(messages, images)
            _verified[shape] = ids == reference
            if ids != reference:
                log.warning("fast image renders differ from %s's processor renders; using the processor", type(self))
                return reference
        return ids

    def _image_replacement(self, image: Image.Image) -> str:
        """The text the processor puts in place of ``image``'s placeholder token: its public ``__call__`` on the
        placeholder alone, with the builder's processor kwargs (verl passes ``return_tensors="pt"``), decoded; the
        same on every transformers release this package admits (5.10's private ``_process_images`` is not in 5.9,
        which verl's vllm extra pins). Cached by image
        size where the processor states that its placeholder count is a function of the size
        (``_get_num_multimodal_tokens(image_sizes=...)``, by which vLLM places placeholders without pixels), else by
        content. A size not seen before costs the size formula alone (microseconds, against 1-30 ms for the image
        processor, which resizes and patchifies the pixels only for us to count the patches), once the formula has
        given the processor's own text for the process's first image (``_size_formula_ok``)."""
        processor = self.processor
        call_kwargs = {"return_tensors": "pt", **(self.mm_processor_kwargs or {})}

        def processed() -> str:
            ids = processor(text=[processor.image_token], images=[image], **call_kwargs)["input_ids"][0]
            return processor.tokenizer.decode(
                ids.tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False
            )

        def compute() -> str:
            # Only without processor kwargs: with them, transformers 5.x's formula disagrees with Qwen2-VL's image
            # processor (which applies min/max pixels only as a pair) and writes them into the class defaults.
            counted = None if self.mm_processor_kwargs else _counted_replacement(processor, image)
            trusted = _size_formula_ok.get(id(processor))
            if counted is not None and trusted:
                return counted
            exact = processed()
            if counted is not None and trusted is None:
                _size_formula_ok[id(processor)] = counted == exact
            return exact

        settings = json.dumps(call_kwargs, sort_keys=True, default=str)
        by_size = hasattr(processor, "_get_num_multimodal_tokens")
        image_id = (image.mode, image.size) if by_size else image_key(image)
        try:
            return IMAGE_REPLACEMENTS.get_or_compute((id(processor), settings, image_id), compute)
        except ValueError as e:  # Qwen's refuses an aspect ratio over 200 (a thin crop) in its size formula
            raise _ImageRefused(str(e)) from e

    def _render_text(
        self, messages: list[dict[str, Any]], add_generation_prompt: bool, tools: Any, owner: Any = None
    ) -> str:
        """By default the tokenizer's template (with its Rust encoder, ~4x cheaper than the processor's template and
        the Python tokenizer call); the checks against verl's renders catch a template that differs."""
        template_kwargs = dict(self.chat_template_kwargs)
        if tools:
            template_kwargs["tools"] = tools
        if owner is None:
            owner = self.tokenizer if getattr(self.tokenizer, "chat_template", None) else self.processor
        return apply_chat_template(
            owner, messages, tokenize=False, add_generation_prompt=add_generation_prompt, **template_kwargs
        )

    def render_delta_token_id(self, prefix_messages, appended_messages, *, add_generation_prompt=False, tools=None):
        delta = partial(self._delta, prefix_messages, appended_messages, add_generation_prompt)
        if not tools:
            return delta(None)
        kind = (type(self), has_media(appended_messages))
        if _tools_free.get(kind) is False:
            return delta(tools)
        ids = delta(None)
        if kind not in _tools_free:
            full = delta(tools)
            _tools_free[kind] = ids == full
            if ids != full:
                log.warning("%s renders observations differently with tool schemas; keeping them", type(self))
                return full
        return ids

    def _delta(self, prefix: list[dict], appended: list[dict], add_generation_prompt: bool, tools: Any) -> list[int]:
        """Tool observations with text content: the template's skeleton for these messages filled with their
        contents, tokenized (no template render per turn, and no prefix to tokenize); anything else, or a skeleton
        that does not give verl's ids on its first use, through verl's two renders."""
        slow = partial(
            super().render_delta_token_id,  # type: ignore[misc]
            prefix,
            appended,
            add_generation_prompt=add_generation_prompt,
            tools=tools,
        )
        if not appended or not all(m.get("role") == "tool" and isinstance(m.get("content"), str) for m in appended):
            return slow()
        contents = [m["content"] for m in appended]
        shape = [{**m, "content": None} for m in appended]
        key = json.dumps(
            [id(self.processor), prefix, shape, tools, add_generation_prompt, self.chat_template_kwargs],
            sort_keys=True,
            default=str,
        )
        with _lock:
            parts = _skeletons.get(key, _MISSING)
        if parts is None:
            return slow()
        if parts is not _MISSING:
            return _encode(self.tokenizer, fill_skeleton(parts, contents))
        parts = template_skeleton(
            lambda messages, generation: self._render_text(messages, generation, tools),
            prefix,
            appended,
            add_generation_prompt,
            _special_tokens(self.tokenizer),
        )
        ids = slow()
        if parts is not None and _encode(self.tokenizer, fill_skeleton(parts, contents)) != ids:
            log.warning("%s: the template skeleton of %s messages differs from its renders", type(self), "tool")
            parts = None
        with _lock:
            _skeletons[key] = parts
            if len(_skeletons) > _MEMO_ITEMS:
                _skeletons.pop(next(iter(_skeletons)))
        return ids


def _counted_replacement(processor: Any, image: Image.Image) -> str | None:
    """``image``'s placeholder text from the processor's size formula (placeholder token x count), or None where the
    processor has no such formula; a size it refuses raises its ValueError (its image path refuses it too)."""
    count = getattr(processor, "_get_num_multimodal_tokens", None)
    if count is None:
        return None
    (n,) = count(image_sizes=[(image.height, image.width)]).num_image_tokens
    return processor.image_token * n


def _special_tokens(tokenizer: Any) -> tuple[str, ...]:
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return tuple(t.content for t in decoder.values() if getattr(t, "special", False))


def template_skeleton(
    render: Callable[[list[dict[str, Any]], bool], str],
    prefix: list[dict[str, Any]],
    appended: list[dict[str, Any]],
    add_generation_prompt: bool,
    special_tokens: tuple[str, ...],
) -> tuple[str, ...] | None:
    """The text the template adds after ``prefix`` for ``appended``, split around each message's content: ``parts``
    such that ``fill_skeleton(parts, contents)`` is that text for any contents; None when the template is not of
    that kind. ``render(messages, add_generation_prompt)`` renders to text.

    Required: each content appears exactly once, in order, and verbatim (a probe with whitespace at both ends,
    quotes, markup and braces renders as the skeleton says: no trim, escaping or JSON); the prefix renders
    unchanged; and the added text starts at a special token, where the tokenizer splits before any merge, so its ids
    do not depend on the prefix's."""
    prefix_text = render(prefix, False)
    sentinels = [f"\x00neos-content-{i}\x00" for i in range(len(appended))]
    full = render(prefix + [{**m, "content": c} for m, c in zip(appended, sentinels)], add_generation_prompt)
    if not full.startswith(prefix_text):
        return None
    added = full[len(prefix_text) :]
    if not any(added.startswith(t) for t in special_tokens):
        return None
    if any(added.count(sentinel) != 1 for sentinel in sentinels):
        return None
    parts, rest = [], added
    for sentinel in sentinels:
        head, found, rest = rest.partition(sentinel)
        if not found:  # out of order
            return None
        parts.append(head)
    parts.append(rest)
    probe = [_PROBE] * len(appended)
    probed = render(prefix + [{**m, "content": c} for m, c in zip(appended, probe)], add_generation_prompt)
    return tuple(parts) if probed == prefix_text + fill_skeleton(parts, probe) else None


def fill_skeleton(parts: tuple[str, ...], contents: list[str]) -> str:
    return parts[0] + "".join(content + part for content, part in zip(contents, parts[1:]))


def fast_text_renders(builder: Any) -> Any:
    """``builder`` with the fast media-free path, when it is a processor-backed VL builder; else unchanged.

    The instance is kept (its tokenizer, processor and settings) and given a subclass of its own class that adds the
    override, so verl's per-family boundary logic is untouched.
    """
    if getattr(builder, "processor", None) is None or not hasattr(builder, "render_tokens_with_mm"):
        return builder
    base = type(builder)
    if base not in _fast_classes:
        _fast_classes[base] = type(f"FastText{base.__name__}", (_TextRenderMemo, base), {})
    builder.__class__ = _fast_classes[base]
    return builder
