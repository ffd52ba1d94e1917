"""``actor_rollout_ref.rollout.name=hf``: a transformers rollout backend for machines without vLLM or SGLang.

For development and smoke runs of ``python -m verl.trainer.main_ppo`` (our H200 image has no vLLM/SGLang wheel that
fits its torch); production rollouts stay on vLLM/SGLang. verl 0.9.1 looks a backend up by name in two registries,
and importing this module fills both (the plugin entry point imports it in every process):

- ``RolloutReplicaRegistry`` (trainer process): :class:`HFReplica` starts one :class:`HFRolloutServer` Ray actor per
  replica, on the node and GPU of the replica's worker, as vLLM's replica does (hybrid: the FSDP actor rank;
  standalone/colocated: verl's ``CheckpointEngineWorker``).
- ``base._ROLLOUT_REGISTRY`` (worker processes): :class:`HFServerAdapter` is built inside the worker before any
  server exists; it finds its server by actor name on first use and loads the actor's weights into it.

The server reuses :class:`TransformersGenerateClient` as its engine, so it serves the Qwen-VL family that client
supports, one request at a time. It has no HTTP endpoint: ``server_address`` is the actor name, a key for verl's
load balancer only (agent loops that speak OpenAI chat completions to the address cannot use this backend).
One unsharded model copy per GPU: tensor, data and pipeline parallel sizes must be 1.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import ray
import torch
from omegaconf import DictConfig
from PIL import Image
from ray.actor import ActorHandle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from torch.distributed.device_mesh import DeviceMesh
from verl.plugin.platform import get_platform
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.device import get_device_name, get_resource_name, get_torch_device, get_visible_devices_keyword
from verl.utils.model import get_hf_auto_model_class
from verl.utils.torch_dtypes import PrecisionType
from verl.workers.config import HFModelConfig, RolloutConfig
from verl.workers.rollout.base import _ROLLOUT_REGISTRY, BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, RolloutReplicaRegistry, TokenOutput


NAME = "hf"


def check_single_device(config: RolloutConfig) -> None:
    """Refuse sharded layouts early (in the trainer and in every worker): the server holds one whole model."""
    sizes = {
        "tensor_model_parallel_size": config.tensor_model_parallel_size,
        "data_parallel_size": config.data_parallel_size,
        "pipeline_model_parallel_size": config.pipeline_model_parallel_size,
    }
    wrong = [f"actor_rollout_ref.rollout.{key}=1 (got {value})" for key, value in sizes.items() if value != 1]
    if wrong:
        raise ValueError(f"rollout.name={NAME} runs one unsharded model per GPU; set {', '.join(wrong)}")


def server_name(replica_rank: int, role: str = "", suffix: str = "") -> str:
    """The server actor's Ray name, shared by the replica (which creates it) and the adapter (which looks it up)."""
    return f"{NAME}_server_{role}{replica_rank}{suffix}"


