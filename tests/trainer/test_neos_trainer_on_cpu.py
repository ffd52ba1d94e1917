"""The ``neos`` v1 trainer's contract with verl: its registration and bases, verl's on-policy branches, and the MEI
co-evolution hook that runs after each actor update (through a real TransferQueue and a real MEI log)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1 import get_trainer_cls
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from tool_server.mei.log import MEILog
from tool_server.mei.schema import MEIContext
from verl_ext.advantage.trainer_mixin import TurnCreditAdvantageMixin
from verl_ext.credit.labels import CREDIT_KEY, CreditLabels, LabelEvent
from verl_ext.mei.buffer import MEIBuffer
from verl_ext.rollout.record import RECORD_KEY, CallRecord, TrajectoryRecord, TurnRecord
from verl_ext.trainer.mei_coevolution import MEICoEvolutionMixin
from verl_ext.trainer.mixed_groups import MixedGroupReplayBuffer, MixedGroupSamplingMixin
from verl_ext.trainer.neos_trainer import NeosTrainer


def compose(*overrides: str):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


def test_registered_as_neos_with_our_hooks_before_verls_sync_trainer():
    assert get_trainer_cls("neos") is NeosTrainer
    mro = NeosTrainer.__mro__
    assert mro.index(MixedGroupSamplingMixin) < mro.index(PPOTrainerSync)
    assert mro.index(MEICoEvolutionMixin) < mro.index(PPOTrainerSync)
    assert mro.index(TurnCreditAdvantageMixin) < mro.index(PPOTrainerSync)


def test_runs_verls_on_policy_branches_under_its_own_name(tmp_path, monkeypatch):
    monkeypatch.setenv("NEOS_SMOKE_DATA", str(tmp_path))
    monkeypatch.setenv("NEOS_SMOKE_MODEL", str(tmp_path))
    config = compose("+recipe=neos_smoke", "trainer.v1.neos.sampler.enable=true")  # neos' default; smoke's is off
    assert config.trainer.v1.trainer_mode == "neos"
    trainer = NeosTrainer(config)
    # verl picks the async replay buffer (and TransferQueue checkpoints, re-issued prompts) for any mode but "sync"
    assert trainer.trainer_mode == "sync"
    assert isinstance(trainer.replay_buffer, MixedGroupReplayBuffer)
    assert not isinstance(trainer.replay_buffer, ReplayBufferAsync)
    # The recipe's B and G reach the sampler: B = 2 groups of G = 4, window 2B, admission limit 2BG, 1.5G per group.
    sampler = trainer.replay_buffer.sampler.config
    assert (sampler.groups, sampler.group_size, sampler.window, sampler.admission_limit) == (2, 4, 4, 16)
    assert sampler.max_per_group == 6
    # ... or verl's own on-policy batches when the sampler is off, as in the smoke recipe.
    plain = NeosTrainer(compose("+recipe=neos_smoke"))
    assert type(plain.replay_buffer) is ReplayBuffer and plain.trainer_mode == "sync"


def test_refuses_to_start_when_nothing_would_freeze_the_vision_tower(tmp_path, monkeypatch, caplog):
    """Neos, Appendix C freezes the policy's tower; verl reads ``freeze_vision_tower`` nowhere, so a config in which
    none of our mechanisms acts would train it silently: the trainer stops before any worker exists."""
    monkeypatch.setenv("NEOS_SMOKE_DATA", str(tmp_path))
    monkeypatch.setenv("NEOS_SMOKE_MODEL", str(tmp_path))
    monkeypatch.delenv("NEOS_FREEZE_VISION_TOWER", raising=False)
    with pytest.raises(ValueError, match=r"env_vars\.NEOS_FREEZE_VISION_TOWER='1'"):
        NeosTrainer(compose("+recipe=neos_smoke", "~ray_kwargs.ray_init.runtime_env.env_vars.NEOS_FREEZE_VISION_TOWER"))
    # The smoke recipe itself (FSDP1) starts, with the warning that its freeze is approximate (weight decay).
    with caplog.at_level("WARNING", logger="verl_ext.trainer.neos_trainer"):
        NeosTrainer(compose("+recipe=neos_smoke"))
    assert "strategy=fsdp2 freezes them exactly" in caplog.text


def _turn(i: int, call_ids: list[str]) -> TurnRecord:
    call = CallRecord(tool_name="WebVisit", arguments={"url": ["u"], "goal": "g"}, ok=True, mei_call_ids=call_ids,
                      mei_versions=["v0"] * len(call_ids))
    return TurnRecord(index=i, span=(4 * i, 4 * i + 3), text="t", outcome="call_ok", calls=[call])


def _record(session: str, call_ids_per_turn: list[list[str]]) -> dict:
    turns = [_turn(i, ids) for i, ids in enumerate(call_ids_per_turn)]
    turns.append(TurnRecord(index=len(turns), span=(40, 42), text="a", outcome="answer"))
    return TrajectoryRecord(protocol="neos", question="q", session_id=session, group_id="g", mei_version="v0",
                            termination_reason="answer", final_answer="a", turns=turns).model_dump(mode="json")


def test_after_each_update_the_selected_batchs_calls_are_retained_by_the_papers_rule(transfer_queue, tmp_path):
    # A real MEI log as the tool server writes it: five valid calls and one that fell back to the extractive MEI.
    mei_log = MEILog(tmp_path / "mei.jsonl", fsync_every=1)
    messages = [{"role": "user", "content": "goal: g"}]
    output = {"rational": "r", "evidence": "e", "summary": "s", "relevant_images": []}

    def call(outcome: str = "valid") -> str:
        return mei_log.append(ctx=MEIContext(session_id="s", turn=0, tool="WebVisit"), method="web_visit",
                              mei_version="v0", outcome=outcome, latency_s=0.1, input={"goal": "g"}, output=output,
                              messages=messages)

    s_ok, s_fallback, f_productive, f_error, f_corrective, padded = (call(), call("fallback"), call(), call(), call(),
                                                                      call())
    mei_log.close()
    failure_labels = CreditLabels(
        assessed=True, judge="test", num_turns=4,
        events=[LabelEvent(turn=1, type="causal_error", severity=0.8, confidence=0.9),
                LabelEvent(turn=2, type="recovery", severity=0.0, confidence=0.7)],
        productive={0: 0.5})
    rows = [  # success: every valid call; failure: its productive (t0) and corrective (t2) turns only
        {"extra_fields": {RECORD_KEY: _record("s1", [[s_ok, s_fallback]])}, "rm_scores": torch.tensor([0.0, 1.0])},
        {"extra_fields": {RECORD_KEY: _record("f1", [[f_productive], [f_error], [f_corrective]]),
                          CREDIT_KEY: failure_labels.model_dump(mode="json")},
         "rm_scores": torch.tensor([0.0, 0.0, 0.0])},
        {"extra_fields": {RECORD_KEY: _record("s2", [[padded]])}, "rm_scores": torch.tensor([1.0])},  # padding row
    ]
    keys = ["u_0_0", "u_1_0", "u_2_0"]
    transfer_queue.kv_batch_put(keys=keys, partition_id="mei_test", fields=tu.list_of_dict_to_tensordict(rows),
                                tags=[{}, {}, {}])
    batch = KVBatchMeta(partition_id="mei_test", keys=keys, tags=[{}, {}, {"is_padding": True}])

    trainer = object.__new__(NeosTrainer)  # only the hook's own state: no workers, no GPU
    trainer.config = OmegaConf.create({"trainer": {"v1": {"neos": {"mei": {"log_path": str(mei_log.path)}}}}})
    trainer.mei_buffer = MEIBuffer(tmp_path / "buffer")
    metrics: dict[str, float] = {}
    trainer._retain_mei_calls(batch, metrics)

    retained = [(c.call.call_id, c.reason, c.turn) for c in trainer.mei_buffer.pending().calls]
    assert retained == [(s_ok, "success", 0), (f_productive, "productive", 0), (f_corrective, "corrective", 2)]
    assert metrics["mei/retained_calls"] == 3.0
    assert (metrics["mei/round_versions"], metrics["mei/round_unexpected_version_calls"]) == (1.0, 0.0)  # all v0
    assert metrics["mei/selection/skipped_fallback"] == 1.0 and metrics["mei/selection/ineligible_turn"] == 1.0
    # A crash now loses nothing: a new buffer on the same directory (the crashed process's lock gone) sees the same
    # pending calls.
    trainer.mei_buffer.close()
    assert [c.call.call_id for c in MEIBuffer(tmp_path / "buffer").pending().calls] == [s_ok, f_productive,
                                                                                           f_corrective]
    transfer_queue.kv_clear(keys=keys, partition_id="mei_test")


def test_batch_metrics_tool_mix_and_credit_composition_hand_computed():
    from verl_ext.credit import CreditParams
    from verl_ext.trainer.metrics import batch_metrics

    # f1: t0 productive, t1 causal error, t2 unlabelled inside the open branch -> downstream, t3 recovery,
    # t4 unlabelled after the recovery -> neutral.
    f1 = CreditLabels(assessed=True, judge="test", num_turns=5,
                      events=[LabelEvent(turn=1, type="causal_error", severity=0.8, confidence=0.9),
                              LabelEvent(turn=3, type="recovery", severity=0.0, confidence=0.7)],
                      productive={0: 0.5})
    unjudged = CreditLabels(assessed=False, judge="test", num_turns=2, fallback_reason="timeout")
    rows = [
        {RECORD_KEY: _record("s1", [["a"], ["b"]])},  # 2 WebVisit calls
        {RECORD_KEY: _record("f1", [["c"], [], [], []]), CREDIT_KEY: f1.model_dump(mode="json")},  # 4 WebVisit
        {RECORD_KEY: _record("f2", [["d"]]), CREDIT_KEY: unjudged.model_dump(mode="json")},  # 1 WebVisit, no types
        None,  # a row of another agent loop
    ]
    got = batch_metrics(rows, CreditParams())
    assert got["neos_tools/calls_per_trajectory/WebVisit"] == 7 / 3
    assert {k.rsplit("/", 1)[1]: v for k, v in got.items() if "turn_share" in k} == {
        "productive": 0.2, "causal_error": 0.2, "re_derailment": 0.0, "downstream": 0.2, "recovery": 0.2,
        "neutral": 0.2}
    assert "neos_credit/turn_share/neutral" not in batch_metrics(rows[:1], CreditParams())  # nothing judged
    assert "neos_reward/judge_fallback_share" not in got  # no answer went to an LLM judge
    assert got["neos_rollout/termination_share/answer"] == 1.0
    assert not any("turn_errors" in k for k in got)  # every turn was a clean call or the answer
    # 10 turns: 7 well-formed WebVisit calls (2 + 4 + 1) and 3 answers
    assert {k.rsplit("/", 1)[1]: v for k, v in got.items() if "turn_outcome_share" in k} == {
        "call_ok": 7 / 10, "answer": 3 / 10}


def test_batch_metrics_say_why_a_run_made_no_tool_call():
    # A weakly warm-started policy: two trajectories of malformed calls (one also a bad format) that hit the turn
    # limit, one that answered at once; per trajectory, 4 malformed calls and 1 bad format over 3 = 4/3 and 1/3.
    from verl_ext.credit import CreditParams
    from verl_ext.trainer.metrics import batch_metrics

    def trajectory(errors: list[str], ending: str) -> dict:
        turns = [TurnRecord(index=i, span=(2 * i, 2 * i + 1), text="x", outcome="no_action", error_class="agent",
                            error_type=e) for i, e in enumerate(errors)]
        turns.append(TurnRecord(index=len(turns), span=(40, 42), text="a", outcome="answer"))
        return {RECORD_KEY: TrajectoryRecord(protocol="neos", question="q", session_id=None, group_id="g",
                                             mei_version=None, termination_reason=ending, turns=turns,
                                             ).model_dump(mode="json")}

    rows = [trajectory(["malformed_call"] * 3, "max_turns"), trajectory(["malformed_call", "bad_format"], "max_turns"),
            trajectory([], "answer")]
    got = batch_metrics(rows, CreditParams())
    assert got["neos_rollout/turn_errors_per_trajectory/malformed_call"] == 4 / 3
    assert got["neos_rollout/turn_errors_per_trajectory/bad_format"] == 1 / 3
    assert got["neos_rollout/termination_share/max_turns"] == 2 / 3
    assert got["neos_rollout/termination_share/answer"] == 1 / 3
    assert not any(k.startswith("neos_tools/calls_per_trajectory") for k in got)
    # 8 turns: 5 malformed (no_action), 3 answers; not one well-formed call
    assert {k.rsplit("/", 1)[1]: v for k, v in got.items() if "turn_outcome_share" in k} == {
        "no_action": 5 / 8, "answer": 3 / 8}


def test_batch_metrics_answer_judge_fallback_share_over_llm_judged_answers():
    from verl_ext.credit import CreditParams
    from verl_ext.trainer.metrics import batch_metrics

    rows = [{"reward_extra_info": {"judge": source}} for source in ("llm", "llm", "rule_fallback", "rule")]
    assert batch_metrics(rows, CreditParams())["neos_reward/judge_fallback_share"] == 1 / 3  # "rule" was a choice


def test_group_metrics_count_the_batchs_groups_by_outcome_mix_from_transfer_queue(transfer_queue):
    # q1: success and failure (mixed); q2: two failures; q3: one success (its second row is padding, not counted:
    # it would make q3 look mixed if its score were read); rewards at 0.5 count as successes (the threshold).
    from verl_ext.trainer.metrics import group_metrics
    from verl_ext.trainer.rows import selected_groups

    rows = [("q1", [0.0, 1.0]), ("q1", [0.0, 0.0]), ("q2", [0.0, 0.2]), ("q2", [0.0, 0.0]), ("q3", [0.0, 0.5]),
            ("q3", [0.0, 0.0])]
    keys = [f"{uid}_{i}_0" for i, (uid, _) in enumerate(rows)]
    fields = tu.list_of_dict_to_tensordict([{"uid": uid, "rm_scores": torch.tensor(r)} for uid, r in rows])
    transfer_queue.kv_batch_put(keys=keys, partition_id="groups_test", fields=fields, tags=[{}] * len(keys))
    batch = KVBatchMeta(partition_id="groups_test", keys=keys, tags=[{}] * 5 + [{"is_padding": True}])

    groups, scores = selected_groups(batch)
    assert groups == ["q1", "q1", "q2", "q2", "q3"] and scores == pytest.approx([1.0, 0.0, 0.2, 0.0, 0.5])
    assert group_metrics(groups, scores) == pytest.approx({"neos_groups/mixed_share": 1 / 3,
                                                           "neos_groups/all_success_share": 1 / 3,
                                                           "neos_groups/all_failure_share": 1 / 3})
    assert group_metrics([], []) == {}  # an empty batch logs nothing rather than a 0 share
    transfer_queue.kv_clear(keys=keys, partition_id="groups_test")


def test_a_round_spanning_two_mei_versions_is_counted_and_warned(caplog):
    from verl_ext.mei.selection import RolloutResult
    from verl_ext.trainer.mei_coevolution import version_mix

    def result(session: str, versions: list[str]) -> RolloutResult:
        ids = [f"c{i}" for i in range(len(versions))]
        call = CallRecord(tool_name="WebVisit", arguments={}, ok=True, mei_call_ids=ids, mei_versions=versions)
        turn = TurnRecord(index=0, span=(0, 3), text="t", outcome="call_ok", calls=[call])
        record = TrajectoryRecord(protocol="neos", question="q", session_id=session, group_id="g",
                                  mei_version=versions[0], termination_reason="answer", final_answer="a", turns=[turn])
        return RolloutResult(record, success=True, selected=True)

    assert version_mix([result("a", ["v1", "v1"]), result("b", ["v1"])], "v1") == {
        "mei/round_versions": 1.0, "mei/round_unexpected_version_calls": 0.0}
    assert version_mix([result("a", ["v1"]), result("b", ["v2", "v2"])], "v1") == {
        "mei/round_versions": 2.0, "mei/round_unexpected_version_calls": 2.0}
    assert version_mix([], "v1") == {"mei/round_versions": 0.0, "mei/round_unexpected_version_calls": 0.0}


def test_mei_worker_follows_the_policys_engine_and_placement(tiny_vl_model_dir):
    """The paper's recipe (Megatron policy, the MEI on 8 GPUs of its own) gets verl's Megatron engine config for the
    MEI SFT workers; co-located (pool=shared) their weights and Adam state are offloaded between updates; an FSDP
    policy gets FSDP; a dedicated pool keeps them on its GPUs. (The Megatron model itself needs Transformer Engine,
    absent here: only the config is built.)"""
    from verl.workers.config import FSDPEngineConfig, McoreEngineConfig

    from verl_ext.mei.worker import worker_config
    from verl_ext.trainer.mei_coevolution import mei_placement, mei_train_settings

    paper = compose("+recipe=neos").trainer.v1.neos.mei  # Neos §4.1: 8 GPUs of its own for MEI serving and SFT
    assert (mei_placement(paper), paper.n_gpus_per_node, paper.nnodes) == ("dedicated", 8, 1)
    neos = compose("+recipe=neos", "trainer.v1.neos.mei.pool=shared")
    assert neos.actor_rollout_ref.actor.strategy == "megatron"
    settings = mei_train_settings(neos, str(tiny_vl_model_dir))
    assert (settings.engine, settings.param_offload, settings.optimizer_offload) == ("megatron", True, True)
    engine = worker_config(settings).engine_config
    assert isinstance(engine, McoreEngineConfig) and (engine.param_offload, engine.optimizer_offload) == (True, True)
    assert engine.dtype == "bfloat16" and engine.use_distributed_optimizer  # fp32 main params in the optimizer

    fsdp = compose("+recipe=neos", "model_engine=dp")
    settings = mei_train_settings(fsdp, str(tiny_vl_model_dir))
    assert (settings.engine, settings.param_offload, settings.optimizer_offload) == ("fsdp", False, False)
    assert isinstance(worker_config(settings).engine_config, FSDPEngineConfig)
    explicit = compose("+recipe=neos", "trainer.v1.neos.mei.pool=shared", "+trainer.v1.neos.mei.train.engine=fsdp",
                       "+trainer.v1.neos.mei.train.param_offload=false")
    settings = mei_train_settings(explicit, str(tiny_vl_model_dir))
    assert (settings.engine, settings.param_offload, settings.optimizer_offload) == ("fsdp", False, True)
    with pytest.raises(ValueError, match="trainer.v1.neos.mei.pool"):
        mei_placement(OmegaConf.create({"pool": "elsewhere"}))


def test_a_dedicated_mei_pool_joins_verls_resource_pool_spec(tmp_path, monkeypatch):
    """``pool: dedicated`` adds the MEI pool to verl's spec beside the policy's, so verl's own resource check and
    pool creation include it; ``shared`` leaves verl's spec alone."""
    from verl_ext.trainer.mei_coevolution import MEI_POOL

    monkeypatch.setenv("NEOS_SMOKE_DATA", str(tmp_path))
    monkeypatch.setenv("NEOS_SMOKE_MODEL", str(tmp_path))
    trainer = NeosTrainer(compose("+recipe=neos_smoke", "++trainer.v1.neos.mei.pool=dedicated",
                                  "++trainer.v1.neos.mei.n_gpus_per_node=2", "++trainer.v1.neos.mei.nnodes=2"))
    trainer._init_resource_pool_mgr()
    assert trainer.resource_pool_manager.resource_pool_spec == {"global_pool": [1], MEI_POOL: [2, 2]}
    assert trainer.resource_pool_manager.get_n_gpus() == 5
    shared = NeosTrainer(compose("+recipe=neos_smoke"))
    shared._init_resource_pool_mgr()
    assert shared.resource_pool_manager.resource_pool_spec == {"global_pool": [1]}


def test_serve_needs_the_dedicated_pool_and_is_off_by_default(tmp_path, monkeypatch):
    """``serve.enable`` starts the MEI server on the MEI pool, so it refuses a shared pool up front; off (the
    default), the trainer uses ``server_url`` as given."""
    monkeypatch.setenv("NEOS_SMOKE_DATA", str(tmp_path))
    monkeypatch.setenv("NEOS_SMOKE_MODEL", str(tmp_path))
    trainer = NeosTrainer(compose("+recipe=neos_smoke", "++trainer.v1.neos.mei.server_url=http://mei:8010"))
    cfg = trainer._mei_config()
    assert trainer._start_mei_server(cfg, "/m") == "http://mei:8010"
    on = NeosTrainer(compose("+recipe=neos_smoke", "++trainer.v1.neos.mei.serve.enable=true"))
    with pytest.raises(ValueError, match="pool=dedicated"):
        on._start_mei_server(on._mei_config(), "/m")
    typo = NeosTrainer(compose("+recipe=neos_smoke", "++trainer.v1.neos.mei.serve.engnie=vllm"))
    with pytest.raises(ValueError, match="engnie"):
        typo._start_mei_server(typo._mei_config(), "/m")
