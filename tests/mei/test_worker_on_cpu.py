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
from verl_ext.mei.worker import MEITrainSettings, batches, freeze_vision, worker_config

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
    assert (e.param_offload, e.optimizer_offload) == (False, False)
    offloaded = worker_config(MEITrainSettings(model_path=config.model_config.path, param_offload=True,
                                               optimizer_offload=True)).engine_config
    assert (offloaded.param_offload, offloaded.optimizer_offload) == (True, True)
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


def test_batches_cover_one_epoch_and_respect_dp():
    assert [list(r) for r in batches(5, 2, 1)] == [[0, 1], [2, 3], [4]]
    assert [list(r) for r in batches(7, 4, 2)] == [[0, 1, 2, 3], [4, 5]]  # 7th dropped: 1 row for 2 ranks
    assert batches(1, 16, 2) == []


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
