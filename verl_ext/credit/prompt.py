"""The credit judge's prompt (the rules of Neos §3.4 and App. F Fig. 18, in our words) and the rendering of the
reference and candidate.

Each candidate turn is shown with its span id, the call it made and what came back, and the images the policy
could actually see when it took that turn, so the judge can apply the "only images in the history" rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from verl_ext.credit.schema import SCHEMA_VERSION
from verl_ext.rollout.record import TrajectoryRecord, TurnRecord, span_id

SYSTEM_PROMPT = f"""\
You assign credit to the turns of a failed search-agent trajectory. You get the question, one verified successful \
trajectory for the same question (the reference) and the failed trajectory (the candidate). Find the turns that \
made the candidate fail and the turns that still did useful work. Judge the agent's decisions, not how closely it \
imitated the reference, and do not grade the final answer again: it is already known to be wrong.

How to judge:
1. The reference shows one route that works. It is not the only one: a candidate turn that differs from the \
reference but could still lead to the answer is not an error.
2. A tool failure (timeout, service unavailable, empty or broken result, refused call) is the environment's fault, \
not the agent's. Blame the agent only for how it handled the failure, e.g. trusting content it never received, \
ignoring the error, or repeating the same failing call without change.
3. Label as causal_error only the first decision that led the candidate away from every workable route. Turns that \
merely continue from that decision are its downstream consequences: leave them unlabelled.
4. If the candidate later gets back onto a workable route, label that turn recovery (severity 0). If it then \
leaves a workable route again, label that turn re_derailment.
5. Judge a claim about an image only against images the candidate had seen by that turn; each turn lists them. \
Captions, titles, file names, URLs and other metadata are not evidence of what an image shows.
6. The final answer turn is a causal_error only if the candidate still held evidence that could have led to the \
right answer (a viable route remained) and it chose an unsupported answer anyway. If the answer only states what an \
earlier, never recovered error made inevitable, leave it unlabelled: it is a downstream consequence.
7. A turn inside an unrecovered error branch can still be productive (it retrieved or used evidence the answer \
needs). List it under productive_turns: it earns positive credit instead of the downstream penalty. Being \
productive does not end the branch: only a recovery event does, and the other turns of the branch stay downstream.
8. Some observations were never shown to the agent (marked "not shown to the agent"): the tool ran, but its result \
did not fit the agent's remaining context. Do not guess what they held, and never blame the agent for not using \
them.
9. Use only the candidate's span ids as listed (t0, t1, ...), each at most once across events and productive turns. \
A productive turn is one that retrieved or used evidence the answer needs. Label only significant events and \
genuinely productive turns, and keep each rationale to one or two evidence-specific sentences.

