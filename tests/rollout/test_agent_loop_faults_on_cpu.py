"""A group completes when one of its agent loops raises before verl's postprocessing, with and without the sampler.

Real parts: our ``NeosAgentLoopWorker`` (verl's ``AgentLoopWorkerTQ._run_prompt`` underneath, and our mixed-group
session path), the ``neos_search_agent`` loop, the tiny Qwen2.5-VL with its real processor, a real tool server, a real
TransferQueue. Faults are real too: a tool server at its ``max_sessions`` limit refuses a member's session open, and a
question image with an aspect ratio of 300 makes verl's image processing (qwen-vl-utils' ``smart_resize``) raise for
every member. The only test device is the reward (``_ExactMatchScored``: exact match instead of verl's reward-loop
actors) and the scripted words of the model (``forced``).

``asyncio.wait_for`` bounds every run: it is the hang guard (before the fix, the members that finished awaited the
refused member's trajectory forever), not a performance budget.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import transfer_queue as tq
from aiohttp import web
from PIL import Image
from transfer_queue import KVBatchMeta

from verl_ext.credit.labels import CREDIT_KEY, CreditLabels
from verl_ext.rollout import media
from verl_ext.rollout.admission import SESSIONS_KEY, admission_key
from verl_ext.rollout.hf_generate import GenerateCall, TransformersGenerateClient
from verl_ext.rollout.record import RECORD_KEY
from verl_ext.trainer.metrics import FAILED_SESSION_SHARE, FAILED_SESSIONS
from verl_ext.trainer.mixed_groups import MixedGroupSamplingMixin

from ..trainer.rehearsal import _ExactMatchScored
from .test_v1_data_path_on_cpu import SEARCH

HANG_GUARD_S = 300
N = 3
LYON = '<tool_call>\n{"name": "TextSearch", "arguments": {"query": ["Lyon"]}}\n</tool_call>'
PLANS = ([SEARCH, "Paris"], [SEARCH, LYON, "Lyon"], [SEARCH, LYON, "Lyon"])
PATH = {"question": "Which city is the capital of France?", "evidence": ["capital of France"], "answer": "Paris"}
ROW = {"extra_info": {"task_path": json.dumps(PATH)}, "reward_model": {"ground_truth": "Paris"}}


@pytest.fixture
def config_for(compose_ppo_config, tiny_vl_model_dir):
    def compose(server, *overrides: str):
        url = str(server.make_url("")).rstrip("/")
        return compose_ppo_config(
            tiny_vl_model_dir,
            f"actor_rollout_ref.rollout.n={N}",
            "actor_rollout_ref.rollout.prompt_length=2048",
            "actor_rollout_ref.rollout.response_length=2048",
            "actor_rollout_ref.rollout.agent.default_agent_loop=neos_search_agent",
            f"+actor_rollout_ref.rollout.custom.neos_rollout.tool_server_url={url}",
            *overrides,
        )

    return compose


def worker_for(config, model, processor) -> _ExactMatchScored:
    scripts: dict[str, list[str]] = {}

    def forced(c: GenerateCall) -> str:  # episodes take PLANS in the order they first generate
        if c.request_id not in scripts:
            scripts[c.request_id] = list(PLANS[len(scripts)])
        return scripts[c.request_id].pop(0)

    return _ExactMatchScored(config, TransformersGenerateClient(model, processor, max_new_tokens=64, forced=forced))


def row(uid: str, content, **sessions) -> dict:
    return {
        "uid": uid,
        "raw_prompt": [{"role": "user", "content": content}],
        "index": 0,
        "global_steps": 1,
        "agent_name": "neos_search_agent",
        **ROW,
        **sessions,
    }


async def run_prompt(worker, prompt: dict) -> None:
    trajectory = {"step": 1, "sample_index": 0, "rollout_n": 0, "validate": False}
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    await asyncio.wait_for(worker._run_prompt(prompt, sampling, trajectory=trajectory), timeout=HANG_GUARD_S)


def rows_of(uid: str) -> tuple[dict, list[str]]:
    listing = tq.kv_list("train")["train"]
    return listing, sorted(k for k in listing if k.startswith(f"{uid}_"))


def thin_question_image() -> list[dict]:
    """An image verl's processing refuses (aspect ratio 300 > qwen-vl-utils' 200): every member raises."""
    return [{"type": "image", "image": Image.new("RGB", (6000, 20), "red")}, {"type": "text", "text": "Which city?"}]


def closes_held_until_opens(n: int):
    """A middleware that holds session closes until ``n`` session opens were answered: a group's sessions overlap
    however loaded the machine is, so a server at ``max_sessions=n - 1`` refuses exactly one member (without it, a
    member that finished before the last one opened let that one in)."""
    opened = 0
    all_opened = asyncio.Event()

    @web.middleware
    async def hold(request: web.Request, handler):
        nonlocal opened
        if request.method == "DELETE" and request.path.startswith("/v1/sessions/"):
            await asyncio.wait_for(all_opened.wait(), HANG_GUARD_S)
        try:
            return await handler(request)
        finally:
            if request.method == "POST" and request.path == "/v1/sessions":
                opened += 1
                if opened >= n:
                    all_opened.set()

    return hold


class StandInPPOStep:
    """Stand-in for verl's ``PPOTrainerSync._step_once`` (its PPO pipeline needs GPU workers): returns the sampled
    batch as verl's replay buffer materializes it, every row of the sampled groups."""

    uids: list[str] = []

    def _step_once(self, metrics: dict, timing_raw: dict, sample_batch_size: int) -> KVBatchMeta:
        listing = tq.kv_list("train")["train"]
        keys = [k for k in listing if any(k.startswith(f"{uid}_") for uid in self.uids)]  # not the status keys
        return KVBatchMeta(partition_id="train", keys=keys, tags=[listing[k] for k in keys])


