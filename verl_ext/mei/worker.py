"""The MEI SFT worker group (verl's ``TrainingWorker`` on the FSDP engine) and one MEI update (Neos §3.5, Table 12).

Settings are the paper's online MEI SFT column: AdamW (0.9, 0.95), peak lr 1e-6 cosine to 1e-7 with 5% warmup,
weight decay 0.1, grad clip 1.0, one epoch over the calls retained since the previous update, global batch 16,
max sequence 32,768; vision encoder and projector frozen.

Why a ``TrainingWorker`` subclass: verl 0.9.1 has no working switch to freeze a VLM's vision tower (``ActorConfig``'s
``freeze_vision_tower`` is read nowhere), and freezing must happen before FSDP wraps the model and the optimizer is
built, or weight decay still moves the "frozen" weights. :class:`MEITrainingWorker` sets ``requires_grad=False`` on
the vision parameters inside the engine's model build; everything else (engine, loss, dispatch, checkpoints) is
verl's.

Why :meth:`MEITrainingWorker.begin_update`: each MEI update is a fresh SFT run from the latest weights (its own
warmup and cosine decay over its own step count), while the worker and its weights persist across updates; so an
update rebuilds the lr schedule for its step count and clears Adam's moments, and does not reload the weights.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from verl.single_controller.base.decorator import Dispatch, register
from verl.trainer.config import CheckpointConfig
from verl.utils import tensordict_utils as tu
from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
from verl.workers.config.engine import TrainingWorkerConfig
from verl.workers.engine_workers import TrainingWorker
from verl.workers.utils.losses import sft_loss

import verl_ext.compat  # noqa: F401  verl 0.9.1 fixes, also in the Ray worker processes that unpickle this module
from verl_ext.mei.sft import MAX_SEQ_LEN, collate

# Sub-modules that are the vision encoder or the vision->language projector in the VLM families we serve as MEI
# (Qwen2/2.5/3-VL keep the merger inside ``visual``; LLaVA-style models name a separate projector).
VISION_MODULE_NAMES = ("visual", "vision_tower", "vision_model", "multi_modal_projector", "mm_projector")


class MEITrainSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model_path: str  # HF directory of the MEI checkpoint to start from (the latest one on resume)
    lr: float = Field(default=1e-6, gt=0)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)  # 1e-7 / 1e-6
    warmup_ratio: float = Field(default=0.05, ge=0, lt=1)
    weight_decay: float = Field(default=0.1, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    clip_grad: float = Field(default=1.0, gt=0)
    global_batch_size: int = Field(default=16, ge=1)
    micro_batch_size_per_gpu: int = Field(default=1, ge=1)
    max_seq_len: int = Field(default=MAX_SEQ_LEN, ge=16)
    strategy: str = "fsdp2"  # FSDP2 shards frozen and trainable parameters of one module together
    model_dtype: str = "fp32"  # master weights (verl's default); compute runs in bf16 mixed precision
    use_remove_padding: bool = True
    attn_implementation: str | None = None  # e.g. "sdpa" where flash-attn is not installed
    enable_gradient_checkpointing: bool = True
    # Between updates the MEI weights and Adam state can wait in host memory (verl loads them for each train call):
    # what lets the MEI SFT group share the policy's GPUs.
    param_offload: bool = False
    optimizer_offload: bool = False
    n_gpus: int = Field(default=1, ge=1)


def worker_config(s: MEITrainSettings) -> TrainingWorkerConfig:
    """verl's ``TrainingWorkerConfig`` for the MEI SFT group (loads the model's config, tokenizer and processor)."""
    model = HFModelConfig(
        path=s.model_path,
        use_remove_padding=s.use_remove_padding,
        enable_gradient_checkpointing=s.enable_gradient_checkpointing,
        override_config={"attn_implementation": s.attn_implementation} if s.attn_implementation else {},
    )
    engine = FSDPEngineConfig(
        strategy=s.strategy,
        model_dtype=s.model_dtype,
        use_dynamic_bsz=False,
        micro_batch_size_per_gpu=s.micro_batch_size_per_gpu,
        infer_micro_batch_size_per_gpu=s.micro_batch_size_per_gpu,
        max_token_len_per_gpu=s.max_seq_len,
        use_torch_compile=False,
        param_offload=s.param_offload,
        optimizer_offload=s.optimizer_offload,
    )
    optim = FSDPOptimizerConfig(
        lr=s.lr,
        min_lr_ratio=s.min_lr_ratio,
        lr_warmup_steps_ratio=s.warmup_ratio,
        lr_scheduler_type="cosine",
        weight_decay=s.weight_decay,
        betas=s.betas,
        clip_grad=s.clip_grad,
        total_training_steps=1,  # set per update by begin_update
    )
    checkpoint = CheckpointConfig(save_contents=["hf_model"], load_contents=["hf_model"])
    return TrainingWorkerConfig(model_type="language_model", model_config=model, engine_config=engine,
                                optimizer_config=optim, checkpoint_config=checkpoint)


def freeze_vision(module: torch.nn.Module) -> list[str]:
    """Set ``requires_grad=False`` on the vision encoder and projector parameters; returns their names.
    Raises ``ValueError`` for a model without any (an MEI is a vision-language model)."""
    frozen: list[str] = []
    for name, param in module.named_parameters():
        if any(part in VISION_MODULE_NAMES for part in name.split(".")):
            param.requires_grad_(False)
            frozen.append(name)
    if not frozen:
        raise ValueError(f"no vision parameters (sub-modules named {VISION_MODULE_NAMES}) in {type(module).__name__}")
    return frozen


class MEITrainingWorker(TrainingWorker):
    """verl's ``TrainingWorker`` with the vision tower frozen at model build and a per-update schedule reset."""

    def __init__(self, config: TrainingWorkerConfig) -> None:
        super().__init__(config)
        build = self.engine._build_module

        def build_frozen() -> torch.nn.Module:
            module = build()
            freeze_vision(module)
            return module

        self.engine._build_module = build_frozen  # runs inside engine.initialize(), before FSDP and the optimizer

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def begin_update(self, total_steps: int) -> int:
        """Start one MEI SFT run of ``total_steps`` optimiser steps from the current weights; returns the number of
        trainable parameters (for the log)."""
        engine = self.engine
        engine.optimizer_config.total_training_steps = total_steps
        engine.optimizer.state.clear()
        engine.lr_scheduler = engine._build_lr_scheduler(engine.optimizer)
        return sum(p.numel() for p in engine.module.parameters() if p.requires_grad)


