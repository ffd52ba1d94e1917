"""The candidate's images go to the judge inline (OpenAI content parts with data URLs), each where it entered the
agent's context, never one the agent was not shown; ``images: false`` keeps the judge text-only."""

from __future__ import annotations

import asyncio

import pytest

from verl_ext.credit.judge import CreditJudge, CreditJudgeConfig
from verl_ext.credit.prompt import credit_messages

from .conftest import candidate, credit_server, reference

# conftest's candidate: img_1 (question, shown), img_2 (ImageSearch at t0, shown), img_3 (WebVisit at t2, never shown)
IMAGES = {ref: f"data:image/png;base64,{ref.upper()}" for ref in ("img_1", "img_2", "img_3")}


def _layout(content: list[dict]) -> list[str]:
    """Each part as ``text:<the last span id it opens, or head/tail>`` or ``image:<url>``."""
    out = []
    for part in content:
        if part["type"] == "image_url":
            out.append(f"image:{part['image_url']['url']}")
        else:
            spans = [s for s in (f"[t{i}]" for i in range(8)) if s in part["text"]]
            out.append(f"text:{spans[-1] if spans else 'head'}")
    return out


def test_images_sit_where_the_agent_first_saw_them_and_unseen_ones_are_left_out() -> None:
    user = credit_messages(reference(), candidate(), images=IMAGES)[1]["content"]
    assert _layout(user) == [
        "text:head", "image:data:image/png;base64,IMG_1",  # the question image, before t0
        "text:[t0]", "image:data:image/png;base64,IMG_2",  # added by t0's call: seen from t1 on
        "text:[t7]",  # t1..t7 and the span list; img_3's pixels never reached the agent
    ]
    assert "[img_2 (ImageSearch): what the agent saw after t0]" in user[2]["text"] + user[3].get("text", "")
    assert "IMG_3" not in str(user) and "registered but never shown (metadata only): img_3" in user[4]["text"]
    text_only = credit_messages(reference(), candidate())[1]["content"]
    joined = "".join(p["text"] for p in user if p["type"] == "text")
    lines = [line for line in joined.splitlines() if line and not line.startswith("[img_")]
    assert lines == [line for line in text_only.splitlines() if line]  # the same text, images labelled in between


@pytest.mark.parametrize("send", [True, False])
def test_the_judge_sends_them_unless_switched_to_text_only(send: bool) -> None:
    async def main():
        async with credit_server() as (url, _, bodies):
            judge = CreditJudge(CreditJudgeConfig(url=url, model="valid", images=send))
            labels = await judge.assess_group(reference(), [candidate()], [IMAGES])
            return labels, bodies

    (labels,), bodies = asyncio.run(main())
    content = bodies[0]["messages"][1]["content"]
    assert labels.assessed
    assert isinstance(content, list if send else str)
    assert CreditJudgeConfig().images is True  # shipped default: the paper's multimodal judge
