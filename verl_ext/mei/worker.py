"""The MEI SFT worker group (verl's ``TrainingWorker`` on verl's FSDP or Megatron engine) and one MEI update
(Neos §3.5, Table 12).

Settings are the paper's online MEI SFT column: AdamW (0.9, 0.95), peak lr 1e-6 cosine to 1e-7 with 5% warmup,
weight decay 0.1, grad clip 1.0, one epoch over the calls retained since the previous update, global batch 16,
max sequence 32,768; vision encoder and projector frozen.

Engine: the policy's (``engine``: ``fsdp`` or ``megatron``; the trainer picks it from
``actor_rollout_ref.actor.strategy``). FSDP keeps fp32 master weights and computes in bf16; Megatron computes in bf16
with fp32 main parameters in its distributed optimizer. Neither stores the trained weights in bf16: at the paper's
lr of 1e-6 an AdamW step changes a weight by about 1e-6, below half a bf16 ulp of any weight above ~2.6e-4 in
magnitude, so bf16 master weights would silently not learn (``tests/mei/test_worker_on_cpu.py`` shows it).
Placement: when the MEI shares the policy's GPUs (``pool: shared``) parameters and optimizer state wait in host memory
between updates (``param_offload``/``optimizer_offload`` default on), on a dedicated pool they stay on its GPUs.

Why a ``TrainingWorker`` subclass: verl 0.9.1 has no working switch to freeze a VLM's vision tower (``ActorConfig``'s
``freeze_vision_tower`` is read nowhere), and freezing must happen before the engine wraps the model (FSDP, Megatron
DDP) and builds the optimizer, or weight decay still moves the "frozen" weights. :class:`MEITrainingWorker` sets
``requires_grad=False`` on the vision parameters inside the engine's model build (FSDP) or in a pre-wrap hook of the
Megatron-Bridge model provider (Megatron); everything else (engine, loss, dispatch, checkpoints) is verl's.

Why :meth:`MEITrainingWorker.begin_update`: each MEI update is a fresh SFT run from the latest weights (its own
warmup and cosine decay over its own step count), while the worker and its weights persist across updates; so an
update rebuilds the lr schedule for its step count and clears Adam's moments, and does not reload the weights.

Batches (:func:`plan_steps`): every update keeps the paper's global batch of 16 examples per optimiser step, whatever
the data-parallel size; verl's engine splits a step's batch into equal micro-batches per rank, so each step is
filled up to a multiple of ranks x micro-batch with rows whose loss mask is all zero. verl's ``sft_loss`` divides by
the loss-mask tokens of the whole global batch (all-reduced over the ranks), so such a row adds nothing to the loss
or the gradient: with 32 ranks a step of 16 examples is 16 real rows and 16 fill rows, and no retained call is dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from verl.single_controller.base.decorator import Dispatch, register
from verl.trainer.config import CheckpointConfig
from verl.utils import tensordict_utils as tu
from verl.workers.config import (
    FSDPEngineConfig,
    FSDPOptimizerConfig,
    HFModelConfig,
    McoreEngineConfig,
    McoreOptimizerConfig,
)
from verl.workers.config.engine import EngineConfig, TrainingWorkerConfig
from verl.workers.config.optimizer import OptimizerConfig
from verl.workers.engine_workers import TrainingWorker
from verl.workers.utils.losses import sft_loss

import verl_ext.compat  # noqa: F401  verl 0.9.1 fixes, also in the Ray worker processes that unpickle this module
from verl_ext.mei.progress import StepProgress, print_flushed
from verl_ext.mei.sft import MAX_SEQ_LEN, collate

# Sub-modules that are the vision encoder or the vision->language projector in the VLM families we serve as MEI
# (Qwen2/2.5/3-VL keep the merger inside ``visual``; LLaVA-style models name a separate projector).
VISION_MODULE_NAMES = ("visual", "vision_tower", "vision_model", "multi_modal_projector", "mm_projector")


Placement = Literal["shared", "dedicated"]


class MEIMegatronSettings(BaseModel):
    """Model parallelism of the MEI on Megatron (the paper gives none for the MEI: 1 x 1 x 1 fits a 9B with offload;
    raise ``tensor_model_parallel_size`` for longer sequences or a larger MEI)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tensor_model_parallel_size: int = Field(default=1, ge=1)
    pipeline_model_parallel_size: int = Field(default=1, ge=1)
    context_parallel_size: int = Field(default=1, ge=1)


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
    engine: Literal["fsdp", "megatron"] = "fsdp"  # the trainer sets the policy's
    strategy: Literal["fsdp", "fsdp2"] = "fsdp2"  # FSDP2 shards frozen and trainable parameters of one module together
    model_dtype: Literal["fp32", "bf16"] = "fp32"  # FSDP master weights: see the module docstring before choosing bf16
    megatron: MEIMegatronSettings = MEIMegatronSettings()
    use_remove_padding: bool = True
    attn_implementation: str | None = None  # e.g. "sdpa" where flash-attn is not installed
    enable_gradient_checkpointing: bool = True
    # None: on when the MEI SFT group shares the policy's GPUs (placed("shared")), off on a pool of its own.
    param_offload: bool | None = None
    optimizer_offload: bool | None = None
    n_gpus: int = Field(default=1, ge=1)  # GPUs of a pool of its own (build_worker_group without a pool)

    @property
    def model_parallel_size(self) -> int:
        """Ranks per model replica (Megatron TP x PP x CP; 1 on FSDP): the world size over this is data-parallel."""
        if self.engine != "megatron":
            return 1
        m = self.megatron
        return m.tensor_model_parallel_size * m.pipeline_model_parallel_size * m.context_parallel_size

    def placed(self, pool: Placement) -> MEITrainSettings:
        """These settings with the offload defaults of ``pool`` filled in (explicit values are kept)."""
        shared = pool == "shared"
        return self.model_copy(update={
            "param_offload": shared if self.param_offload is None else self.param_offload,
            "optimizer_offload": shared if self.optimizer_offload is None else self.optimizer_offload,
        })


