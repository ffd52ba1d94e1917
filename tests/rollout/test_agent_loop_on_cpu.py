"""The search agent loops end to end on CPU: verl's registry and Continuous Token builder, the tiny Qwen2.5-VL with
the real Qwen tokenizer and processor (``TransformersGenerateClient``), and a real tool server on the small world.

Most tests script the words the model writes (``forced``: a test device of the generate client; the scripted
tokens still go through a real forward pass with the images), because a random model never writes a valid call;
``test_a_random_model_*`` lets the model write freely.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from aiohttp import web
from aiohttp.test_utils import TestServer
from omegaconf import OmegaConf
from PIL import Image
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, AgentLoopWorker

from tool_server.offline.world import OfflineWorld
from verl_ext.rollout.agent_loop import SearchAgentLoop
from verl_ext.rollout.hf_generate import GenerateCall, TransformersGenerateClient
from verl_ext.rollout.instantiate import instantiate_agent_loop
from verl_ext.rollout.prompts import final_turn_instruction
from verl_ext.rollout.record import RECORD_KEY, TrajectoryRecord
from verl_ext.rollout.tool_backend import encoded_question_images

ORIGIN = "https://neos-world.invalid"


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def react(name: str, **arguments) -> str:
    return "<think>next step</think>" + call(name, **arguments)


@pytest.fixture(scope="module")
def processor(tiny_vl_processor):
    return tiny_vl_processor


@pytest.fixture
def server(tool_server):
    return tool_server


def url_of(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")


def scripted(*turns: str) -> Callable[[GenerateCall], str | None]:
    """Every episode writes ``turns`` in order (keyed by the episode's request id); None after: the model writes."""
    seen: dict[str, int] = {}

    def forced(c: GenerateCall) -> str | None:
        i = seen[c.request_id] = seen.get(c.request_id, -1) + 1
        return turns[i] if i < len(turns) else None

    return forced


def make_loop(agent: str, client, url: str | None, *, response_length=4096, tools=(), data=None, **custom):
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 2048,
                    "response_length": response_length,
                    "multi_turn": {"max_tool_response_length": 4000},
                    "custom": {"neos_rollout": {**({"tool_server_url": url} if url else {}), **custom}},
                }
            },
            "data": data or {},
        }
    )
    return instantiate_agent_loop(agent, client, client.processor, config, tools)


def question(world: OfflineWorld, text: str, image_id: str | None = "flag_fra") -> list[dict]:
    content: list[dict] = []
    if image_id:
        content.append({"type": "image", "image": world.load_pixels(image_id, max_pixels=4_000_000)})
    content.append({"type": "text", "text": text})
    return [{"role": "user", "content": content}]


async def run(loop, raw_prompt, uid="q1") -> tuple[AgentLoopOutput, TrajectoryRecord]:
    out = await loop.run(
        {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}, raw_prompt=raw_prompt, uid=uid
    )
    return out, TrajectoryRecord.model_validate(out.extra_fields[RECORD_KEY])


def mask_runs(mask: Sequence[int]) -> list[tuple[int, int]]:
    runs, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


def assert_well_formed(out: AgentLoopOutput, record: TrajectoryRecord, tokenizer) -> None:
    """Lengths agree, the mask is 1 exactly on each turn's generated tokens, and each span decodes to its turn."""
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    assert set(out.response_mask) <= {0, 1}
    assert np.isfinite(out.response_logprobs).all()
    assert mask_runs(out.response_mask) == [t.span for t in record.turns]
    for turn in record.turns:
        assert tokenizer.decode(out.response_ids[slice(*turn.span)], skip_special_tokens=True) == turn.text
    assert out.extra_fields["termination_reason"] == record.termination_reason