Reply with one JSON object and nothing else:
{{"schema_version": "{SCHEMA_VERSION}",
 "candidate_overall_summary": "<one or two sentences>",
 "events": [{{"span_id": "t3", "type": "causal_error" | "recovery" | "re_derailment",
   "severity": <0..1, 0 for recovery>, "confidence": <0..1>, "error_category": "<snake_case or empty>",
   "rationale": "<why>", "reference_support": [<reference turn numbers>]}}],
 "productive_turns": [{{"span_id": "t1", "confidence": <0..1>, "rationale": "<why>"}}],
 "confidence": <0..1>}}"""

REPAIR_PROMPT = "Your reply could not be used: {error}\nReply again with only the corrected JSON object."
TRUNCATED_ERROR = (
    "it was cut off at the output limit of {max_tokens} tokens before the JSON object closed. Label only "
    "significant events and genuinely productive turns, with shorter rationales"
)

_NOT_SHOWN = "(not shown to the agent)"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" [... {len(text) - limit} more characters]"


def _turn_lines(turn: TurnRecord, final_answer: str | None, max_chars: int) -> list[str]:
    """The action of a turn and, per tool call, its arguments, error and what the agent was shown."""
    lines = []
    if turn.outcome == "answer":
        lines.append(f"answer: {final_answer if final_answer is not None else turn.text}")
    elif not turn.calls:
        lines.append(f"action: none ({turn.error_type or 'no well-formed tool call or answer'})")
    for call in turn.calls:
        lines.append(f"call: {call.tool_name} {json.dumps(call.arguments, ensure_ascii=False)}")
        if not call.ok:
            lines.append(f"error: {call.error_type or 'unknown'} (caused by: {call.error_class or 'unknown'})")
        shown = _clip(call.observation, max_chars) if turn.observation_delivered_to_policy else _NOT_SHOWN
        lines.append(f"observation: {shown}")
        if call.images_added:
            lines.append(f"images added: {', '.join(call.images_added)}")
    return lines


def _images_by_turn(record: TrajectoryRecord, turn: int) -> tuple[list[str], list[str]]:
    """Refs whose pixels the policy had seen before ``turn``, and refs registered by then that it never saw."""
    seen, unseen = [], []
    for image in record.images:
        if image.turn is None or image.turn < turn:
            (seen if image.in_context else unseen).append(f"{image.ref} ({image.source})")
    return seen, unseen


def _blocks(record: TrajectoryRecord, candidate: bool, max_chars: int) -> list[str]:
    """One text block per turn; candidate turns carry span ids and visible images, reference turns are numbered
    from 1."""
    blocks = []
    for turn in record.turns:
        head = f"[{span_id(turn.index)}]" if candidate else f"[reference turn {turn.index + 1}]"
        lines = [head, f"assistant: {_clip(turn.text, max_chars)}", *_turn_lines(turn, record.final_answer, max_chars)]
        if candidate:
            seen, unseen = _images_by_turn(record, turn.index)
            lines.append(f"images seen before this turn: {', '.join(seen) or 'none'}")
            if unseen:
                lines.append(f"registered but never shown (metadata only): {', '.join(unseen)}")
        blocks.append("\n".join(lines))
    return blocks


def render_trajectory(record: TrajectoryRecord, candidate: bool, max_chars: int = 2000) -> str:
    """Turns as text (see ``_blocks``)."""
    return "\n\n".join(_blocks(record, candidate, max_chars)) or "(no turns)"


def _image_parts(record: TrajectoryRecord, turn: int | None, images: Mapping[str, str]) -> list[dict[str, Any]]:
    """The pixels that entered the agent's context with ``turn``'s observation (None: the question's), as OpenAI
    content parts, each after a line naming it; images never shown to the agent are not sent."""
    parts: list[dict[str, Any]] = []
    for image in record.images:
        if image.turn == turn and image.in_context and image.ref in images:
            since = "from the start" if turn is None else f"after {span_id(turn)}"
            parts.append({"type": "text", "text": f"[{image.ref} ({image.source}): what the agent saw {since}]\n"})
            parts.append({"type": "image_url", "image_url": {"url": images[image.ref]}})
    return parts


def _merged(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent text parts joined into one."""
    out: list[dict[str, Any]] = []
    for part in parts:
        if part["type"] == "text" and out and out[-1]["type"] == "text":
            out[-1] = {"type": "text", "text": out[-1]["text"] + part["text"]}
        else:
            out.append(part)
    return out


def credit_messages(
    reference: TrajectoryRecord,
    candidate: TrajectoryRecord,
    max_chars: int = 2000,
    images: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Chat messages for one assessment: the rules, then question, reference and candidate.

    ``images`` maps the candidate's register refs to data URLs of the pixels the agent saw (Neos App. F Fig. 19:
    the trajectory "with inline images"). Each is placed where it entered the agent's context, so the judge meets
    an image no earlier than the agent did; refs never shown to the agent are skipped. Without ``images`` the user
    message is plain text (text-only judges).
    """
    span_ids = ", ".join(span_id(t.index) for t in candidate.turns)
    head = (
        f"[Question]\n{candidate.question}\n\n"
        f"[Reference: successful, final answer {reference.final_answer!r}]\n"
        f"{render_trajectory(reference, candidate=False, max_chars=max_chars)}\n\n"
        f"[Candidate: failed ({candidate.termination_reason}), final answer {candidate.final_answer!r}]\n"
    )
    blocks = _blocks(candidate, True, max_chars)
    tail = f"\n\n[Span ids you may use]\n{span_ids}"
    system = {"role": "system", "content": SYSTEM_PROMPT}
    if not images:
        return [system, {"role": "user", "content": head + ("\n\n".join(blocks) or "(no turns)") + tail}]
    parts = [{"type": "text", "text": head}, *_image_parts(candidate, None, images)]
    for i, (turn, block) in enumerate(zip(candidate.turns, blocks, strict=True)):
        parts.append({"type": "text", "text": ("\n\n" if i else "") + block + "\n"})
        parts += _image_parts(candidate, turn.index, images)
    parts.append({"type": "text", "text": tail})
    return [system, {"role": "user", "content": _merged(parts)}]
