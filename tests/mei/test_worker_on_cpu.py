"""MEI SFT worker pieces that run without a GPU: the worker config (paper's Table 12 values), the vision freeze on the
tiny Qwen2.5-VL, verl's lr schedule shape, and one real forward/backward through verl's sft_loss plus one step of the
optimizer verl builds from our config, which moves only non-vision weights. (verl's FSDP engine registers for
cuda/npu only: the TrainingWorker step itself is tests/mei/test_mei_sft_on_gpu.py.)"""

import math

import pytest
import torch
from transformers import AutoModelForImageTextToText
from verl.utils import tensordict_utils as tu
from verl.utils.torch_functional import get_cosine_schedule_with_warmup
from verl.workers.config.optimizer import build_optimizer
from verl.workers.utils.losses import sft_loss

from verl_ext.mei.sft import collate, tokenize
from verl_ext.mei.worker import (
    MEIMegatronSettings,
    MEITrainSettings,
    fill_row,
    freeze_vision,
    plan_steps,
    train_mei,
    worker_config,
)

from .test_sft_on_cpu import reverse_example


@pytest.fixture(scope="module")
def config(tiny_vl_model_dir):
    return worker_config(MEITrainSettings(model_path=str(tiny_vl_model_dir), attn_implementation="sdpa"))


def test_worker_config_carries_the_papers_mei_sft_settings(config):
    o = config.optimizer_config
    assert (o.lr, o.lr * o.min_lr_ratio, o.lr_warmup_steps_ratio, o.weight_decay) == (1e-6, pytest.approx(1e-7), 0.05,
                                                                                      0.1)
    assert (o.lr_scheduler_type, o.betas, o.clip_grad, o.optimizer) == ("cosine", (0.9, 0.95), 1.0, "AdamW")
    e = config.engine_config
    assert (e.strategy, e.micro_batch_size_per_gpu, e.max_token_len_per_gpu, e.use_dynamic_bsz) == (
        "fsdp2", 1, 32_768, False)
    assert (e.param_offload, e.optimizer_offload, e.model_dtype) == (False, False, "fp32")  # a pool of its own
    assert config.model_type == "language_model" and config.checkpoint_config.save_contents == ["hf_model"]
    assert config.model_config.override_config == {"attn_implementation": "sdpa"}
    assert config.model_config.processor is not None  # verl loaded the tiny model's processor


def test_cosine_schedule_of_one_update():
    """20 steps: int(0.05 * 20) = 1 warmup step, then cosine from 1e-6 to 1e-7 (min ratio 0.1)."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1e-6)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=1, num_training_steps=20, min_lr_ratio=0.1)
    lrs = []
    for _ in range(20):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == 0.0 and lrs[1] == pytest.approx(1e-6)
    # step 10 of the 19 decay steps: 0.1 + 0.9 * 0.5 * (1 + cos(pi * 9/19))
    assert lrs[10] == pytest.approx(1e-6 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 9 / 19))))
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-7)


def test_co_located_mei_waits_in_host_memory_between_updates(tiny_vl_model_dir):
    base = MEITrainSettings(model_path=str(tiny_vl_model_dir))
    shared = worker_config(base.placed("shared")).engine_config
    assert (shared.param_offload, shared.optimizer_offload) == (True, True)
    dedicated = worker_config(base.placed("dedicated")).engine_config
    assert (dedicated.param_offload, dedicated.optimizer_offload) == (False, False)
    kept = worker_config(base.model_copy(update={"param_offload": False}).placed("shared")).engine_config
    assert (kept.param_offload, kept.optimizer_offload) == (False, True)  # an explicit value wins
    assert shared.model_dtype == "fp32" and shared.mixed_precision is None  # verl's default: bf16 compute


def test_bf16_master_weights_would_not_learn_at_the_papers_lr():
    """Why the FSDP MEI keeps fp32 master weights even when co-located: one AdamW step at lr 1e-6 (Adam's first step
    moves each weight by ~lr) leaves typical bf16 weights exactly where they were; fp32 weights move."""
    start = torch.full((64,), 0.02)
    moved = {}
    for dtype in (torch.float32, torch.bfloat16):
        p = torch.nn.Parameter(start.to(dtype).clone())
        opt = torch.optim.AdamW([p], lr=1e-6, betas=(0.9, 0.95), weight_decay=0.1)
        p.grad = torch.ones_like(p)
        opt.step()
        moved[dtype] = not torch.equal(p.detach(), start.to(dtype))
    assert moved == {torch.float32: True, torch.bfloat16: False}


def test_megatron_engine_config_for_a_megatron_policy(tiny_vl_model_dir):
    """verl's own Megatron config classes, built (the Megatron model itself needs Transformer Engine: not here)."""
    from verl.workers.config import McoreEngineConfig, McoreOptimizerConfig

    settings = MEITrainSettings(model_path=str(tiny_vl_model_dir), engine="megatron",
                                megatron=MEIMegatronSettings(tensor_model_parallel_size=2)).placed("shared")
    config = worker_config(settings)
    e, o = config.engine_config, config.optimizer_config
    assert isinstance(e, McoreEngineConfig) and isinstance(o, McoreOptimizerConfig)
    assert (e.strategy, e.dtype, e.tensor_model_parallel_size, e.sequence_parallel) == ("megatron", "bfloat16", 2, True)
    assert (e.use_distributed_optimizer, e.param_offload, e.optimizer_offload) == (True, True, True)
    assert (e.micro_batch_size_per_gpu, e.use_dynamic_bsz, e.max_token_len_per_gpu) == (1, False, 32_768)
    # the paper's schedule in Megatron's terms: cosine from 1e-6 to 1e-7 over the update, 5% warmup
    assert (o.lr, o.min_lr, o.lr_decay_style, o.lr_warmup_steps_ratio) == (1e-6, pytest.approx(1e-7), "cosine", 0.05)
    assert (o.weight_decay, o.betas, o.clip_grad, o.optimizer) == (0.1, (0.9, 0.95), 1.0, "adam")