async def test_images_loaded_at_turn_k_are_in_every_later_generate_call_and_in_the_training_inputs(
    tiny_vl_model, processor, server, world
):
    script = scripted(
        call("FetchImage", urls=[f"{ORIGIN}/media/flag_mex.png"]),
        call("CropImage", crop_config={"img_2": [0, 0, 500, 500]}),
        call("TextSearch", query=["flag of Mexico"]),
        "Mexico",
    )
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=script)
    loop = make_loop("neos_search_agent", client, url_of(server))
    out, record = await run(loop, question(world, "Which country's flag has the emblem in the fetched image?"))

    # What the model saw: the question image, then + the fetched image, then + its crop, at every later call.
    assert [c.num_images for c in client.calls] == [1, 2, 3, 3]
    merge = processor.image_processor.merge_size**2
    for c in client.calls:
        assert c.num_image_pad_tokens == sum(t * h * w for t, h, w in c.image_grid_thw) // merge
    assert client.calls[1].image_grid_thw[:1] == client.calls[3].image_grid_thw[:1]  # img_1 is the same image

    assert record.termination_reason == "answer" and record.final_answer == "Mexico"
    assert [t.outcome for t in record.turns] == ["call_ok", "call_ok", "call_ok", "answer"]
    assert [(i.ref, i.source, i.turn) for i in record.images] == [
        ("img_1", "question", None),
        ("img_2", "FetchImage", 0),
        ("img_3", "CropImage", 1),
    ]
    assert record.turns[0].calls[0].images_added == ["img_2"]
    assert_well_formed(out, record, processor.tokenizer)

    # The exported training inputs (verl's own postprocessing) carry all three images.
    assert len(out.multi_modal_data["images"]) == 3
    worker = object.__new__(AgentLoopWorker)  # only the processor-facing attributes of the real class
    worker.processor, worker.tokenizer, worker.mm_processor_kwargs = processor, processor.tokenizer, {}
    input_ids = torch.tensor([out.prompt_ids + out.response_ids])
    inputs = worker._compute_multi_modal_inputs(out, input_ids)
    assert inputs["image_grid_thw"].shape[0] == 3
    assert tuple(map(tuple, inputs["image_grid_thw"].tolist())) == client.calls[-1].image_grid_thw


MM_KWARGS = {"min_pixels": 3136, "max_pixels": 12544}  # 12,544 = 16 x 28 x 28: at most 16 placeholders an image


def qwen_placeholders(image: Image.Image, min_pixels: int, max_pixels: int) -> int:
    """Hand formula: Qwen2-VL resizes to sides that are multiples of 28 within [min, max] pixels (``smart_resize``);
    one placeholder per 28 x 28 (2 x 2 patches of 14)."""
    height, width = smart_resize(image.height, image.width, factor=28, min_pixels=min_pixels, max_pixels=max_pixels)
    return height * width // (28 * 28)