def _engine_and_optimizer(s: MEITrainSettings) -> tuple[EngineConfig, OptimizerConfig]:
    common = dict(
        use_dynamic_bsz=False,
        micro_batch_size_per_gpu=s.micro_batch_size_per_gpu,
        infer_micro_batch_size_per_gpu=s.micro_batch_size_per_gpu,
        max_token_len_per_gpu=s.max_seq_len,
        use_remove_padding=s.use_remove_padding,
        param_offload=bool(s.param_offload),
        optimizer_offload=bool(s.optimizer_offload),
    )
    schedule = dict(lr=s.lr, lr_warmup_steps_ratio=s.warmup_ratio, weight_decay=s.weight_decay, betas=s.betas,
                    clip_grad=s.clip_grad, total_training_steps=1)  # total steps: set per update by begin_update
    if s.engine == "megatron":
        m = s.megatron
        engine = McoreEngineConfig(
            strategy="megatron",
            dtype="bfloat16",
            tensor_model_parallel_size=m.tensor_model_parallel_size,
            pipeline_model_parallel_size=m.pipeline_model_parallel_size,
            context_parallel_size=m.context_parallel_size,
            sequence_parallel=m.tensor_model_parallel_size > 1,
            use_distributed_optimizer=True,
            **common,
        )
        return engine, McoreOptimizerConfig(lr_decay_style="cosine", min_lr=s.lr * s.min_lr_ratio, **schedule)
    engine = FSDPEngineConfig(strategy=s.strategy, model_dtype=s.model_dtype, use_torch_compile=False, **common)
    return engine, FSDPOptimizerConfig(lr_scheduler_type="cosine", min_lr_ratio=s.min_lr_ratio, **schedule)


