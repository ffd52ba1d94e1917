"""The worker hands a failure's pixels to the LLM credit judge: from the agent loop's ``multi_modal_data`` (the images
its agent saw) to data URLs in the judge's request, through TransferQueue when the trainer judges (mixed-group
sampling), dropped from the row once judged.

The worker is verl's real ``NeosAgentLoopWorker`` class with only the judge state its ``__init__`` builds from
``neos_credit_judge`` (``kind: llm``); TransferQueue and the chat server are real (local Ray, 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import base64
import io

import torch
from PIL import Image

from verl_ext.credit.judge import CreditJudge, CreditJudgeConfig
from verl_ext.credit.labels import CREDIT_KEY
from verl_ext.rollout.record import RECORD_KEY
from verl_ext.rollout.tq_worker import JUDGE_IMAGES_KEY, NeosAgentLoopWorker

from ..credit.conftest import candidate, credit_server, reference

COLOURS = {"img_1": (255, 0, 0), "img_2": (0, 0, 255)}  # conftest's candidate shows img_1 and img_2, never img_3


def _worker(url: str, images: bool = True) -> NeosAgentLoopWorker:
    worker = object.__new__(NeosAgentLoopWorker)
    worker.llm_judge = CreditJudge(CreditJudgeConfig(url=url, model="valid", images=images))
    worker.references, worker._judge_images = {}, {}
    return worker


def _pixels(url: str) -> tuple[int, int, int]:
    png = base64.b64decode(url.removeprefix("data:image/png;base64,"))
    return Image.open(io.BytesIO(png)).convert("RGB").getpixel((0, 0))


def test_failure_images_map_the_agents_images_to_register_refs() -> None:
    loop_images = [Image.new("RGB", (8, 8), colour) for colour in COLOURS.values()]  # multi_modal_data order

    async def main():
        async with credit_server() as (url, _, _):
            worker = _worker(url)
            failure = await worker._failure_images(candidate(), 0.0, {"images": loop_images})
            success = await worker._failure_images(candidate(), 1.0, {"images": loop_images})
            text_only = await _worker(url, images=False)._failure_images(candidate(), 0.0, {"images": loop_images})
            mismatch = await worker._failure_images(candidate(), 0.0, {"images": loop_images[:1]})
            return failure, success, text_only, mismatch

    failure, success, text_only, mismatch = asyncio.run(main())
    assert {ref: _pixels(u) for ref, u in failure.items()} == COLOURS
    assert success == text_only == mismatch == {}  # successes, text-only judges, a register that does not line up


def test_trainer_judged_failures_send_their_images_and_drop_them_from_the_row(transfer_queue) -> None:
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    tq = transfer_queue
    images = {ref: f"data:image/png;base64,{ref.upper()}" for ref in COLOURS}
    rows = {
        "q_0_0": {RECORD_KEY: reference().model_dump(mode="json")},
        "q_1_0": {RECORD_KEY: candidate().model_dump(mode="json"), JUDGE_IMAGES_KEY: images},
    }
    fields = [{"rm_scores": torch.zeros(2), "extra_fields": extra} for extra in rows.values()]
    tq.kv_batch_put(keys=list(rows), fields=list_of_dict_to_tensordict(fields), partition_id="train")

    async def main():
        async with credit_server() as (url, _, bodies):
            worker = _worker(url)
            labelled = await worker.assess_failures("q_0_0", ["q_1_0"], {"extra_info": {}})
            return labelled, bodies, worker._judge_images

    labelled, bodies, left = asyncio.run(main())
    content = bodies[0]["messages"][1]["content"]
    urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert labelled == 1 and urls == list(images.values()) and left == {}
    (extra,) = tq.kv_batch_get(keys=["q_1_0"], partition_id="train", select_fields=["extra_fields"])["extra_fields"]
    assert extra[CREDIT_KEY]["assessed"] and extra[CREDIT_KEY]["reference"] == "in_group"
    assert JUDGE_IMAGES_KEY not in extra  # the pixels leave TransferQueue once judged
    tq.kv_clear(keys=list(rows), partition_id="train")