@pytest.mark.parametrize("ranks", [1, 8, 16, 32, 64])
@pytest.mark.parametrize("calls", [0, 1, 37])
def test_plan_covers_every_call_once_at_any_world_size(ranks, calls):
    for micro in (1, 2):
        plan = plan_steps(calls, 16, ranks * micro)
        assert [i for step in plan for i in step.rows] == list(range(calls))  # each call exactly once, in order
        assert len(plan) == -(-calls // 16)  # ceil: the paper's 16 examples per step
        for step in plan:
            assert len(step.rows) <= 16 and (len(step.rows) + step.fill) % (ranks * micro) == 0
            assert 0 <= step.fill < ranks * micro


def test_plan_hand_computed():
    assert [(list(s.rows), s.fill) for s in plan_steps(5, 2, 1)] == [([0, 1], 0), ([2, 3], 0), ([4], 0)]
    assert [(list(s.rows), s.fill) for s in plan_steps(7, 4, 2)] == [([0, 1, 2, 3], 0), ([4, 5, 6], 1)]
    assert [(len(s.rows), s.fill) for s in plan_steps(20, 16, 32)] == [(16, 16), (4, 28)]  # 32 ranks
    assert plan_steps(0, 16, 32) == []


class ScriptedWorkerGroup:
    """Stand-in for the MEI SFT ``RayWorkerGroup`` (its engine needs GPUs): records each step's batch size and the
    target tokens in it, and answers verl's metrics shape."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.steps: list[tuple[int, int]] = []
        self.total_steps = None

    def begin_update(self, total_steps: int) -> None:
        self.total_steps = total_steps

    def train_batch(self, batch):
        self.steps.append((len(batch["input_ids"].offsets()) - 1, int(batch["loss_mask"].values().sum())))
        result = tu.get_tensordict({}, non_tensor_dict={"metrics": {"loss": 1.0}})
        return type("Ref", (), {"get": lambda _self: result})()

    def save_checkpoint(self, local_path: str) -> None:
        pass


@pytest.mark.parametrize("ranks", [1, 8, 16, 32, 64])
def test_train_mei_runs_at_any_world_size(ranks, tiny_vl_processor, tmp_path):
    """The issue's failure: beyond 16 ranks the plan was empty and train_mei raised. Now 17 calls on any world size
    make two steps (16 + 1) whose rows divide evenly over the ranks, with every target token trained once."""
    item = tokenize(reverse_example(), tiny_vl_processor)
    group = ScriptedWorkerGroup(ranks)
    update = train_mei(group, [item] * 17, "v1", out_dir=tmp_path,
                       pad_token_id=tiny_vl_processor.tokenizer.pad_token_id)
    targets = int(item["loss_mask"].sum())
    assert group.total_steps == 2 and [t for _, t in group.steps] == [16 * targets, targets]
    assert all(rows % ranks == 0 for rows, _ in group.steps)
    assert update.metrics["mei/examples"] == 17.0 and update.metrics["mei/steps"] == 2.0
    assert update.metrics["mei/fill_rows"] == float(sum(rows for rows, _ in group.steps) - 17)
    with pytest.raises(ValueError, match="at least one example"):
        train_mei(group, [], "v1", out_dir=tmp_path, pad_token_id=0)


def test_a_fill_row_adds_no_loss_and_no_gradient(tiny_vl_processor):
    """verl's sft_loss over [item] and over [item, fill_row(item)] (batch_num_tokens = the global loss-mask sum, as
    the engine computes it) is the same number, and the fill row's log-probs get no gradient."""
    item = tokenize(reverse_example(), tiny_vl_processor)
    n = item["input_ids"].shape[0]
    logp = -torch.rand(n, dtype=torch.float64) - 0.1

    def loss_of(items, logps):
        td = collate(items, pad_token_id=0)
        tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=int(sum(int(x["loss_mask"].sum()) for x in items)))
        nested = torch.nested.as_nested_tensor(logps, layout=torch.jagged)
        return sft_loss(None, {"log_probs": nested}, td)[0]

    filler = logp.clone().requires_grad_(True)
    with_fill = loss_of([item, fill_row(item)], [logp, filler])
    assert float(with_fill) == pytest.approx(float(loss_of([item], [logp])))
    with_fill.backward()
    assert filler.grad is None or not filler.grad.any()


