"""An episode's messages in the two forms rLLM consumes (no verl, no rLLM import).

Engine form (``RolloutEngine.get_model_response``, rendered by rLLM's chat parsers): images ride on a message's
``images`` list. rLLM's ``QwenChatTemplateParser`` renders them only for ``user`` messages (``parse_user``: the
vision placeholders right after the role header, before the text; ``parse_tool`` ignores images) and
``process_image_data`` collects them from every message in order, so an observation with images is a ``user``
message whose text is wrapped in ``<tool_response>`` as ``parse_tool`` would wrap it: the same tokens as a tool
turn, with the pictures where the parser puts them. An observation without images stays a ``tool`` message.

OpenAI form (the gateway behind ``rllm eval``; ``OpenAIEngine`` in chat mode, see ``engines``): images are
``image_url`` parts with data URIs, which chat APIs accept only in ``user`` messages; a native call's result is a
``tool`` message with its ``tool_call_id`` and any images it loaded follow in a ``user`` message. For
``OpenAIEngine`` those user messages keep the images as an ``images`` list, which the engine encodes itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from verl_ext.rllm.episode import Observation, SearchEpisode, png_data_uri


def tool_response(text: str) -> str:
    return f"<tool_response>\n{text}\n</tool_response>"


def engine_prompt(episode: SearchEpisode) -> list[dict[str, Any]]:
    question: dict[str, Any] = {"role": "user", "content": episode.task.question}
    if episode.question_images:
        question["images"] = list(episode.question_images)
    return [{"role": "system", "content": episode.system_prompt}, question]


def engine_observation(observation: Observation) -> dict[str, Any]:
    if not observation.images:
        return {"role": "tool", "content": observation.text}
    return {
        "role": "user",
        "content": tool_response(observation.labelled_text()),
        "images": [image for _, image in observation.images],
    }


def openai_prompt(episode: SearchEpisode) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [_image_part(im) for im in episode.question_images]
    parts.append({"type": "text", "text": episode.task.question})
    return [{"role": "system", "content": episode.system_prompt}, {"role": "user", "content": parts}]


def answer_native_calls(observations: list[Observation], call_ids: list[str]) -> list[Observation]:
    """The observations as answers to the turn's native calls: chat APIs require a ``tool`` message for every call
    id. When the turn was refused as a whole (more calls than allowed, a malformed one), its one error observation
    answers each call."""
    if not call_ids:
        return observations
    if len(observations) == len(call_ids):
        return [dataclasses.replace(o, call_id=i) for o, i in zip(observations, call_ids)]
    (error,) = observations
    return [dataclasses.replace(error, call_id=i) for i in call_ids]


def openai_observations(observations: list[Observation], inline_images: bool = True) -> list[dict[str, Any]]:
    """``inline_images``: images as ``image_url`` parts (data URIs); False: as the user message's ``images`` list."""
    messages: list[dict[str, Any]] = []
    for o in observations:
        if o.call_id is not None:  # the result of a native call
            messages.append({"role": "tool", "tool_call_id": o.call_id, "content": o.text})
            if o.images:
                text = f"Images loaded by the call above, in order: {', '.join(o.refs)}."
                messages.append(_user_with_images(o, text, inline_images))
        elif o.images:
            messages.append(_user_with_images(o, tool_response(o.labelled_text()), inline_images))
        else:
            messages.append({"role": "user", "content": tool_response(o.text)})
    return messages


def instruction(text: str) -> dict[str, Any]:
    """A user message (the final turn's instruction): the same in both forms."""
    return {"role": "user", "content": text}


def _image_part(image: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": png_data_uri(image)}}


def _user_with_images(o: Observation, text: str, inline: bool) -> dict[str, Any]:
    if not inline:
        return {"role": "user", "content": text, "images": [image for _, image in o.images]}
    return {"role": "user", "content": [*(_image_part(image) for _, image in o.images), {"type": "text", "text": text}]}
