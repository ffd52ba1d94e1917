"""A reference and a failed candidate for one offline-world task, and a real local credit-judge server."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from aiohttp.test_utils import TestServer

from verl_ext.credit import SCHEMA_VERSION
from verl_ext.credit.offline_judge import TaskPath
from verl_ext.rollout.record import CallRecord, ImageEntry, TrajectoryRecord, TurnRecord

QUESTION = "Which river runs through the capital of the country whose flag shows a cedar?"
PATH = TaskPath(question=QUESTION, evidence=["Lebanon", "Beirut", "Beirut River"], answer="Beirut River")
WIKI = "https://neos-world.invalid/wiki/"


def _turn(
    index: int,
    outcome: str,
    tool: str | None,
    args: dict | None,
    observation: str = "",
    delivered: bool = True,
    **call_fields,
) -> TurnRecord:
    calls = (
        []
        if tool is None
        else [
            CallRecord(tool_name=tool, arguments=args, ok=outcome == "call_ok", observation=observation, **call_fields)
        ]
    )
    return TurnRecord(
        index=index,
        span=(10 * index, 10 * index + 5),
        text=f"thinking {index}",
        outcome=outcome,
        calls=calls,
        observation_delivered_to_policy=delivered,
        error_class=call_fields.get("error_class"),
        error_type=call_fields.get("error_type"),
    )


def reference() -> TrajectoryRecord:
    turns = [
        _turn(0, "call_ok", "TextSearch", {"query": "flag with a cedar tree"}, "Flag of Lebanon: a green cedar"),
        _turn(1, "call_ok", "WebVisit", {"url": WIKI + "Beirut"}, "Beirut ... the Beirut River forms its border"),
        _turn(2, "answer", None, None),
    ]
    return TrajectoryRecord(
        protocol="neos",
        question=QUESTION,
        session_id="s0",
        group_id="g",
        mei_version=None,
        termination_reason="answer",
        final_answer="Beirut River",
        turns=turns,
    )


def candidate() -> TrajectoryRecord:
    """t0 productive, t1 tool timeout, t2 productive (last), t3 off path, t4 downstream (observation not shown),
    t5 back on the path, t6 off again, t7 wrong answer."""
    turns = [
        _turn(0, "call_ok", "ImageSearch", {"query": "cedar flag"}, "1. Flag of Lebanon", images_added=["img_2"]),
        _turn(
            1,
            "call_error",
            "TextSearch",
            {"query": "capital of Lebanon"},
            "error: timeout",
            error_class="tool",
            error_type="timeout",
        ),
        _turn(2, "call_ok", "WebVisit", {"url": WIKI + "Beirut"}, "Beirut is the capital", images_added=["img_3"]),
        _turn(3, "call_ok", "TextSearch", {"query": "rivers of Syria"}, "Orontes, Euphrates"),
        _turn(4, "call_ok", "WebVisit", {"url": WIKI + "Orontes"}, "The Orontes ...", delivered=False),
        _turn(5, "call_ok", "TextSearch", {"query": "Beirut districts"}, "Achrafieh, Hamra"),
        _turn(6, "call_ok", "TextSearch", {"query": "Orontes length"}, "571 km"),
        _turn(7, "answer", None, None),
    ]
    images = [
        ImageEntry(ref="img_1", source="question", turn=None, in_context=True),
        ImageEntry(ref="img_2", source="ImageSearch", turn=0, in_context=True),
        ImageEntry(ref="img_3", source="WebVisit", turn=2, in_context=False),
    ]
    return TrajectoryRecord(
        protocol="neos",
        question=QUESTION,
        session_id="s1",
        group_id="g",
        mei_version=None,
        termination_reason="answer",
        final_answer="Orontes",
        images=images,
        turns=turns,
    )


def assessment(events: list[tuple[str, str, float, float]], productive: list[tuple[str, float]]) -> str:
    return json.dumps(
        {
            "schema_version": SCHEMA_VERSION,
            "candidate_overall_summary": "followed the Orontes",
            "events": [
                {
                    "span_id": s,
                    "type": t,
                    "severity": sev,
                    "confidence": c,
                    "error_category": "wrong_entity",
                    "rationale": "",
                    "reference_support": [2],
                }
                for s, t, sev, c in events
            ],
            "productive_turns": [{"span_id": s, "confidence": c, "rationale": ""} for s, c in productive],
            "confidence": 0.8,
        }
    )


VALID = assessment([("t3", "causal_error", 0.9, 0.8)], [("t0", 0.7)])
UNLISTED = assessment([("t99", "causal_error", 0.9, 0.8)], [])


@asynccontextmanager
async def credit_server(latency_s: float = 0.0) -> AsyncIterator[tuple[str, Counter, list]]:
    """Chat completions on 127.0.0.1; ``model`` picks the behaviour: ``valid``, ``fenced`` (valid inside a ```json
    fence), ``repair`` (an unlisted span id, then valid once the repair message arrives), ``invalid`` (never JSON),
    ``schema`` (JSON with a severity of 2), ``truncated`` (the valid reply cut in half, ``finish_reason: length``),
    ``html`` (a 200 whose body is not JSON), ``html_once`` (that, then valid), ``slow`` (valid after 1 s),
    ``http500``. Every reply waits ``latency_s`` first. Yields the base URL, a per-model request counter and the list
    of request bodies; ``calls["max_in_flight"]`` is the peak concurrency."""
    calls: Counter = Counter()
    bodies: list = []
    in_flight = 0

    async def chat(request: web.Request) -> web.Response:
        nonlocal in_flight
        body = await request.json()
        bodies.append(body)
        model = body["model"]
        calls[model] += 1
        in_flight += 1
        calls["max_in_flight"] = max(calls["max_in_flight"], in_flight)
        try:
            await asyncio.sleep(latency_s)
            if model == "http500":
                return web.Response(status=500)
            if model == "slow":
                await asyncio.sleep(1.0)
            if model == "html" or (model == "html_once" and calls[model] == 1):
                return web.Response(status=200, text="<html><body>502 Bad Gateway</body></html>")
            repaired = str(body["messages"][-1]["content"]).startswith("Your reply could not be used")
            content = {
                "valid": VALID,
                "fenced": f"```json\n{VALID}\n```",
                "repair": VALID if repaired else UNLISTED,
                "invalid": "The candidate went wrong at turn 3.",
                "schema": VALID.replace('"severity": 0.9', '"severity": 2.0'),
                "truncated": VALID[: len(VALID) // 2],
                "html_once": VALID,
                "slow": VALID,
            }[model]
            finish = "length" if model == "truncated" else "stop"
            message = {"role": "assistant", "content": content}
            return web.json_response({"choices": [{"message": message, "finish_reason": finish}]})
        finally:
            in_flight -= 1

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    async with TestServer(app, host="127.0.0.1") as server:
        yield str(server.make_url("/v1")), calls, bodies
