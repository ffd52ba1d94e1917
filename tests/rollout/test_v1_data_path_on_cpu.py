"""Turn spans and judge labels reach the advantage estimator inside verl's v1 trainer, through verl's real classes.

The path: our agent loop runs inside verl's own ``AgentLoopWorkerTQ._run_prompt`` (one group of ``rollout.n = 2``),
which puts every trajectory (tokens, ``response_mask``, ``extra_fields`` with our ``TrajectoryRecord``) into a real
TransferQueue on a local Ray; the reward step writes ``rm_scores`` back and the credit step writes the failure's
labels into its ``extra_fields``, as the trainer's steps do; then verl's ``PPOTrainer._compute_advantage``, wrapped
by ``TurnCreditAdvantageMixin``, fetches from TransferQueue and calls the registered ``neos_turn_credit``
estimator. Expected advantages are computed independently from the framework-free core on the record's spans.

Only the trainer object is not fully constructed (``object.__new__`` + its ``config``): building a real
``PPOTrainer`` needs GPU resource pools. Everything it calls (``_compute_old_log_prob`` in rollout-correction bypass
mode, ``_compute_advantage``) is verl's code.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from verl_ext.advantage.trainer_mixin import TurnCreditAdvantageMixin
from verl_ext.credit import CreditParams, rescale_advantages
from verl_ext.credit.labels import CREDIT_KEY, CreditLabels, LabelEvent
from verl_ext.rollout.hf_generate import GenerateCall, TransformersGenerateClient
from verl_ext.rollout.record import RECORD_KEY, TrajectoryRecord

from ..trainer.rehearsal import _ExactMatchScored
from .test_agent_loop_on_cpu import mask_runs

SEARCH = '<tool_call>\n{"name": "TextSearch", "arguments": {"query": ["capital of France"]}}\n</tool_call>'
SCRIPTS = ([SEARCH, "Paris"], [SEARCH, SEARCH, "Lyon"])  # one success (2 turns), one failure (3 turns)
UID = "datapath"  # the session's TransferQueue is shared: rows of this test are the ones under this uid


class _Trainer(TurnCreditAdvantageMixin, PPOTrainerSync):
    """verl's v1 sync trainer with our mixin, as the neos trainer will compose it."""


@pytest.fixture
def server_url(tool_server):
    return str(tool_server.make_url("")).rstrip("/")


@pytest.fixture
def config(compose_ppo_config, tiny_vl_model_dir, server_url):
    return compose_ppo_config(
        tiny_vl_model_dir,
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.prompt_length=2048",
        "actor_rollout_ref.rollout.response_length=2048",
        "actor_rollout_ref.rollout.agent.default_agent_loop=neos_search_agent",
        f"+actor_rollout_ref.rollout.custom.neos_rollout.tool_server_url={server_url}",
        "algorithm.adv_estimator=neos_turn_credit",
        "+algorithm.neos_credit.ablation=full",
        "algorithm.rollout_correction.bypass_mode=true",  # old log-probs = the rollout's (no actor here)
    )


async def run_group(worker_cls, config, model, processor, uid: str, plans, **row) -> tuple[dict, list[str]]:
    """One group (``rollout.n`` episodes of the neos loop) through ``worker_cls._run_prompt``, verl's code; episodes
    take the scripted ``plans`` in the order they first generate. Returns the TransferQueue listing and the group's
    keys ({uid}_{session}_{output}: the session's TransferQueue is shared, other tests' rows aside)."""
    scripts: dict[str, list[str]] = {}

    def forced(c: GenerateCall) -> str:
        if c.request_id not in scripts:
            scripts[c.request_id] = list(plans[len(scripts)])
        return scripts[c.request_id].pop(0)

    client = TransformersGenerateClient(model, processor, max_new_tokens=64, forced=forced)
    prompt = {
        "uid": uid,
        "raw_prompt": [{"role": "user", "content": "What is the capital of France?"}],
        "index": 0,
        "global_steps": 1,
        "agent_name": "neos_search_agent",
        **row,
    }
    trajectory = {"step": 1, "sample_index": 0, "rollout_n": 0, "validate": False}
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    await worker_cls(config, client)._run_prompt(prompt, sampling, trajectory=trajectory)
    listing = tq.kv_list("train")["train"]
    assert listing[uid]["status"] == "finished"
    return listing, sorted(k for k in listing if k.startswith(f"{uid}_"))


def compute_advantages(config, listing: dict, keys: list[str]) -> dict:
    """verl's ``_compute_old_log_prob`` (bypass mode) and ``_compute_advantage`` over ``keys``; returns the metrics."""
    trainer = object.__new__(_Trainer)
    trainer.config = config
    metrics: dict = {}
    batch = KVBatchMeta(keys=keys, tags=[listing[k] for k in keys], partition_id="train")
    trainer._compute_old_log_prob(batch, metrics)
    trainer._compute_advantage(batch, metrics)
    return metrics