def build_worker_group(settings: MEITrainSettings, resource_pool: Any = None) -> Any:
    """A ``RayWorkerGroup`` of :class:`MEITrainingWorker` with verl's ``sft_loss`` set and the engine initialised.
    ``resource_pool``: share the policy's pool (the trainer) or ``None`` for a pool of ``settings.n_gpus`` GPUs."""
    import ray
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = resource_pool or RayResourcePool(process_on_nodes=[settings.n_gpus])
    group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(
        ray.remote(MEITrainingWorker), config=worker_config(settings)))
    group.set_loss_fn(loss_fn=partial(sft_loss, config=None))
    group.reset()
    return group


@dataclass(frozen=True, slots=True)
class MEIUpdate:
    version: str
    checkpoint_dir: Path  # HF directory the MEI server loads
    metrics: dict[str, float]


def batches(n: int, global_batch_size: int, multiple_of: int) -> list[range]:
    """One epoch of index ranges; the last batch is cut to a multiple of ``multiple_of`` (data-parallel ranks times
    the micro-batch size: verl's engine splits a batch into equal micro-batches), dropping at most multiple_of-1."""
    out = []
    for start in range(0, n, global_batch_size):
        size = min(global_batch_size, n - start) // multiple_of * multiple_of
        if size:
            out.append(range(start, start + size))
    return out


def train_mei(
    worker_group: Any,
    items: list[dict[str, Any]],
    version: str,
    *,
    out_dir: str | Path,
    pad_token_id: int,
    global_batch_size: int = 16,
    micro_batch_size: int = 1,
    epochs: int = 1,
) -> MEIUpdate:
    """One MEI update: ``epochs`` (the paper's online update: one) of SFT on ``items`` (from
    :func:`verl_ext.mei.sft.tokenize_calls`), then an HF checkpoint at ``out_dir/<version>/huggingface``. Metrics: mean
    and last loss, steps, examples, tokens, target tokens, seconds and tokens/s (all tokens through forward and
    backward, the training throughput)."""
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    plan = batches(len(items), global_batch_size, worker_group.world_size * micro_batch_size) * epochs
    if not plan:
        raise ValueError(f"{len(items)} examples make no batch for {worker_group.world_size} data-parallel ranks "
                         f"x micro-batches of {micro_batch_size}")
    worker_group.begin_update(total_steps=len(plan))
    losses: list[float] = []
    tokens = target_tokens = 0
    start = time.perf_counter()
    for rows in plan:
        chunk = [items[i] for i in rows]
        tokens += sum(int(x["input_ids"].shape[0]) for x in chunk)
        target_tokens += sum(int(x["loss_mask"].sum()) for x in chunk)
        output = worker_group.train_batch(collate(chunk, pad_token_id=pad_token_id)).get()
        losses.append(float(tu.get(output, "metrics")["loss"]))
    seconds = time.perf_counter() - start
    ckpt = Path(out_dir) / version
    worker_group.save_checkpoint(local_path=str(ckpt))
    metrics = {
        "mei/loss": sum(losses) / len(losses),
        "mei/final_loss": losses[-1],
        "mei/steps": float(len(plan)),
        "mei/examples": float(sum(len(r) for r in plan)),
        "mei/tokens": float(tokens),
        "mei/target_tokens": float(target_tokens),
        "mei/seconds": seconds,
        "mei/tokens_per_s": tokens / seconds if seconds > 0 else math.inf,
    }
    return MEIUpdate(version, ckpt / "huggingface", metrics)