class HFRolloutServer:
    """The rollout server actor: one model on the replica's GPU (CPU where there is none) behind verl's
    ``generate`` contract, plus weight loading for the adapter and the lifecycle calls verl's replica makes.

    The model class is the one verl's FSDP engine loads for the same config (``get_hf_auto_model_class``), so the
    HF parameter names the actor sends are this model's own.
    """

    def __init__(
        self,
        config: RolloutConfig,
        model_config: HFModelConfig | DictConfig,
        rollout_mode: RolloutMode,
        replica_rank: int,
        on_gpu: bool,
    ) -> None:
        model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        if model_config.processor is None:
            raise ValueError(f"rollout.name={NAME} serves vision-language models; {model_config.path} has no processor")
        self.config = config
        self.rollout_mode = rollout_mode
        self.device = torch.device(get_device_name() if on_gpu else "cpu")
        model = get_hf_auto_model_class(model_config.hf_config).from_pretrained(
            model_config.local_path,
            config=model_config.hf_config,
            dtype=PrecisionType.to_dtype(config.dtype),
            trust_remote_code=model_config.trust_remote_code,
        )
        # Imported here, not at module level: this module is imported by the plugin on `import verl`, and
        # hf_generate imports verl, so `python -m` of anything importing hf_generate first would be circular.
        from verl_ext.rollout.hf_generate import TransformersGenerateClient

        self.client = TransformersGenerateClient(
            model.to(self.device),
            model_config.processor,
            max_new_tokens=config.response_length,
            seed=config.seed + replica_rank,  # replicas sharing a prompt group must not draw the same samples
            record_calls=False,
        )
        self._param_names = frozenset(model.state_dict())

    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Image.Image] | None = None,
        video_data: list[Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        """What ``LLMServerClient.generate`` calls. verl's sampling params carry no length: bound it as vLLM's server
        does, by ``response_length`` and what is left of ``prompt_length + response_length``."""
        sampling = dict(sampling_params)
        if sampling.get("max_tokens") is None and sampling.get("max_new_tokens") is None:
            budget = self.config.prompt_length + self.config.response_length - len(prompt_ids)
            sampling["max_tokens"] = max(1, min(self.config.response_length, budget))
        return await self.client.generate(
            request_id,
            prompt_ids=prompt_ids,
            sampling_params=sampling,
            image_data=image_data,
            video_data=video_data,
            **kwargs,
        )

    async def load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> None:
        """Copy tensors into the model by name. A name the model lacks is an error: a naming mismatch between the
        training engine and this model would otherwise keep serving stale weights."""
        unknown = sorted({name for name, _ in named_tensors} - self._param_names)
        if unknown:
            raise ValueError(f"{len(unknown)} weight(s) unknown to the rollout model, e.g. {unknown[:5]}")
        self.client.model.load_state_dict(dict(named_tensors), strict=False)

    async def finish_weight_update(self, global_steps: int | None) -> None:
        """Set the weight version reported as ``extra_fields["global_steps"]``; one more when the trainer gives none."""
        self.client.global_steps = int(global_steps) if global_steps is not None else self.client.global_steps + 1

    async def sleep(self) -> None:
        """Hybrid mode: move the weights off the GPU while the colocated actor trains (vLLM frees them likewise)."""
        if self.config.free_cache_engine and self.rollout_mode == RolloutMode.HYBRID and self.device.type != "cpu":
            self.client.model.to("cpu")
            get_torch_device().empty_cache()

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Bring the weights back (``tags`` None or holding ``"weights"``); there is no KV cache to restore."""
        if tags is None or "weights" in tags:
            self.client.model.to(self.device)

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        """Every request accepted so far returns at its next token with ``stop_reason="aborted"`` (mixed-group
        sampling's policy boundary); returns once none runs, so the actor can take the GPU. New requests are never
        parked or rejected (``reject_request`` is moot): only requests from before the call are aborted."""
        return {"aborted_count": await self.client.abort(), "request_ids": []}

    async def resume_generation(self) -> None:
        """No-op: nothing is paused (``abort_all_requests`` stops old requests, it does not close a gate)."""

    async def clear_kv_cache(self) -> None:
        """No-op: no KV cache outlives its request (each generate builds and drops its own)."""

    async def release_kv_cache(self) -> None:
        """No-op, as ``clear_kv_cache``."""

    async def resume_kv_cache(self) -> None:
        """No-op, as ``clear_kv_cache``."""

    async def start_profile(self, **kwargs: Any) -> None:
        """No-op: this backend has no profiler hooks."""

    async def stop_profile(self) -> None:
        """No-op, as ``start_profile``."""


def _node_and_gpus(worker: Any) -> tuple[str, list[str]]:
    """Run inside a worker actor (``__ray_call__``): its node and the accelerator ids Ray gave it."""
    context = ray.get_runtime_context()
    return context.get_node_id(), list(context.get_accelerator_ids().get(get_resource_name(), []))


class HFReplica(RolloutReplica):
    """One :class:`HFRolloutServer` per replica, on its single worker's node and GPU. The server gets no Ray GPU of
    its own (the worker holds it); it sees the worker's device through the visible-devices variable, as vLLM's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        check_single_device(self.config)

    async def launch_servers(self) -> None:
        """Start the server actor and wait until its model is loaded."""
        (worker,) = self.workers  # world size 1 (checked in __init__)
        node_id, gpu_ids = await worker.__ray_call__.remote(_node_and_gpus)
        # The server gets no Ray GPU (its worker holds it), so Ray must leave the visible devices set here alone.
        gpu_env = {var: "1" for var in get_platform().ray_noset_envvars()}
        gpu_env[get_visible_devices_keyword()] = ",".join(gpu_ids)
        role = "reward_" if self.is_reward_model else "teacher_" if self.is_teacher_model else ""
        name = server_name(self.replica_rank, role, self.name_suffix)
        server = (
            ray.remote(HFRolloutServer)
            .options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
                runtime_env={"env_vars": gpu_env} if gpu_ids else None,  # CPU: any prestarted worker will do
                name=name,
                max_concurrency=self.max_concurrency,
            )
            .remote(
                config=self.config,
                model_config=self.model_config,
                rollout_mode=self.rollout_mode,
                replica_rank=self.replica_rank,
                on_gpu=bool(gpu_ids),
            )
        )
        await server.__ray_ready__.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = name


class HFServerAdapter(BaseRollout):
    """The in-worker side: resume/release forward to the server, ``update_weights`` drains the actor's
    ``(HF name, full tensor)`` generator on every rank (``full_tensor()`` is a collective) and loads it into the
    rank's own server in buckets of ``checkpoint_engine.update_weights_bucket_megabytes``."""

    def __init__(
        self,
        config: RolloutConfig,
        model_config: HFModelConfig,
        device_mesh: DeviceMesh | None,
        replica_rank: int = -1,
    ) -> None:
        super().__init__(config, model_config, device_mesh)
        check_single_device(self.config)
        # Hybrid mode: one replica per trainer rank. Standalone: CheckpointEngineWorker passes the replica rank.
        self.replica_rank = int(os.environ["RANK"]) if replica_rank == -1 else replica_rank
        self._server: ActorHandle | None = None

    def _server_handle(self) -> ActorHandle:
        """The server actor, looked up on first use: the adapter is built before the replica starts it."""
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        if self.config.free_cache_engine:
            await self._server_handle().wake_up.remote(tags=tags)

    async def release(self) -> None:
        if self.config.free_cache_engine:
            await self._server_handle().sleep.remote()

    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        global_steps: int | None = None,
        peft_config: Any = None,
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"rollout.name={NAME} takes full named tensors, not {wire_format!r}")
        if peft_config is not None:
            raise NotImplementedError(
                f"rollout.name={NAME} loads full weights only; set actor_rollout_ref.model.lora.merge=True for LoRA"
            )
        server = self._server_handle()
        limit = self.config.checkpoint_engine.update_weights_bucket_megabytes << 20
        bucket: list[tuple[str, torch.Tensor]] = []
        size = 0
        for name, tensor in weights:
            host = tensor.detach().to("cpu")
            bucket.append((name, host))
            size += host.numel() * host.element_size()
            if size >= limit:
                await server.load_weights.remote(bucket)
                bucket, size = [], 0
        if bucket:
            await server.load_weights.remote(bucket)
        await server.finish_weight_update.remote(global_steps)


def _register() -> None:
    """Fill both of verl's registries; refuse if this verl already uses the name."""
    if NAME in RolloutReplicaRegistry._registry or (NAME, "async") in _ROLLOUT_REGISTRY:
        raise RuntimeError(f"rollout backend name {NAME!r} is already registered in this verl")
    RolloutReplicaRegistry.register(NAME, lambda: HFReplica)
    _ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.{HFServerAdapter.__qualname__}"


_register()