async def test_spans_and_labels_reach_neos_turn_credit_inside_the_v1_trainer(
    transfer_queue, tiny_vl_model, tiny_vl_processor, config
):
    worker_cls = AgentLoopWorkerTQ.__ray_metadata__.modified_class  # verl's worker, in this process
    listing, keys = await run_group(worker_cls, config, tiny_vl_model, tiny_vl_processor, UID, SCRIPTS)
    assert keys == [f"{UID}_0_0", f"{UID}_1_0"]
    data = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["response_mask", "extra_fields"])
    extra = list(data["extra_fields"])  # a LinkedList, NonTensorStack or array depending on the backend
    records = [TrajectoryRecord.model_validate(e[RECORD_KEY]) for e in extra]
    masks = [m.tolist() for m in data["response_mask"].unbind()]
    success = [r.final_answer == "Paris" for r in records]
    assert sorted(success) == [False, True] and [len(r.turns) for r in records] == [2 if s else 3 for s in success]
    failure = success.index(False)

    # The reward step writes rm_scores back (outcome 1 at the last response token), as the reward loop does.
    rewards = [torch.zeros(len(m)) for m in masks]
    rewards[success.index(True)][-1] = 1.0
    tq.kv_batch_put(
        keys=keys,
        partition_id="train",
        fields=TensorDict({"rm_scores": torch.nested.as_nested_tensor(rewards, layout=torch.jagged)}, batch_size=2),
    )
    # The credit step labels the failure: turn 0 retrieved evidence, turn 1 (the repeated search) diverted.
    labels = CreditLabels(
        assessed=True,
        judge="test",
        num_turns=3,
        productive={0: 0.5},
        events=[LabelEvent(turn=1, type="causal_error", severity=0.8, confidence=0.9)],
    )
    extra[failure] = {**extra[failure], CREDIT_KEY: labels.model_dump(mode="json")}
    tq.kv_batch_put(
        keys=keys, partition_id="train", fields=tu.get_tensordict({"extra_fields": np.array(extra, dtype=object)})
    )

    metrics = compute_advantages(config, listing, keys)
    advantages = [
        a.tolist()
        for a in tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages"])["advantages"].unbind()
    ]

    # Expected: GRPO over r = [1, 0] gives A = +-1/sqrt(2); the failure's policy tokens get Eq. 7 over b * w, with
    # w = (lambda_p * 0.5, -max(kappa_e, 0.8 * 0.9), -lambda_d * 0.72) for turns 0, 1, 2 (turn 2 is downstream).
    a = 1 / np.sqrt(2)
    params = CreditParams()
    for row, (record, mask, adv) in enumerate(zip(records, masks, advantages)):
        assert [tuple(t.span) for t in record.turns] == mask_runs(mask)  # the spans are the mask's runs of 1s
        policy = [k for k, m in enumerate(mask) if m]
        off = [adv[k] for k, m in enumerate(mask) if not m]
        assert off == [0.0] * len(off)
        if row != failure:
            np.testing.assert_allclose([adv[k] for k in policy], a, rtol=1e-5)
            continue
        weight = {0: 0.1 * 0.5, 1: -0.72, 2: -0.5 * 0.72}
        turn_of = {k: t.index for t in record.turns for k in range(*t.span)}
        raw = [a * weight[turn_of[k]] for k in policy]
        np.testing.assert_allclose([adv[k] for k in policy], rescale_advantages(raw, -a, params), rtol=1e-5)
        first = [adv[k] for k in range(*record.turns[0].span)]
        assert all(x > 0 for x in first) and all(adv[k] < 0 for k in range(*record.turns[1].span))
    assert metrics["neos_credit/assessed_share"] == 0.5


async def test_the_neos_worker_labels_failures_as_soon_as_their_group_is_complete(
    transfer_queue, tiny_vl_model, tiny_vl_processor, config
):
    """Group assessment inside verl's ``_run_prompt``: the failure's labels are in TransferQueue when the group is
    marked finished, and the estimator uses them."""
    uid = "grouplabels"
    lyon = '<tool_call>\n{"name": "TextSearch", "arguments": {"query": ["Lyon"]}}\n</tool_call>'
    path = {"question": "Which city is the capital of France?", "evidence": ["capital of France"], "answer": "Paris"}
    row = {"extra_info": {"task_path": json.dumps(path)}, "reward_model": {"ground_truth": "Paris"}}
    plans = ([SEARCH, "Paris"], [SEARCH, lyon, "Lyon"])
    listing, keys = await run_group(_ExactMatchScored, config, tiny_vl_model, tiny_vl_processor, uid, plans, **row)
    extra = list(tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["extra_fields"])["extra_fields"])
    answers = [e[RECORD_KEY]["final_answer"] for e in extra]
    failure = extra[answers.index("Lyon")]
    assert CREDIT_KEY not in extra[answers.index("Paris")]
    labels = CreditLabels.model_validate(failure[CREDIT_KEY])
    # The offline path judge: turn 0 searched the path item, turn 1 left the path (Lyon), turn 2 answered off it.
    assert labels.assessed and labels.judge == "offline_path" and labels.num_turns == 3
    assert labels.productive == {0: 1.0}
    assert [(e.turn, e.type) for e in labels.events] == [(1, "causal_error")]

    metrics = compute_advantages(config, listing, keys)
    assert metrics["neos_credit/assessed_share"] == 0.5