class _Trainer(MixedGroupSamplingMixin, StandInPPOStep):
    pass


async def test_without_the_sampler_a_refused_session_open_does_not_hang_its_group_and_is_counted(
    transfer_queue, tool_server_with, config_for, tiny_vl_model, tiny_vl_processor, caplog
):
    # the last member to open is refused ("too_many_sessions")
    server = await tool_server_with((closes_held_until_opens(N),), max_sessions=N - 1)
    config = config_for(server, "+trainer.v1.neos.sampler.enable=false")
    worker = worker_for(config, tiny_vl_model, tiny_vl_processor)
    uid = "faultrefused"
    await run_prompt(worker, row(uid, "What is the capital of France?"))

    listing, keys = rows_of(uid)
    assert listing[uid]["status"] == "failure"  # verl's mark for a group with a failed session
    assert len(keys) == N - 1  # the two members that ran are in TransferQueue
    extra = list(tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["extra_fields"])["extra_fields"])
    answers = sorted(e[RECORD_KEY]["final_answer"] for e in extra)
    assert answers == ["Lyon", "Paris"]
    # The siblings were assessed among themselves: the failure is labelled against the success.
    failure = next(e for e in extra if e[RECORD_KEY]["final_answer"] == "Lyon")
    assert CreditLabels.model_validate(failure[CREDIT_KEY]).assessed
    assert worker.assessor._groups == {} and worker._submitted == set()

    # The trainer counts the missing member of the sampled group and warns (1 of 3 > 5%).
    trainer = object.__new__(_Trainer)
    trainer.config, trainer.uids = config, [uid]
    metrics: dict = {}
    with caplog.at_level(logging.WARNING, logger="verl_ext.trainer.metrics"):
        trainer._step_once(metrics, {}, sample_batch_size=1)
    assert metrics[FAILED_SESSIONS] == 1.0 and metrics[FAILED_SESSION_SHARE] == pytest.approx(1 / 3)
    assert "1 of 3 trajectories" in caplog.text
    tq.kv_clear(keys=[uid, *keys], partition_id="train")


async def test_without_the_sampler_a_processor_error_fails_the_whole_group_in_bounded_time(
    transfer_queue, tool_server, config_for, tiny_vl_model, tiny_vl_processor
):
    media.QUESTION_MEDIA.clear()
    config = config_for(tool_server, "+trainer.v1.neos.sampler.enable=false")
    worker = worker_for(config, tiny_vl_model, tiny_vl_processor)
    uid = "faultprocessor"
    await run_prompt(worker, row(uid, thin_question_image()))
    listing, keys = rows_of(uid)
    assert listing[uid]["status"] == "failure" and keys == []
    assert worker.assessor._groups == {}  # every member withdrawn: nothing left waiting in the assessor

    trainer = object.__new__(_Trainer)
    trainer.config, trainer.uids = config, [uid]
    metrics: dict = {}
    trainer._step_once(metrics, {}, sample_batch_size=1)
    assert (metrics[FAILED_SESSIONS], metrics[FAILED_SESSION_SHARE]) == (3.0, 1.0)
    tq.kv_clear(keys=[uid], partition_id="train")


async def test_with_the_sampler_faulty_sessions_end_with_a_failure_tag_and_the_others_finish(
    transfer_queue, tool_server_with, config_for, tiny_vl_model, tiny_vl_processor
):
    media.QUESTION_MEDIA.clear()
    server = await tool_server_with((closes_held_until_opens(N),), max_sessions=N - 1)
    worker = worker_for(config_for(server), tiny_vl_model, tiny_vl_processor)
    refused, processor = "faultsamplerrefused", "faultsamplerprocessor"
    await run_prompt(worker, row(refused, "What is the capital of France?", **{SESSIONS_KEY: [10, 11, 12]}))
    await run_prompt(worker, row(processor, thin_question_image(), **{SESSIONS_KEY: [13, 14, 15]}))

    listing = tq.kv_list("train")["train"]
    statuses = sorted(listing[admission_key(refused, s)]["status"] for s in (10, 11, 12))
    assert statuses == ["failure", "finished", "finished"]
    assert {listing[admission_key(processor, s)]["status"] for s in (13, 14, 15)} == {"failure"}
    _, keys = rows_of(refused)
    assert len(keys) == N - 1 and rows_of(processor)[1] == []
    extra = list(tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["extra_fields"])["extra_fields"])
    assert all(CREDIT_KEY not in e for e in extra)  # with the sampler, the trainer asks for judging (eligible groups)
    assert worker.assessor._groups == {} and not worker._sessions
    stale = [admission_key(u, s) for u, ss in ((refused, (10, 11, 12)), (processor, (13, 14, 15))) for s in ss]
    tq.kv_clear(keys=[*stale, *keys], partition_id="train")