async def test_data_mm_processor_kwargs_reach_every_generate_call_and_the_output(
    tiny_vl_model, processor, server, world
):
    """Non-default ``data.mm_processor_kwargs``: the token builder's placeholders, the ``hf`` backend's processing of
    the images (it raises when the counts disagree) and verl's postprocessing agree, image by image."""
    script = scripted(call("FetchImage", urls=[f"{ORIGIN}/media/flag_mex.png"]), "Mexico")
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=script)
    loop = make_loop("neos_search_agent", client, url_of(server), data={"mm_processor_kwargs": MM_KWARGS})
    out, record = await run(loop, question(world, "Which country's flag has the emblem in the fetched image?"))
    assert record.final_answer == "Mexico" and out.mm_processor_kwargs == MM_KWARGS

    images = out.multi_modal_data["images"]
    expected = [qwen_placeholders(image, **MM_KWARGS) for image in images]
    assert [c.num_images for c in client.calls] == [1, 2]
    assert [c.num_image_pad_tokens for c in client.calls] == [expected[0], sum(expected)]
    assert all(n <= 16 for n in expected)
    default = processor.image_processor.size  # the processor's own bounds: many more placeholders for the question
    assert qwen_placeholders(images[0], default["shortest_edge"], default["longest_edge"]) > expected[0]

    # The same prompt without the settings: the hf backend processes the images at the defaults and refuses it.
    with pytest.raises(ValueError, match="image placeholders do not match"):
        await client.generate(
            "again", prompt_ids=out.prompt_ids, sampling_params={"max_tokens": 1}, image_data=images[:1]
        )
    # verl's postprocessing takes the output's settings over the worker's (here: none).
    worker = object.__new__(AgentLoopWorker)
    worker.processor, worker.tokenizer, worker.mm_processor_kwargs = processor, processor.tokenizer, {}
    inputs = worker._compute_multi_modal_inputs(out, torch.tensor([out.prompt_ids + out.response_ids]))
    assert tuple(map(tuple, inputs["image_grid_thw"].tolist())) == client.calls[-1].image_grid_thw
    assert [t * h * w // 4 for t, h, w in client.calls[-1].image_grid_thw] == expected


async def test_nested_mm_processor_kwargs_from_the_config_reach_the_processor_as_plain_dicts(
    tiny_vl_model, processor, server, world
):
    """The recipes' form, ``size: {shortest_edge, longest_edge}``, arrives from the composed config as a nested
    DictConfig (verl copies it shallowly); transformers 5's processors refuse that at the first prompt. The loop
    hands plain dicts to the token builder, the generate calls and its output."""
    nested = {"size": {"shortest_edge": MM_KWARGS["min_pixels"], "longest_edge": MM_KWARGS["max_pixels"]}}
    script = scripted("Mexico")
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=16, forced=script)
    loop = make_loop("neos_search_agent", client, url_of(server), data={"mm_processor_kwargs": nested})
    out, record = await run(loop, question(world, "Which country's flag is this?"))
    assert record.final_answer == "Mexico" and out.mm_processor_kwargs == nested
    assert type(out.mm_processor_kwargs["size"]) is dict
    image = out.multi_modal_data["images"][0]
    assert client.calls[0].num_image_pad_tokens == qwen_placeholders(image, **MM_KWARGS)  # the bounds were applied


def png_part(image: Image.Image) -> dict:
    """An image part as verl's ``RLHFDataset`` builds it from a parquet row: the file, and the image opened on it."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return {"type": "image", "bytes": buf.getvalue(), "image": Image.open(io.BytesIO(buf.getvalue()))}


async def _registered_question_image(model, processor, server, part: dict) -> tuple[tuple[int, int], AgentLoopOutput]:
    """Runs a one-turn episode on ``part`` as the question image: the size of img_1 in the server's register while
    the episode runs, and the episode's output."""
    from tool_server.app import SESSIONS

    registered: list[tuple[int, int]] = []

    def forced(c: GenerateCall) -> str:
        for session in server.app[SESSIONS]._sessions.values():
            registered.append(session.register.get("img_1").image.size)
        return "France"

    client = TransformersGenerateClient(model, processor, max_new_tokens=16, forced=forced)
    loop = make_loop("neos_search_agent", client, url_of(server))
    out, record = await run(loop, [{"role": "user", "content": [part, {"type": "text", "text": "?"}]}])
    assert record.final_answer == "France" and len(registered) == 1
    return registered[0], out


async def test_the_tool_server_registers_the_rows_encoded_question_image_not_the_resized_copy(
    tiny_vl_model, processor, server, world
):
    """A parquet row's image reaches the prompt as ``{"type": "image", "bytes": ..., "image": <decoded>}`` (verl's
    RLHFDataset): the policy sees verl's resized copy, the tool server gets the file itself, as data generation
    registered it."""
    part = png_part(world.load_pixels("flag_fra", max_pixels=4_000_000).resize((1200, 800)))
    registered, out = await _registered_question_image(tiny_vl_model, processor, server, part)
    assert registered == (1200, 800)
    assert out.multi_modal_data["images"][0].size == (1204, 812)  # the policy's copy: verl's, sides rounded to 28


async def test_a_question_file_the_server_refuses_falls_back_to_the_policys_copy(
    tiny_vl_model, processor, server, world
):
    flag = world.load_pixels("flag_fra", max_pixels=4_000_000)
    part = {"type": "image", "bytes": b"not an image", "image": flag}  # a corrupt file beside a decodable image
    registered, out = await _registered_question_image(tiny_vl_model, processor, server, part)
    assert registered == out.multi_modal_data["images"][0].size


