"""Mixed-group sampling through verl's real v1 classes on CPU.

Real: a TransferQueue on the session's Ray; our ``NeosAgentLoopWorker`` (verl's ``AgentLoopWorkerTQ`` underneath) with
verl's ``generate_sequences``/``_agent_loop_postprocess`` putting each trajectory and its ``rm_scores``; verl's
``_next_train_batch`` over a ``StatefulDataLoader`` with verl's ``collate_fn``; the offline credit judge.
Scripted: the agent loop (a registered ``AgentLoopBase`` whose outcome per question and sample is a table, and which
hangs for the questions the test wants cancelled), and the transport between buffer and worker (``LoopControl``
calls the worker's methods on this event loop instead of through Ray actor handles; ``RayRolloutControl`` is that
transport). The model workers' checkpoint (``_FakeModelCheckpoint``) is a stand-in too: it saves and restores only
the dataloader, as verl's own ``_save_checkpoint``/``_load_checkpoint`` do beside the actor's weights.

Scenario, B = 2 groups of G = 2, max_per_group 3, window 4, admission limit 8; the dataset's questions in order:
q0 succeeds then fails (mixed at G); q1 fails, fails, then succeeds (homogeneous at G, rescued by one extra sample);
q2's second sample crashes (aborted: the slot is freed, the sample still counts against max_per_group) and the
others hang (cancelled at the boundary; q2 is carried forward); q3 fails three times (an extra sample, then deferred);
q4 enters the window in q3's place and hangs. q1's success is held back until q3 is deferred, so every run takes the
same path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transfer_queue as tq
from omegaconf import open_dict
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    _agent_loop_registry,
)
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.rl_dataset import collate_fn

from verl_ext.credit.labels import CREDIT_KEY, CreditLabels
from verl_ext.rollout.record import RECORD_KEY, CallRecord, TrajectoryRecord, TurnRecord
from verl_ext.rollout.admission import admission_key
from verl_ext.rollout.tq_worker import NeosAgentLoopWorker
from verl_ext.trainer.metrics import failed_session_warn_share
from verl_ext.trainer.mei_coevolution import MEICoEvolutionMixin
from verl_ext.trainer.mixed_groups import (
    CHECKPOINT_FILE,
    MixedGroupReplayBuffer,
    MixedGroupSamplingMixin,
    mixed_group_settings,
)

from .rehearsal import InProcessRolloutControl

AGENT = "mixed_groups_scripted"
B, G = 2, 2
# question -> outcome of its k-th sample, per training step; None: the sample hangs until cancelled; "error": the
# agent loop raises (the session ends with a failure tag and no trajectory)
OUTCOMES: dict[int, dict[str, list[bool | str | None]]] = {
    1: {
        "q0": [True, False],
        "q1": [False, False, True],
        "q2": [None, "error", None],
        "q3": [False, False, False],
        "q4": [None, None, None],
    },
    2: {"q2": [True, False], "q4": [False, True], "q5": [None] * 3, "q6": [None] * 3},
    3: {f"q{i}": [False] * 3 for i in range(8)},  # a policy that solves nothing
    # MEI retention: q0 all-success (deferred), q1 mixed, q2 success-success-failure (its second success surplus),
    # q3 one success and the rest hanging (carried)
    4: {"q0": [True] * 3, "q1": [True, False], "q2": [True, True, False], "q3": [True, None, None]},
    # MEI retention at the last poll: all 8 first samples end before one poll; q1's 3 makes the batch ready
    5: {"q0": [True, False], "q1": [False, True], "q2": [True, True], "q3": [True, False]},
}


class Script:
    """What the scripted agent loop saw and is told (shared by the loop, the test's transport and the test)."""

    def __init__(self) -> None:
        self.calls: dict[tuple[int, str], list[int]] = defaultdict(list)  # (step, question) -> session ids, in order
        self.uids: dict[str, str] = {}  # question text -> verl's uid of its row (the sampler's question id)
        self.blocked: set[str] = set()  # admission keys of sessions waiting on purpose (hung or held back)
        # (step, question) -> its session ids in admission order
        self.sessions: dict[tuple[int, str], list[int]] = defaultdict(list)
        self.buffer: MixedGroupReplayBuffer | None = None
        # (step, question, k-th sample) -> the MEI call of its one turn
        self.mei_call_ids: dict[tuple[int, str, int], str] = {}


SCRIPT = Script()


class ScriptedLoop(AgentLoopBase):
    """Two response tokens, the outcome reward from ``OUTCOMES``, a minimal trajectory record for the judge."""

    async def run(self, sampling_params, **kwargs) -> AgentLoopOutput:
        question = kwargs["raw_prompt"][0]["content"]
        step = int(kwargs["global_steps"])
        calls = SCRIPT.calls[(step, question)]
        calls.append(int(kwargs["session_id"]))
        SCRIPT.uids[question] = str(kwargs["uid"])
        key = admission_key(str(kwargs["uid"]), int(kwargs["session_id"]))
        outcome = OUTCOMES[step][question][SCRIPT.sessions[(step, question)].index(int(kwargs["session_id"]))]
        if outcome is None:
            SCRIPT.blocked.add(key)
            await asyncio.Event().wait()  # only cancellation ends it
        if outcome == "error":
            raise RuntimeError("scripted agent-loop crash")
        if (step, question, len(calls)) == (1, "q1", 3):  # 8, q1's third: its first two have ended
            SCRIPT.blocked.add(key)
            while not SCRIPT.buffer.sampler.stats.deferred:  # q3's deferral first: see the module docstring
                await asyncio.sleep(0.01)
            SCRIPT.blocked.discard(key)
        k = SCRIPT.sessions[(step, question)].index(int(kwargs["session_id"]))
        mei_call = SCRIPT.mei_call_ids.get((step, question, k))
        turns = [] if mei_call is None else [
            TurnRecord(index=0, span=(0, 1), text="t", outcome="call_ok",
                       calls=[CallRecord(tool_name="WebVisit", arguments={}, ok=True, mei_call_ids=[mei_call],
                                         mei_versions=["v0"])]),
            TurnRecord(index=1, span=(1, 2), text="a", outcome="answer"),
        ]
        record = TrajectoryRecord(
            protocol="neos",
            question=question,
            session_id=str(kwargs["session_id"]),
            group_id=str(kwargs["uid"]),
            mei_version=None if mei_call is None else "v0",
            termination_reason="answer",
            final_answer="yes" if outcome else "no",
            turns=turns,
        )
        return AgentLoopOutput(
            prompt_ids=[1, 2, 3],
            response_ids=[4, 5],
            response_mask=[1, 1],
            reward_score=float(outcome),
            num_turns=2,
            metrics=AgentLoopMetrics(),
            extra_fields={RECORD_KEY: record.model_dump(mode="json")},
        )


class LoopControl(InProcessRolloutControl):
    """The buffer's rollout side on this event loop, with a dispatch that waits (see ``dispatch``)."""

    def dispatch(self, batch) -> None:
        """Dispatch, then wait until every session dispatched has ended or is waiting on purpose, so the buffer's
        next poll sees a fixed set of reports (the sampler's choices then do not depend on thread timing)."""
        keys = [admission_key(u, s) for u, ss in zip(batch["uid"], batch["__session_ids__"]) for s in ss]
        step = int(batch["global_steps"])
        for prompt, sessions in zip(batch["raw_prompt"], batch["__session_ids__"]):
            SCRIPT.sessions[(step, prompt[0]["content"])].extend(sessions)  # k-th admitted sample: OUTCOMES' k-th
        super().dispatch(batch)
        while True:
            listing = tq.kv_list("train")["train"]
            if all(listing[k].get("status") in ("finished", "failure") or k in SCRIPT.blocked for k in keys):
                return
            time.sleep(0.01)


class _FakeModelCheckpoint:
    """Stand-in for the model workers' part of verl's checkpoint: the global step and the dataloader (data.pt)."""

    def _save_checkpoint(self) -> None:
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        os.makedirs(folder, exist_ok=True)
        torch.save(self.train_dataloader.state_dict(), os.path.join(folder, "data.pt"))

    def _load_checkpoint(self) -> None:
        self.global_steps = int(Path(self.config.trainer.default_local_dir, "latest").read_text())
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        self.train_dataloader.load_state_dict(torch.load(os.path.join(folder, "data.pt"), weights_only=False))


class _Trainer(MixedGroupSamplingMixin, _FakeModelCheckpoint, PPOTrainerSync):
    """The mixin over verl's sync trainer, as ``NeosTrainer`` composes it."""


@pytest.fixture
def config(compose_ppo_config, tiny_vl_model_dir, tmp_path):
    return compose_ppo_config(
        tiny_vl_model_dir,
        f"actor_rollout_ref.rollout.n={G}",
        f"data.train_batch_size={B}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT}",
        "+trainer.v1.neos.sampler.max_per_group=3",
        "+trainer.v1.neos.sampler.window=4",
        "+trainer.v1.neos.sampler.admission_limit=8",
        "+trainer.v1.neos.sampler.poll_interval=0.02",
        f"trainer.default_local_dir={tmp_path}",
    )


DATASET = [
    {
        "raw_prompt": [{"role": "user", "content": f"q{i}"}],
        "agent_name": AGENT,
        "index": i,
        "extra_info": {"index": i},
        "reward_model": {"ground_truth": "yes"},
    }
    for i in range(8)
]


def make_trainer(config) -> _Trainer:
    """verl's trainer object without its GPU workers (``object.__new__``): the parts the sampler touches are real."""
    trainer = object.__new__(_Trainer)
    trainer.config = config
    trainer.trainer_mode, trainer.parameter_sync_step, trainer.global_steps = "sync", 1, 0
    trainer._one_question_per_fetch()  # the mixin's part of _init_dataloader (verl's part builds datasets from files)
    trainer.train_dataloader = StatefulDataLoader(DATASET, batch_size=1, shuffle=False, collate_fn=collate_fn)
    trainer.train_dataloader_it = None
    trainer.replay_buffer = trainer._build_replay_buffer()
    SCRIPT.buffer = trainer.replay_buffer
    return trainer


@pytest.fixture
def scripted_agent():
    _agent_loop_registry[AGENT] = {"_target_": ScriptedLoop}
    yield
    _agent_loop_registry.pop(AGENT, None)


def test_settings_come_from_trainer_v1_neos_sampler(config):
    sampler, poll, max_deferred = mixed_group_settings(config, groups=B)
    assert (sampler.groups, sampler.group_size, sampler.max_per_group, sampler.window) == (2, 2, 3, 4)
    assert (sampler.admission_limit, poll, max_deferred) == (8, 0.02, None)  # None: the dataset's size, later
    del config.trainer.v1.neos.sampler.window, config.trainer.v1.neos.sampler.admission_limit
    with open_dict(config):
        config.trainer.v1.neos.sampler.max_deferred = 0
    with pytest.raises(ValueError, match="max_deferred"):
        mixed_group_settings(config, groups=B)
    config.trainer.v1.neos.sampler.max_deferred = 5
    derived, _, max_deferred = mixed_group_settings(config, groups=B)
    assert max_deferred == 5
    assert (derived.window, derived.admission_limit) == (2 * B, 2 * B * G)  # SamplerConfig's defaults
    config.algorithm.filter_groups = {"enable": True, "metric": "acc"}
    with pytest.raises(ValueError, match="filter_groups"):
        make_trainer(config)
    config.algorithm.filter_groups.enable = False
    with open_dict(config):
        config.trainer.v1.sampler.custom_sampler = {"path": "my_buffer.py", "name": "MyBuffer"}
    with pytest.raises(ValueError, match="custom_sampler"):
        make_trainer(config)


def test_the_failed_session_warning_threshold_defaults_to_five_percent(config):
    assert failed_session_warn_share(config) == 0.05
    with open_dict(config):
        config.trainer.v1.neos.failed_session_warn_share = 1.5
    with pytest.raises(ValueError, match="failed_session_warn_share"):
        failed_session_warn_share(config)


async def sample(trainer, step: int):
    trainer.global_steps = step
    return await asyncio.to_thread(trainer.replay_buffer.sample, step, "train", B)


async def test_mixed_groups_batch_topups_deferral_cancel_and_resume(
    transfer_queue, config, tmp_path, scripted_agent, caplog
):
    caplog.set_level(logging.WARNING, logger="verl_ext.trainer.metrics")
    SCRIPT.calls.clear()
    SCRIPT.uids.clear()
    SCRIPT.blocked.clear()
    SCRIPT.sessions.clear()
    trainer = make_trainer(config)
    worker = NeosAgentLoopWorker(config, None)  # the scripted loop never generates
    control = LoopControl(worker, asyncio.get_running_loop())
    trainer.replay_buffer.bind(control)
    batch, metrics = await sample(trainer, 1)
    uid_of = dict(SCRIPT.uids)
    calls = {q: sorted(s) for (step, q), s in SCRIPT.calls.items() if step == 1}
    # Sessions, hand-computed (admission limit 8, window 4): q0 0-1, q1 2-3, q2 4-5, q3 6-7; after their reports
    # (q2's 5 aborted) the extras go to the homogeneous q1 (8) and q3 (9), then q2 lags (10); q3's 9 fails -> deferred;
    # q4 enters: 11, 12 and a further 13; q1's 8 succeeds -> B = 2 mixed groups.
    assert calls == {"q0": [0, 1], "q1": [2, 3, 8], "q2": [4, 5, 10], "q3": [6, 7, 9], "q4": [11, 12, 13]}
    # Exactly B x G trajectories: q0's two; q1's lowest failure (2) and its success (8); 3 is discarded.
    u = uid_of
    assert sorted(batch.keys) == sorted([f"{u['q0']}_0_0", f"{u['q0']}_1_0", f"{u['q1']}_2_0", f"{u['q1']}_8_0"])
    data = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["uid", "rm_scores", "extra_fields"])
    rows = list(zip(batch.keys, data["uid"], data["rm_scores"], data["extra_fields"], strict=True))
    rewards = {k: float(r.sum()) for k, _, r, _ in rows}
    assert rewards == {f"{u['q0']}_0_0": 1.0, f"{u['q0']}_1_0": 0.0, f"{u['q1']}_2_0": 0.0, f"{u['q1']}_8_0": 1.0}
    assert all(k.startswith(f"{uid}_") for k, uid, _, _ in rows)  # the group uid the estimator groups by
    # Each selected failure was judged before the batch came back; successes carry no labels.
    for _, _, reward, extra in rows:
        if float(reward.sum()) == 0.0:
            labels = CreditLabels.model_validate(extra[CREDIT_KEY])
            assert (labels.judge, labels.fallback_reason) == ("offline_path", "no_task_path")
        else:
            assert CREDIT_KEY not in extra
    # The boundary: the hanging samples of q2 and q4 were cancelled; nothing but the batch is left in TransferQueue.
    cancelled = [f"{u['q2']}-4", f"{u['q2']}-10", *(f"{u['q4']}-{s}" for s in (11, 12, 13))]
    assert sorted(control.cancelled) == sorted(cancelled)
    left = [k for k in tq.kv_list("train")["train"] if any(k.startswith(u) for u in uid_of.values())]
    assert sorted(left) == sorted(batch.keys)
    assert sorted(trainer.replay_buffer.rows) == sorted([uid_of["q2"], uid_of["q4"]])  # held for the next batch
    assert not worker._sessions
    assert metrics["neos_sampler/deferred"] == 1.0 and metrics["neos_sampler/rescued"] == 1.0
    assert metrics["neos_sampler/aborted"] == 1.0 and metrics["neos_sampler/finished"] == 8.0  # q0 2, q1 3, q3 3
    assert metrics["neos_sampler/admitted"] == 14.0 and metrics["neos_sampler/questions"] == 5.0
    assert metrics["neos_sampler/extra_admitted"] == 4.0  # 8, 9, 10, 13
    assert metrics["neos_sampler/reached_g"] == 3.0 and metrics["neos_sampler/homogeneous_at_g"] == 2.0
    assert metrics["neos_sampler/cancelled"] == 5.0 and metrics["neos_sampler/discarded"] == 1.0
    assert metrics["neos_sampler/selected"] == 4.0 and metrics["neos_sampler/carried"] == 2.0
    assert metrics["neos_sampler/judged_failures"] == 3.0  # q0's one, q1's two
    # q2's crashed sample is the batch's one failed session, of the 9 that ended (8 finished + 1 aborted): > 5%, warned
    assert metrics["neos_rollout/failed_sessions"] == 1.0
    assert metrics["neos_rollout/failed_session_share"] == pytest.approx(1 / 9)
    assert "1 of 9 trajectories" in caplog.text
    tq.kv_clear(keys=batch.keys, partition_id="train")  # what verl's fit() does after the step

    # Checkpoint after step 1, then a fresh trainer resumes: q2 and q4 (carried, rows from the checkpoint) make
    # step 2's batch; q5 and q6 come from where the dataloader stopped (after q4).
    trainer._save_checkpoint()
    (tmp_path / "latest").write_text("1")
    resumed = make_trainer(config)
    resumed._load_checkpoint()
    resumed.replay_buffer.bind(control)
    assert resumed.replay_buffer.sampler.batch == 1
    batch, metrics = await sample(resumed, 2)
    data = tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["extra_fields"])
    questions = sorted(e[RECORD_KEY]["question"] for e in data["extra_fields"])
    assert questions == ["q2", "q2", "q4", "q4"]
    step2 = {q: sorted(s) for (step, q), s in SCRIPT.calls.items() if step == 2}
    # The resumed sampler continues the run's session indices (14 on) and takes q5, q6 where the dataloader stopped.
    assert step2 == {"q2": [14, 15], "q4": [16, 17], "q5": [18, 19], "q6": [20, 21]}
    assert metrics["neos_sampler/cancelled"] == 4.0 and metrics["neos_sampler/selected"] == 4.0
    assert os.path.exists(tmp_path / "global_step_1" / CHECKPOINT_FILE)
    tq.kv_clear(keys=batch.keys, partition_id="train")