def worker_config(s: MEITrainSettings) -> TrainingWorkerConfig:
    """verl's ``TrainingWorkerConfig`` for the MEI SFT group (loads the model's config, tokenizer and processor)."""
    model = HFModelConfig(
        path=s.model_path,
        use_remove_padding=s.use_remove_padding,
        enable_gradient_checkpointing=s.enable_gradient_checkpointing,
        override_config={"attn_implementation": s.attn_implementation} if s.attn_implementation else {},
    )
    engine, optim = _engine_and_optimizer(s)
    checkpoint = CheckpointConfig(save_contents=["hf_model"], load_contents=["hf_model"])
    return TrainingWorkerConfig(model_type="language_model", model_config=model, engine_config=engine,
                                optimizer_config=optim, checkpoint_config=checkpoint)


def freeze_vision(module: torch.nn.Module, *, require: bool = True) -> list[str]:
    """Set ``requires_grad=False`` on the vision encoder and projector parameters; returns their names.
    Raises ``ValueError`` for a model without any (an MEI is a vision-language model) unless ``require`` is false (a
    Megatron pipeline stage after the first holds none)."""
    frozen: list[str] = []
    for name, param in module.named_parameters():
        if any(part in VISION_MODULE_NAMES for part in name.split(".")):
            param.requires_grad_(False)
            frozen.append(name)
    if require and not frozen:
        raise ValueError(f"no vision parameters (sub-modules named {VISION_MODULE_NAMES}) in {type(module).__name__}")
    return frozen