def test_encoded_question_images_are_taken_from_image_parts_in_order():
    png = b"\x89PNG..."
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": [{"type": "image", "bytes": png}, {"type": "text", "text": "a"}]},
        {"role": "user", "content": [{"type": "image", "image": "file:///x.png"}, {"type": "image", "bytes": b""}]},
    ]
    assert encoded_question_images(messages) == [png, None, None]


async def test_the_rollouts_of_a_group_decode_their_question_image_once(
    tiny_vl_model, processor, server, world, monkeypatch
):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from verl_ext.rollout import media

    media.QUESTION_MEDIA.clear()
    processed: list[int] = []
    verls = RLHFDataset.process_multi_modal_info.__func__

    async def counted(cls, messages, **kwargs):
        processed.append(len(messages))
        return await verls(cls, messages, **kwargs)

    monkeypatch.setattr(RLHFDataset, "process_multi_modal_info", classmethod(counted))
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=16, forced=lambda c: "France")
    flag, logo = (world.load_pixels(i, max_pixels=4_000_000) for i in ("flag_fra", "logo_acer"))

    def prompt(image):  # a fresh row per rollout, as verl's batch gives each rollout its own decoded copy
        return [{"role": "user", "content": [png_part(image), {"type": "text", "text": "?"}]}]

    prompts = [prompt(flag) for _ in range(4)] + [prompt(logo)]
    loops = [make_loop("neos_search_agent", client, url_of(server)) for _ in prompts]
    outs = await asyncio.gather(*(run(loop, p, uid="g") for loop, p in zip(loops, prompts)))  # started together

    assert len(processed) == 2  # once per question image, though the four flag rollouts missed the cache together
    images = [out.multi_modal_data["images"] for out, _ in outs]
    assert len({id(i) for i in images}) == 5  # each rollout its own list
    reference = await RLHFDataset.process_multi_modal_info(prompt(flag), image_patch_size=14, config={})
    assert [list(i[0].getdata()) for i in images[:4]] == [list(reference[0][0].getdata())] * 4
    assert images[4][0].size != images[0][0].size