async def test_a_policy_that_solves_nothing_stops_with_a_clear_error(transfer_queue, config, scripted_agent):
    """Every group fails 3 times (max_per_group) and is deferred; past ``max_deferred`` (2) the sampler gives up
    instead of pulling questions forever from verl's repeating dataloader. Hand-computed: the window's q0-q3 get 2
    samples each (8 = the admission limit), all fail, each gets its extra third, all fail: the poll that reports them
    defers all 4 at once (12 judged)."""
    SCRIPT.sessions.clear()
    trainer = make_trainer(config)
    trainer.replay_buffer.max_deferred = 2
    trainer.replay_buffer.bind(LoopControl(NeosAgentLoopWorker(trainer.config, None), asyncio.get_running_loop()))
    with pytest.raises(RuntimeError, match=r"4 questions deferred in one batch \(12 trajectories judged, 0 of 2 mixed groups\)"):
        await sample(trainer, 3)
    tq.kv_clear(keys=list(tq.kv_list("train")["train"]), partition_id="train")


class _MEITrainer(MixedGroupSamplingMixin, MEICoEvolutionMixin, _FakeModelCheckpoint, PPOTrainerSync):
    """The sampler and MEI co-evolution mixins over verl's sync trainer, in ``NeosTrainer``'s order."""


