"""Build an agent loop from verl's registry outside a rollout worker, the way verl's ``AgentLoopWorker`` builds one.

For in-process drivers (the walkthrough, tests, benchmarks) that hand the loop their own ``server_manager`` (such as
``TransformersGenerateClient``) instead of verl's ``LLMServerClient``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hydra
from omegaconf import DictConfig
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
from verl.utils.dataset.rl_dataset import RLHFDataset

import verl_ext.rollout.agent_loop  # noqa: F401  (registers our loops, as the plugin does)
from verl_ext.models.tiny_vl import HF_MODEL_TYPE


def instantiate_agent_loop(
    loop: str | DictConfig,
    server_manager: Any,
    processor: Any,
    trainer_config: DictConfig,
    tools: Sequence[Any] = (),
    hf_model_type: str = HF_MODEL_TYPE,
) -> Any:
    """The loop ``loop`` with verl's constructor arguments: a registered name, or an entry of an
    ``agent_loop_config_path`` file (``name``, ``_target_`` and the loop's settings), which verl's worker registers as
    is. ``trainer_config`` needs ``actor_rollout_ref`` and ``data`` sections. ``hf_model_type`` (the root config's
    ``model_type``: verl picks the Continuous Token builder by it) defaults to the tiny Qwen2.5-VL's."""
    return hydra.utils.instantiate(
        _agent_loop_registry[loop] if isinstance(loop, str) else loop,
        trainer_config=DictConfigWrap(trainer_config),
        server_manager=server_manager,
        tokenizer=processor.tokenizer,
        processor=processor,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(trainer_config.data),
        hf_model_type=hf_model_type,
        tools=ToolListWrap(list(tools)),
    )
