"""The co-evolution data path on real parts: tool server -> model MEI (our MEI server, tiny VL model) -> MEI log ->
selection -> buffer -> SFT tokens. The training input of a retained call is, token for token, the prompt the MEI
server generated from, images included; its target is the JSON the tool server accepted.

The tiny model writes noise, so its answers are scripted with ``TransformersGenerateClient``'s ``forced`` hook (a test
device: the scripted text is still scored by the real model and goes through the server, client, validation and log).
"""

import json

from aiohttp.test_utils import TestClient, TestServer

from tool_server.app import ServerSettings, create_app as create_tool_app
from tool_server.mei import MEIConfig, build_interface
from tool_server.mei.log import BlobStore, MEILog, blobs_dir_of
from verl_ext.credit.labels import CreditLabels
from verl_ext.mei.buffer import MEIBuffer
from verl_ext.mei.selection import RolloutResult, select_calls
from verl_ext.mei.server import MEIServer, Served, create_app
from verl_ext.mei.sft import tokenize_calls
from verl_ext.rollout.hf_generate import TransformersGenerateClient

from .conftest import trajectory

ORIGIN = "https://neos-world.invalid"
WEB = {"rational": "The page names the capital.", "evidence": "Paris is the capital.", "summary": "Paris",
       "relevant_images": []}
IMAGES = {"rational": "No candidate is judged here.", "candidates": []}


async def test_retained_calls_train_on_exactly_what_the_mei_saw(tiny_vl_model, tiny_vl_processor, world, tmp_path):
    prompts: list[tuple[int, ...]] = []

    def answer(call) -> str:
        prompts.append(call.prompt_ids)
        text = tiny_vl_processor.tokenizer.decode(call.prompt_ids)
        return json.dumps(WEB if '"relevant_images"' in text else IMAGES)

    client = TransformersGenerateClient(tiny_vl_model, tiny_vl_processor, max_new_tokens=256, forced=answer)
    mei_server = TestServer(create_app(MEIServer(Served("v0", "tiny", client))))
    await mei_server.start_server()
    log_path = tmp_path / "mei.jsonl"
    mei = build_interface(MEIConfig(endpoint=str(mei_server.make_url("/v1")), max_retries=0, max_page_chars=800,
                                    ocr=False, log_path=log_path))
    tools = create_tool_app(world=world, mei=mei, cache=None, settings=ServerSettings(max_register_images=8))

    async def call(c, sid, turn, name, arguments) -> list[str]:
        r = await c.post(f"/v1/sessions/{sid}/call", json={"name": name, "arguments": arguments, "turn": turn})
        body = await r.json()
        assert r.status == 200, body
        return [m["call_id"] for m in body["mei"]]

    visit = {"url": [f"{ORIGIN}/wiki/France"], "goal": "capital of France"}
    search = {"query": ["flag of France"], "goal": "the French flag"}
    async with TestClient(TestServer(tools)) as c:
        ok = (await (await c.post("/v1/sessions", json={})).json())["session_id"]
        ok_calls = [await call(c, ok, 0, "WebVisit", visit), await call(c, ok, 1, "ImageSearch", search)]
        bad = (await (await c.post("/v1/sessions", json={})).json())["session_id"]
        bad_calls = [await call(c, bad, 0, "ImageSearch", search), await call(c, bad, 1, "WebVisit", visit)]
    await mei_server.close()
    log = MEILog.read(log_path)
    assert [r.outcome for r in log.records] == ["valid"] * 4 and len(prompts) == 4

    # the failure: turn 0 productive, turn 1 a causal error -> only its ImageSearch call is retained
    labels = CreditLabels(assessed=True, judge="test", num_turns=3, productive={0: 0.8},
                          events=[{"turn": 1, "type": "causal_error", "severity": 0.6, "confidence": 0.9}])
    selection = select_calls([RolloutResult(trajectory(ok, ok_calls), True, True),
                              RolloutResult(trajectory(bad, bad_calls), False, True, labels)], log.records)
    assert [(r.reason, r.turn) for r in selection.retained] == [("success", 0), ("success", 1), ("productive", 0)]

    buffer = MEIBuffer(tmp_path / "buffer")
    assert buffer.add(selection.retained, BlobStore(blobs_dir_of(log_path))) == 3
    pending = buffer.pending()
    tokenized = tokenize_calls([b.call for b in pending.calls], buffer.blobs, tiny_vl_processor)
    assert tokenized.call_ids == [r.call.call_id for r in selection.retained] and not tokenized.skipped
    served_prompt = {r.call_id: p for r, p in zip(log.records, prompts, strict=True)}  # calls ran one at a time
    for call_id, item in zip(tokenized.call_ids, tokenized.items, strict=True):
        ids, mask = item["input_ids"].tolist(), item["loss_mask"]
        start = int(mask.nonzero()[0])
        assert tuple(ids[:start]) == served_prompt[call_id]  # the prompt the MEI server generated from
    image_item = tokenized.items[1]
    assert image_item["multi_modal_inputs"]["pixel_values"].shape[0] > 0  # the candidates' pixels, from the blobs
    target = tiny_vl_processor.tokenizer.decode(image_item["input_ids"][image_item["loss_mask"] == 1])
    assert target == json.dumps(IMAGES) + "<|im_end|>"
    buffer.close()