def mei_trainer(config, tmp_path, step: int) -> _MEITrainer:
    """The sampler and MEI mixins over a fresh buffer, bound to the scripted loop, with one valid MEI call logged for
    every sample ``OUTCOMES[step]`` scripts (the turn of that sample's trajectory names it)."""
    from tool_server.mei.log import MEILog
    from tool_server.mei.schema import MEIContext
    from verl_ext.mei.buffer import MEIBuffer

    SCRIPT.sessions.clear()
    mei_log = MEILog(tmp_path / "mei.jsonl", fsync_every=1)
    output = {"rational": "r", "evidence": "e", "summary": "s", "relevant_images": []}
    for question, outcomes in OUTCOMES[step].items():
        for k in range(len(outcomes)):
            SCRIPT.mei_call_ids[(step, question, k)] = mei_log.append(
                ctx=MEIContext(session_id=f"{question}-{k}", turn=0, tool="WebVisit"), method="web_visit",
                mei_version="v0", outcome="valid", latency_s=0.1, input={"goal": "g"}, output=output,
                messages=[{"role": "user", "content": f"goal of {question} sample {k}"}])
    mei_log.close()
    with open_dict(config):
        config.trainer.v1.neos.mei = {"enable": True, "log_path": str(mei_log.path)}
    trainer = object.__new__(_MEITrainer)
    trainer.__dict__.update(make_trainer(config).__dict__)
    trainer.replay_buffer.keep_unselected_successes = True  # what MEICoEvolutionMixin.init sets
    trainer.mei_buffer = MEIBuffer(tmp_path / "buffer")
    trainer.replay_buffer.bind(LoopControl(NeosAgentLoopWorker(config, None), asyncio.get_running_loop()))
    return trainer