def test_one_step_moves_only_language_weights(tiny_vl_model_dir, tiny_vl_processor, config):
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(tiny_vl_model_dir, dtype=torch.float32)
    frozen = set(freeze_vision(model))
    assert frozen and all(".visual." in f".{n}" for n in frozen)
    assert any("merger" in n for n in frozen)  # the projector (Qwen's patch merger) is frozen too
    assert all(p.requires_grad for n, p in model.named_parameters() if n not in frozen)

    item = tokenize(reverse_example(), tiny_vl_processor)
    td = collate([item], pad_token_id=tiny_vl_processor.tokenizer.pad_token_id)
    ids = item["input_ids"]
    mm = item["multi_modal_inputs"]
    out = model(input_ids=ids[None], position_ids=item["position_ids"][:, None], pixel_values=mm["pixel_values"],
                image_grid_thw=mm["image_grid_thw"])
    logp_all = torch.log_softmax(out.logits[0].float(), -1)
    # verl's convention: log_probs[k] = log p(x_{k+1} | x_<=k) (labels rolled left by one)
    log_probs = logp_all.gather(-1, torch.roll(ids, -1)[:, None])[:, 0]
    n_target = int(item["loss_mask"].sum())
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=n_target)
    nested = torch.nested.as_nested_tensor([log_probs], layout=torch.jagged)
    loss, _ = sft_loss(None, {"log_probs": nested}, td)
    targets = item["loss_mask"].nonzero()[:, 0]
    expected = -logp_all[targets - 1, ids[targets]].mean()  # Eq. 5 for one sequence, by hand
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = build_optimizer(model.parameters(), config.optimizer_config)  # the optimizer verl's engine builds
    loss.backward()
    assert all(p.grad is None for n, p in model.named_parameters() if n in frozen)
    torch.nn.utils.clip_grad_norm_(model.parameters(), config.optimizer_config.clip_grad)
    opt.step()
    changed = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert not changed & frozen
    assert "model.language_model.embed_tokens.weight" in changed and any("layers.1.mlp" in n for n in changed)


def test_train_mei_reports_the_mean_of_verls_per_step_mfu_only_where_verl_gives_one(tiny_vl_processor, tmp_path):
    item = tokenize(reverse_example(), tiny_vl_processor)
    mfus = iter([0.25, 0.35])

    class WithMFU(ScriptedWorkerGroup):
        def train_batch(self, batch):
            super().train_batch(batch)
            result = tu.get_tensordict({}, non_tensor_dict={"metrics": {"loss": 1.0, "mfu": next(mfus)}})
            return type("Ref", (), {"get": lambda _self: result})()

    pad = tiny_vl_processor.tokenizer.pad_token_id
    with_mfu = train_mei(WithMFU(1), [item] * 17, "v1", out_dir=tmp_path, pad_token_id=pad).metrics
    assert with_mfu["mei/mfu"] == pytest.approx(0.30)  # two steps (16 + 1 calls): (0.25 + 0.35) / 2
    assert "mei/mfu" not in train_mei(ScriptedWorkerGroup(1), [item], "v2", out_dir=tmp_path, pad_token_id=pad).metrics