async def test_the_session_opens_with_the_rows_file_while_verl_decodes_the_question_image(
    tiny_vl_model, processor, server, world, monkeypatch
):
    """verl's decoding waits here until the server holds the session: were the open waiting for the decoded image,
    this would never finish (bounded by the timeout)."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from tool_server.app import SESSIONS
    from verl_ext.rollout import media

    media.QUESTION_MEDIA.clear()
    verls = RLHFDataset.process_multi_modal_info.__func__

    async def after_the_session_opens(cls, messages, **kwargs):
        while not server.app[SESSIONS]._sessions:
            await asyncio.sleep(0.001)
        return await verls(cls, messages, **kwargs)

    monkeypatch.setattr(RLHFDataset, "process_multi_modal_info", classmethod(after_the_session_opens))
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=16, forced=lambda c: "France")
    loop = make_loop("neos_search_agent", client, url_of(server))
    flag = world.load_pixels("flag_fra", max_pixels=4_000_000)
    prompt = [{"role": "user", "content": [png_part(flag), {"type": "text", "text": "?"}]}]
    out, record = await asyncio.wait_for(run(loop, prompt), timeout=60)
    assert record.final_answer == "France" and record.images[0].ref == "img_1"


async def test_a_failure_to_decode_the_question_image_closes_the_session_it_opened(
    tiny_vl_model, processor, server, world, monkeypatch
):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from tool_server.app import SESSIONS
    from verl_ext.rollout import media

    media.QUESTION_MEDIA.clear()

    async def undecodable(cls, messages, **kwargs):
        while not server.app[SESSIONS]._sessions:  # the session is open by then
            await asyncio.sleep(0.001)
        raise ValueError("cannot identify image file")

    monkeypatch.setattr(RLHFDataset, "process_multi_modal_info", classmethod(undecodable))
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=16, forced=lambda c: "France")
    loop = make_loop("neos_search_agent", client, url_of(server))
    flag = world.load_pixels("flag_fra", max_pixels=4_000_000)
    prompt = [{"role": "user", "content": [png_part(flag), {"type": "text", "text": "?"}]}]
    with pytest.raises(ValueError, match="cannot identify image file"):
        await asyncio.wait_for(run(loop, prompt), timeout=60)
    assert not server.app[SESSIONS]._sessions and not client.calls


@pytest.mark.parametrize("agent", ["neos_search_agent", "modalsearch_react_agent"])
async def test_a_random_model_still_yields_a_well_formed_output(
    tiny_vl_model, processor, server, world, agent
):
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=24, seed=3)
    loop = make_loop(agent, client, url_of(server), max_turns=4)
    out, record = await run(loop, question(world, "What is shown?"))
    assert_well_formed(out, record, processor.tokenizer)
    assert 1 <= len(record.turns) <= 4
    if agent == "modalsearch_react_agent":  # noise is never a well-formed ReAct turn: 3 format errors end it
        assert record.termination_reason == "agent_errors" and record.error_class_ended == "agent"
        assert [t.error_type for t in record.turns] == ["bad_format"] * 3


async def test_max_turn_tokens_bounds_every_turn(tiny_vl_model, processor, server, world):
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=200, seed=3)
    loop = make_loop("neos_search_agent", client, url_of(server), max_turns=3, max_turn_tokens=5)
    out, record = await run(loop, question(world, "What is shown?"))
    assert_well_formed(out, record, processor.tokenizer)
    assert [c.sampling_params["max_tokens"] for c in client.calls] == [5] * len(record.turns)
    assert all(0 < end - start <= 5 for start, end in (t.span for t in record.turns))


async def test_bad_calls_become_observations_the_policy_sees_and_are_classified_agent_caused(
    tiny_vl_model, processor, server, world
):
    script = scripted(
        "<tool_call>{not json}</tool_call>",
        call("WebSearch", query=["x"]),
        call("TextSearch", query="not a list"),
        call("CropImage", crop_config={"img_9": [0, 0, 10, 10]}),
        "France",
    )
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=script)
    loop = make_loop("neos_search_agent", client, url_of(server))
    out, record = await run(loop, question(world, "Which country?"))
    assert [(t.outcome, t.error_class, t.error_type) for t in record.turns[:4]] == [
        ("no_action", "agent", "malformed_call"),
        ("call_error", "agent", "unknown_tool"),
        ("call_error", "agent", "invalid_arguments"),
        ("call_error", "agent", record.turns[3].calls[0].error_type),  # the server's 4xx type for an unknown ref
    ]
    assert record.turns[3].calls[0].error_type and record.turns[3].calls[0].latency_s > 0
    assert record.termination_reason == "answer"  # Neos has no error-streak rule
    tokenizer = processor.tokenizer
    for before, after in zip(record.turns[:4], client.calls[1:5]):
        seen = tokenizer.decode(after.prompt_ids[-200:])
        assert "Error (" in seen, f"turn {before.index}'s error never reached the policy"
    assert_well_formed(out, record, tokenizer)


async def test_an_image_the_processor_refuses_is_withheld_and_named_and_the_episode_goes_on(
    tiny_vl_model, processor, server, world
):
    # flag_fra is 320x240: a box 5/1000 high is 320x1 pixels, an aspect ratio of 320, over the 200 that Qwen's image
    # processor accepts (its render raises ValueError). The next crop is ordinary.
    script = scripted(
        call("CropImage", crop_config={"img_1": [[0, 0, 1000, 5], [0, 0, 500, 500]]}),
        call("CropImage", crop_config={"img_1": [500, 500, 1000, 1000]}),
        "France",
    )
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=script)
    loop = make_loop("neos_search_agent", client, url_of(server))
    out, record = await run(loop, question(world, "Which country?"))

    assert record.termination_reason == "answer" and record.final_answer == "France"
    assert [t.outcome for t in record.turns] == ["call_ok", "call_ok", "answer"]
    assert [c.num_images for c in client.calls] == [1, 2, 3]  # the question, + the ordinary crop, + the next one
    assert [(i.ref, i.in_context) for i in record.images] == [
        ("img_1", True),
        ("img_2", False),
        ("img_3", True),
        ("img_4", True),
    ]
    first = record.turns[0].calls[0]
    assert first.images_added == ["img_3"]
    note = "img_2 is registered but could not be shown to you (ValueError: absolute aspect ratio must be smaller"
    assert note in first.observation
    assert note in processor.tokenizer.decode(client.calls[1].prompt_ids)  # the policy was told
    assert len(out.multi_modal_data["images"]) == 3
    assert_well_formed(out, record, processor.tokenizer)
    # The LLM credit judge gets these pixels under the refs the agent saw them as; img_2's never reached it.
    from verl_ext.credit.judge import CreditJudge, CreditJudgeConfig
    from verl_ext.rollout.tq_worker import NeosAgentLoopWorker

    worker = object.__new__(NeosAgentLoopWorker)  # only the judge state of the real class
    worker.llm_judge = CreditJudge(CreditJudgeConfig(url="http://127.0.0.1:9/v1"))
    judged = await worker._failure_images(record, 0.0, out.multi_modal_data)
    assert sorted(judged) == ["img_1", "img_3", "img_4"]
    for ref, image in zip(["img_1", "img_3", "img_4"], out.multi_modal_data["images"]):
        sent = Image.open(io.BytesIO(base64.b64decode(judged[ref].split(",", 1)[1])))
        np.testing.assert_array_equal(np.asarray(sent.convert("RGB")), np.asarray(image.convert("RGB")))


async def test_three_consecutive_tool_failures_end_a_modalsearch_episode_as_tool_errors(
    tiny_vl_model, processor, tool_server_with, world
):
    @web.middleware
    async def failing_calls(request: web.Request, handler):  # the server is there, its tools fail (5xx)
        if request.path.endswith("/call"):
            body = {"error": {"type": "search_unavailable", "message": "injected", "field": None}}
            return web.json_response(body, status=503)
        return await handler(request)

    server = await tool_server_with(middlewares=(failing_calls,))
    client = TransformersGenerateClient(
        tiny_vl_model, processor, max_new_tokens=64, forced=lambda c: react("t2t_search", query="flag of France")
    )
    loop = make_loop("modalsearch_react_agent", client, url_of(server))
    out, record = await run(loop, question(world, "Which country?"))
    assert record.termination_reason == "tool_errors" and record.error_class_ended == "tool"
    assert [(t.outcome, t.error_class) for t in record.turns] == [("call_error", "tool")] * 3
    assert {c.error_type for t in record.turns for c in t.calls} == {"search_unavailable"}
    assert record.turns[-1].observation_delivered_to_policy is False  # the episode ended on it
    assert_well_formed(out, record, processor.tokenizer)


async def test_a_tool_server_gone_mid_episode_ends_it_at_once_as_tool_instability(
    tiny_vl_model, processor, server, world
):
    """Neos has no error-streak rule: without this, a lost session would spend every remaining turn on errors."""
    event_loop = asyncio.get_running_loop()

    def forced(c: GenerateCall) -> str:
        if len(client.calls) == 1:  # after the session is open: the tool server goes away
            asyncio.run_coroutine_threadsafe(server.close(), event_loop).result(timeout=30)
        return call("TextSearch", query=["flag of France"])

    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=forced)
    loop = make_loop("neos_search_agent", client, url_of(server))
    out, record = await run(loop, question(world, "Which country?"))
    assert record.termination_reason == "tool_errors" and record.error_class_ended == "tool"
    assert [(t.outcome, t.error_class) for t in record.turns] == [("call_error", "tool")]
    assert record.turns[0].calls[0].error_type == "session_lost"
    assert record.turns[-1].observation_delivered_to_policy is False
    assert_well_formed(out, record, processor.tokenizer)


async def test_the_last_turn_disables_tools_and_asks_for_an_answer(
    tiny_vl_model, processor, server, world
):
    script = scripted(call("TextSearch", query=["France"]), call("TextSearch", query=["again"]))
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=script)
    loop = make_loop("neos_search_agent", client, url_of(server), max_turns=2)
    out, record = await run(loop, question(world, "Which country?"))
    assert final_turn_instruction("neos") in processor.tokenizer.decode(client.calls[1].prompt_ids)
    assert final_turn_instruction("neos") not in processor.tokenizer.decode(client.calls[0].prompt_ids)
    assert record.termination_reason == "max_turns"
    assert [(t.outcome, t.tools_enabled, t.error_type) for t in record.turns] == [
        ("call_ok", True, None),
        ("no_action", False, "tools_disabled"),
    ]
    assert len(client.calls) == 2  # the disabled call was not run: no third turn
    assert_well_formed(out, record, processor.tokenizer)


async def test_an_observation_that_does_not_fit_is_withheld_and_ends_the_episode(
    tiny_vl_model, processor, server, world
):
    script = scripted(call("TextSearch", query=["France", "Paris", "Mexico"]), "never reached")
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=script)
    loop = make_loop("neos_search_agent", client, url_of(server), response_length=200)
    out, record = await run(loop, question(world, "Which country?"))
    assert record.termination_reason == "context"
    assert record.turns[0].observation_delivered_to_policy is False
    assert record.turns[0].calls[0].ok  # the tool ran; only its result did not fit
    assert len(client.calls) == 1 and len(out.response_ids) <= 200
    assert sum(out.response_mask) == len(out.response_ids)  # nothing but the generated call is in the response
    assert_well_formed(out, record, processor.tokenizer)


async def test_modalsearch_rollouts_of_one_group_share_tool_results(
    tiny_vl_model, processor, server, world
):
    script = scripted(react("t2t_search", query="capital of France"), "<think>done</think><answer>Paris</answer>")
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=script)
    cached = []
    for uid in ("g1", "g1", "g2"):
        loop = make_loop("modalsearch_react_agent", client, url_of(server))
        _, record = await run(loop, question(world, "Capital?", image_id=None), uid=uid)
        assert record.group_id == uid and record.final_answer == "Paris"
        cached.append(record.turns[0].calls[0].cached)
    assert cached == [False, True, False]


async def test_episodes_overlap_while_tools_run(tiny_vl_model, processor, server, world):
    """Turn-level asynchrony: 6 concurrent episodes finish, each with its own session and register."""
    script = scripted(call("FetchImage", urls=[f"{ORIGIN}/media/flag_mex.png"]), "Mexico")
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=script)
    loops = [make_loop("neos_search_agent", client, url_of(server)) for _ in range(6)]
    results = await asyncio.gather(
        *(run(loop, question(world, "Which country?"), uid=f"u{i}") for i, loop in enumerate(loops))
    )
    sessions = {record.session_id for _, record in results}
    assert len(sessions) == 6
    for out, record in results:
        assert [i.ref for i in record.images] == ["img_1", "img_2"]  # no leakage between registers
        assert_well_formed(out, record, processor.tokenizer)
    # Generations of different episodes interleave: not all turns of one episode before the next starts.
    order = [c.request_id for c in client.calls]
    assert order[:6] != [order[0]] * 6 and len(set(order[:6])) > 1



async def test_long_text_merges_off_the_event_loop_give_the_same_tokens(
    tiny_vl_model, processor, server, world, monkeypatch
):
    """Long media-free observations are tokenized on the text-merge thread while other episodes are in flight; short
    ones, or any when the episode is alone, inline: the same stream either way."""
    import verl_ext.rollout.agent_loop as agent_loop_module

    used = []
    executor = agent_loop_module.text_merge_executor
    monkeypatch.setattr(agent_loop_module, "text_merge_executor", lambda: used.append(1) or executor())
    outputs = []
    # all inline; every text merge on the thread (as if another episode were in flight); alone: inline again
    for threshold, min_episodes, hops in ((10**9, 1, 0), (0, 1, 2), (0, 2, 0)):
        monkeypatch.setattr(agent_loop_module, "OFF_LOOP_MERGE_CHARS", threshold)
        monkeypatch.setattr(agent_loop_module, "OFF_LOOP_MIN_EPISODES", min_episodes)
        script = scripted(call("TextSearch", query=["flag of Mexico"]), call("TextSearch", query=["Paris"]), "Mexico")
        client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=script)
        loop = make_loop("neos_search_agent", client, url_of(server))
        used.clear()
        out, record = await run(loop, question(world, "Which country?", image_id=None))
        assert_well_formed(out, record, processor.tokenizer)
        assert record.termination_reason == "answer" and [t.outcome for t in record.turns][:2] == ["call_ok"] * 2
        outputs.append(out)
        assert len(used) == hops  # both observations' merges went to the thread, or none
    assert SearchAgentLoop.in_flight == 0
    for other in outputs[1:]:
        assert (other.prompt_ids, other.response_ids, other.response_mask, other.response_logprobs) == (
            outputs[0].prompt_ids,
            outputs[0].response_ids,
            outputs[0].response_mask,
            outputs[0].response_logprobs,
        )


FUNCTION_TOOLS = '''
from PIL import Image
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize
from verl.tools.function_tool import function_tool
from verl.tools.schemas import ToolResponse


@function_tool
def swatch(colour: str) -> ToolResponse:
    """Paint a small swatch of one colour.

    Args:
        colour: one of red, green, blue
    """
    rgb = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255)}[colour]  # KeyError for anything else
    return ToolResponse(text=f"a {colour} swatch", image=[Image.new("RGB", (56, 56), rgb)])
'''


async def test_the_loop_runs_a_projects_own_verl_tools(
    tiny_vl_model, processor, server, world, tmp_path, monkeypatch
):
    """tool_backend: verl: a verl FunctionTool (from function_tool_path) and our BaseTool YAML tools, as verl loads
    them for a worker; their images join the register and every later generate call; a raising tool is tool-caused."""
    from verl.tools.tool_registry import load_all_tools

    (tmp_path / "tools.py").write_text(FUNCTION_TOOLS)
    monkeypatch.setenv("NEOS_TOOL_SERVER_URL", url_of(server))  # our BaseTools read it
    yaml_path = Path(__file__).resolve().parents[2] / "recipes" / "tools" / "neos_tools.yaml"
    tools = load_all_tools(tool_config_path=str(yaml_path), function_tool_path=str(tmp_path / "tools.py"))
    script = scripted(
        call("swatch", colour="blue"),
        call("swatch", colour="purple"),
        call("FetchImage", urls=[f"{ORIGIN}/media/flag_mex.png"]),
        "Mexico",
    )
    client = TransformersGenerateClient(tiny_vl_model, processor, max_new_tokens=64, forced=script)
    loop = make_loop("neos_search_agent", client, None, tools=tools, tool_backend="verl")
    out, record = await run(loop, question(world, "Which country?"))
    assert [c.num_images for c in client.calls] == [1, 2, 2, 3]
    assert [(t.outcome, t.error_class) for t in record.turns] == [
        ("call_ok", None),
        ("call_error", "tool"),
        ("call_ok", None),
        ("answer", None),
    ]
    assert record.turns[1].calls[0].error_type == "KeyError"
    assert [(i.ref, i.source) for i in record.images] == [
        ("img_1", "question"),
        ("img_2", "swatch"),
        ("img_3", "FetchImage"),
    ]
    assert {t.name for t in loop.verl_tools} >= {"swatch", "FetchImage"}
    assert_well_formed(out, record, processor.tokenizer)


def test_the_shipped_agent_loop_config_instantiates_each_loop_with_its_settings(tiny_vl_model, processor):
    """``recipes/agent_loops/search_agents.yaml`` as verl's AgentLoopWorker reads ``agent_loop_config_path``."""
    path = Path(__file__).resolve().parents[2] / "recipes" / "agent_loops" / "search_agents.yaml"
    entries = OmegaConf.load(path)
    client = TransformersGenerateClient(tiny_vl_model, processor)
    config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"prompt_length": 2048, "response_length": 4096}}, "data": {}}
    )
    for entry in entries:
        loop = instantiate_agent_loop(entry, client, processor, config)
        expected = {k: v for k, v in OmegaConf.to_container(entry).items() if k not in ("name", "_target_")}
        assert {k: getattr(loop.settings, k) for k in expected} == expected
        assert loop.protocol == ("modalsearch" if "modalsearch" in entry.name else "neos")