async def test_mei_retains_successes_of_every_group_of_the_round(transfer_queue, config, scripted_agent, tmp_path):
    """Neos §3.5: correct trajectories contribute all valid MEI calls, whether or not their group is selected.
    Hand-computed schedule (B = G = 2, max 3 per group, window 4, limit 8): q0 0-1, q1 2-3, q2 4-5, q3 6-7 (7 hangs);
    then the extras q0 8 (success: q0 deferred, all-success), q2 9 (failure: q2 mixed) and q3 10 (hangs). Selected:
    q1 {2, 3} and q2 {4, 9}; completed but unselected: q0's 0, 1, 8 (deferred), q2's 5 (surplus), q3's 6 (carried).
    Each trajectory made one valid MEI call; the selected failures were judged without a path (not assessed), so they
    give nothing: retained = the selected successes 2 and 4 and the unselected successes 0, 1, 8, 5, 6."""
    trainer = mei_trainer(config, tmp_path, 4)
    batch, _ = await sample(trainer, 4)
    metrics: dict[str, float] = {}
    trainer._retain_mei_calls(batch, metrics)

    retained = [(c.trajectory_session, c.reason) for c in trainer.mei_buffer.pending().calls]
    assert retained == [("2", "success"), ("4", "success"),  # the selected batch first, in key order
                        ("0", "success"), ("1", "success"), ("5", "success"), ("6", "success"), ("8", "success")]
    mei_of = {s: c.call.call_id for (s, _), c in zip(retained, trainer.mei_buffer.pending().calls, strict=True)}
    assert mei_of["8"] == SCRIPT.mei_call_ids[(4, "q0", 2)] and mei_of["5"] == SCRIPT.mei_call_ids[(4, "q2", 1)]
    assert metrics["mei/selection/unselected_successes"] == 5.0
    assert metrics["mei/selection/unselected_failures"] == 0.0
    assert metrics["mei/selection/ineligible_trajectory"] == 2.0  # the selected failures 3 and 9, not assessed
    assert metrics["mei/retained_calls"] == 7.0 and metrics["mei/selection/retained_success"] == 7.0
    assert trainer.replay_buffer.take_unselected_successes() == ([], 0)  # taken once
    assert not [k for k in tq.kv_list("train")["train"] if k not in batch.keys]  # the close still cleared the rest
    tq.kv_clear(keys=batch.keys, partition_id="train")