def freeze_vision_chunks(chunks: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """A Megatron-Bridge pre-wrap hook: freeze the vision parameters of this rank's model chunks before DDP wraps
    them (so neither DDP's gradient buffers nor the distributed optimizer hold them)."""
    for chunk in chunks:
        freeze_vision(chunk, require=False)
    return chunks


def _clear_moments(optimizer: Any) -> None:
    """Drop Adam's moments (a torch optimizer, or Megatron's chained/distributed optimizers around one)."""
    for opt in getattr(optimizer, "chained_optimizers", None) or [optimizer]:
        getattr(opt, "optimizer", opt).state.clear()


class MEITrainingWorker(TrainingWorker):
    """verl's ``TrainingWorker`` with the vision tower frozen at model build and a per-update schedule reset."""

    def __init__(self, config: TrainingWorkerConfig) -> None:
        super().__init__(config)
        engine = self.engine
        self._megatron = isinstance(config.engine_config, McoreEngineConfig)
        if self._megatron:
            build_megatron = engine._build_megatron_module

            def build_megatron_frozen() -> Any:
                if engine.provider is None:  # the deprecated mbridge backend has no pre-wrap hooks
                    raise ValueError("freezing the MEI's vision tower on Megatron needs Megatron-Bridge "
                                     "(vanilla_mbridge=False, verl's default)")
                engine.provider.register_pre_wrap_hook(freeze_vision_chunks)
                return build_megatron()

            engine._build_megatron_module = build_megatron_frozen  # runs in initialize(), after the provider exists
            return
        build = engine._build_module

        def build_frozen() -> torch.nn.Module:
            module = build()
            freeze_vision(module)
            return module

        engine._build_module = build_frozen  # runs inside engine.initialize(), before FSDP and the optimizer

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def begin_update(self, total_steps: int) -> int:
        """Start one MEI SFT run of ``total_steps`` optimiser steps from the current weights; returns the number of
        trainable parameters of this rank (for the log)."""
        engine = self.engine
        engine.optimizer_config.total_training_steps = total_steps
        _clear_moments(engine.optimizer)
        if self._megatron:
            engine.lr_scheduler = engine._build_lr_scheduler()
            return sum(p.numel() for chunk in engine.module for p in chunk.parameters() if p.requires_grad)
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


@dataclass(frozen=True, slots=True)
class Step:
    """One optimiser step: its real examples and the loss-masked fill rows after them."""

    rows: range
    fill: int


def plan_steps(n: int, global_batch_size: int, multiple_of: int) -> list[Step]:
    """One epoch over ``n`` examples in steps of at most ``global_batch_size``, each filled up to a multiple of
    ``multiple_of`` (data-parallel ranks x micro-batch size); no example is dropped, ``n = 0`` plans nothing."""
    if global_batch_size < 1 or multiple_of < 1:
        raise ValueError(f"need global_batch_size >= 1 and multiple_of >= 1, got {global_batch_size}, {multiple_of}")
    return [
        Step(range(start, stop), -(stop - start) % multiple_of)
        for start in range(0, n, global_batch_size)
        for stop in [min(start + global_batch_size, n)]
    ]


def fill_row(item: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``item`` whose loss mask is all zero: a data-parallel filler that adds no loss and no gradient."""
    return {**item, "loss_mask": torch.zeros_like(item["loss_mask"])}


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
    model_parallel_size: int = 1,
    emit: Callable[[str], None] = print_flushed,
) -> MEIUpdate:
    """One MEI update: ``epochs`` (the paper's online update: one) of SFT on ``items`` (from
    :func:`verl_ext.mei.sft.tokenize_calls`), then an HF checkpoint at ``out_dir/<version>/huggingface``.
    ``model_parallel_size``: ranks per model replica (Megatron TP x PP x CP); the rest are data-parallel. Metrics: mean
    and last loss, steps, examples, fill rows, tokens, target tokens, seconds and tokens/s (real tokens through
    forward and backward, the training throughput), and ``mei/mfu``, the mean of verl's per-step MFU where verl
    reports one. Progress lines (step, loss, tokens/s, elapsed, ETA: see :mod:`.progress`) and a summary go to
    ``emit``, stdout by default."""
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if not items:
        raise ValueError("an MEI update needs at least one example")
    data_parallel = max(1, worker_group.world_size // model_parallel_size)
    epoch_plan = plan_steps(len(items), global_batch_size, data_parallel * micro_batch_size)
    plan = epoch_plan * epochs
    worker_group.begin_update(total_steps=len(plan))
    progress = StepProgress(f"MEI {version} SFT", total=len(plan), steps_per_epoch=len(epoch_plan), emit=emit)
    emit(f"MEI {version} SFT: {len(plan)} steps ({len(epoch_plan)} an epoch x {epochs}) over {len(items)} examples, "
         f"global batch {global_batch_size}, micro-batch {micro_batch_size} x {data_parallel} data-parallel "
         f"rank{'s' if data_parallel > 1 else ''}; a line every {progress.every} steps or {progress.interval_s:.0f} s")
    target_tokens = 0
    mfus: list[float] = []
    for step in plan:
        chunk = [items[i] for i in step.rows]
        target_tokens += sum(int(x["loss_mask"].sum()) for x in chunk)
        shortest = min(chunk, key=lambda x: int(x["input_ids"].shape[0]))
        output = worker_group.train_batch(collate(chunk + [fill_row(shortest)] * step.fill,
                                                  pad_token_id=pad_token_id)).get()
        step_metrics = tu.get(output, "metrics")
        if "mfu" in step_metrics:  # verl's estimate for the step, where its FlopsCounter knows the model type
            mfus.append(float(step_metrics["mfu"]))
        progress.step(float(step_metrics["loss"]), sum(int(x["input_ids"].shape[0]) for x in chunk))
    seconds = progress.finish()
    losses, tokens = progress.losses, progress.tokens
    ckpt = Path(out_dir) / version
    worker_group.save_checkpoint(local_path=str(ckpt))
    metrics = {
        "mei/loss": sum(losses) / len(losses),
        "mei/final_loss": losses[-1],
        "mei/steps": float(len(plan)),
        "mei/examples": float(sum(len(step.rows) for step in plan)),
        "mei/fill_rows": float(sum(step.fill for step in plan)),
        "mei/tokens": float(tokens),
        "mei/target_tokens": float(target_tokens),
        "mei/seconds": seconds,
        "mei/tokens_per_s": tokens / seconds if seconds > 0 else math.inf,
    }
    if mfus:
        metrics["mei/mfu"] = sum(mfus) / len(mfus)
    return MEIUpdate(version, ckpt / "huggingface", metrics)