async def test_mei_retains_successes_that_ended_in_the_poll_that_made_the_batch_ready(
    transfer_queue, config, scripted_agent, tmp_path
):
    """Issue 34 item 4. All 8 first samples (q0 0-1, q1 2-3, q2 4-5, q3 6-7) end before the buffer's one poll, which
    reports them in session order: q1's 3 makes B = 2 groups eligible (q0, q1) with 4-7 still to report. They ended,
    so they are reported too: q2's 4 and 5 and q3's 6 are unselected successes, q3's 7 an unselected failure; nothing
    is left to cancel. Retained: the selected successes 0 and 3, then 4, 5, 6; the selected failures 1 and 2 are not
    assessed (no task path), so they give nothing."""
    trainer = mei_trainer(config, tmp_path, 5)
    batch, sampler_metrics = await sample(trainer, 5)
    metrics: dict[str, float] = {}
    trainer._retain_mei_calls(batch, metrics)

    retained = [(c.trajectory_session, c.reason) for c in trainer.mei_buffer.pending().calls]
    assert retained == [("0", "success"), ("3", "success"), ("4", "success"), ("5", "success"), ("6", "success")]
    assert metrics["mei/selection/unselected_successes"] == 3.0
    assert metrics["mei/selection/unselected_failures"] == 1.0
    assert sampler_metrics["neos_sampler/finished"] == 8.0 and sampler_metrics["neos_sampler/cancelled"] == 0.0
    assert not [k for k in tq.kv_list("train")["train"] if k not in batch.keys]
    tq.kv_clear(keys=batch.keys, partition_id="train")


def test_bad_wiring_is_refused_with_a_clear_error(transfer_queue):
    """No reward at sampling time, or a stock agent-loop manager (its workers cannot run single sessions)."""
    from tensordict import TensorDict

    from verl_ext.trainer.mixed_groups import RayRolloutControl

    key = "noreward_3_0"
    tq.kv_batch_put(keys=[key], partition_id="train", fields=TensorDict({"x": torch.zeros(1, 2)}, batch_size=1))
    with pytest.raises(RuntimeError, match="rm_scores"):
        MixedGroupReplayBuffer._rewards([key])
    tq.kv_clear(keys=[key], partition_id="train")

    stock_manager = SimpleNamespace(agent_loop_workers=[object()])  # a worker handle without cancel_sessions
    with pytest.raises(TypeError, match="NeosAgentLoopManagerTQ"):
        RayRolloutControl(stock_manager)


def test_ray_transport_reaches_the_worker_actor(transfer_queue, config):
    """``RayRolloutControl`` against our worker as a real Ray actor (another process, the working tree on its path):
    ``cancel_sessions`` and ``assess_failures`` through actor handles, the labels written from that process."""
    import ray

    from verl_ext.rollout.tq_worker import NeosAgentLoopWorkerTQ
    from verl_ext.trainer.mixed_groups import RayRolloutControl

    repo = str(Path(__file__).resolve().parents[2])
    actor = NeosAgentLoopWorkerTQ.options(runtime_env={"env_vars": {"PYTHONPATH": repo}}).remote(
        config, None
    )
    try:
        control = RayRolloutControl(SimpleNamespace(agent_loop_workers=[actor]))
        control.cancel(["raytransport-1"])  # nothing of that name runs there: a no-op, not an error
        records = [
            TrajectoryRecord(
                protocol="neos",
                question="q",
                session_id=str(s),
                group_id="raytransport",
                mei_version=None,
                termination_reason="answer",
                final_answer=answer,
            ).model_dump(mode="json")
            for s, answer in ((0, "yes"), (1, "no"))
        ]
        keys = ["raytransport_0_0", "raytransport_1_0"]
        extra = np.array([{RECORD_KEY: r} for r in records], dtype=object)
        tq.kv_batch_put(keys=keys, partition_id="train", fields=tu.get_tensordict({"extra_fields": extra}))
        control.wait([control.assess(keys[0], keys[1:], {"extra_info": {}, "reward_model": {"ground_truth": "yes"}})])
        rows = list(tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["extra_fields"])["extra_fields"])
        assert CREDIT_KEY not in rows[0]
        labels = CreditLabels.model_validate(rows[1][CREDIT_KEY])
        assert (labels.judge, labels.fallback_reason) == ("offline_path", "no_task_path")  # the task has no path
        tq.kv_clear(keys=keys, partition_id="train")
    finally:
        ray.kill(actor)
