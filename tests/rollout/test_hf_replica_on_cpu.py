"""The ``hf`` rollout backend through verl's own classes, on the session's CPU Ray.

verl's ``LLMServerManager`` (what the v1 trainer builds) picks our replica by ``rollout.name`` and starts it in
hybrid mode beside a real verl worker group of one CPU worker, which stands in for the FSDP actor rank (no FSDP on
CPU); verl's ``LLMServerClient`` generates through the load balancer and the server actor; the in-worker adapter, from
verl's ``get_rollout_class``, is built before the server exists (as in ``init_model``) and pushes weights into it.
Expected outputs come from :class:`TransformersGenerateClient` in this process on the same tiny model.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import ray
import torch
from omegaconf import DictConfig, OmegaConf
from PIL import Image
from verl.single_controller.base import Worker
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.llm_server import LLMServerManager
from verl.workers.rollout.replica import RolloutReplica, TokenOutput, get_rollout_replica_class

from verl_ext.registrations import Registration, is_registered
from verl_ext.rollout.hf_generate import TransformersGenerateClient
from verl_ext.rollout.hf_replica import HFReplica, HFServerAdapter

GREEDY = {"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
RESPONSE_LENGTH = 6
NORM = "model.language_model.norm.weight"  # the final RMSNorm: scaling it changes every logit


def _image() -> Image.Image:
    return Image.new("RGB", (100, 60), (200, 10, 10))  # 8 image tokens on the tiny model


def _prompt_ids(processor) -> list[int]:
    """A prompt as verl's agent loops build it: chat template through the processor, image placeholders expanded."""
    content = [{"type": "image", "image": _image()}, {"type": "text", "text": "What is this?"}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    return processor(text=[text], images=[_image()], return_tensors="pt")["input_ids"][0].tolist()


@dataclass
class Backend:
    config: DictConfig
    manager: LLMServerManager
    replica: RolloutReplica
    adapter: HFServerAdapter
    prompt_ids: list[int]


@pytest.fixture(scope="module")
def backend(ray_cluster, compose_ppo_config, tiny_vl_model_dir, tiny_vl_processor) -> Iterator[Backend]:
    prompt_ids = _prompt_ids(tiny_vl_processor)
    # prompt_length + response_length - len(prompt) = 4 < response_length: the server must apply the tighter bound
    config = compose_ppo_config(
        tiny_vl_model_dir,
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.dtype=float32",
        f"actor_rollout_ref.rollout.prompt_length={len(prompt_ids) - 2}",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
        "trainer.n_gpus_per_node=1",
        rollout="hf",
    )
    rollout, model = config.actor_rollout_ref.rollout, config.actor_rollout_ref.model
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RANK", "0")  # verl's worker group sets it in the worker that builds the adapter
        adapter = get_rollout_class(rollout.name, rollout.mode)(config=rollout, model_config=model, device_mesh=None)
    pool = RayResourcePool([1], use_gpu=False, max_colocate_count=1)
    workers = RayWorkerGroup(pool, RayClassWithInitArgs(cls=ray.remote(Worker)), name_prefix="hf_rollout_test")
    manager = LLMServerManager.create(config=config, worker_group=workers)
    (replica,) = manager.get_replicas()
    yield Backend(config, manager, replica, adapter, prompt_ids)
    for actor in [*replica.servers, manager.global_load_balancer, *workers.workers]:
        ray.kill(actor)
    for group in pool.pgs:
        ray.util.remove_placement_group(group)


@pytest.fixture(scope="module")
def reference(tiny_vl_model, tiny_vl_processor) -> TransformersGenerateClient:
    """The same model in this process, bounded by the budget the server must compute (4 tokens)."""
    return TransformersGenerateClient(tiny_vl_model, tiny_vl_processor, max_new_tokens=RESPONSE_LENGTH - 2)


async def _generate(backend: Backend, request_id: str) -> TokenOutput:
    client = backend.manager.get_client()  # verl's LLMServerClient over its load balancer
    return await client.generate(
        request_id, prompt_ids=backend.prompt_ids, sampling_params=dict(GREEDY), image_data=[_image()]
    )


def test_backend_is_in_both_verl_registries_after_import_verl():
    assert get_rollout_replica_class("hf") is HFReplica
    assert get_rollout_class("hf", "async") is HFServerAdapter
    assert is_registered(Registration("rollout_backend", "hf", "verl_ext.rollout.hf_replica"))


def test_sharded_layouts_are_refused_with_the_key_to_set(backend):
    rollout = OmegaConf.merge(backend.config.actor_rollout_ref.rollout, {"tensor_model_parallel_size": 2})
    with pytest.raises(ValueError, match=r"tensor_model_parallel_size=1 \(got 2\)"):
        HFReplica(replica_rank=0, config=rollout, model_config=backend.config.actor_rollout_ref.model, gpus_per_node=1)


async def test_generate_through_llm_server_client_returns_the_models_tokens(backend, reference):
    out = await _generate(backend, "r1")
    assert isinstance(out, TokenOutput)
    expected = await reference.generate(
        "ref", prompt_ids=backend.prompt_ids, sampling_params=GREEDY, image_data=[_image()]
    )
    assert out.token_ids == expected.token_ids and 1 <= len(out.token_ids) <= RESPONSE_LENGTH - 2
    assert out.log_probs == pytest.approx(expected.log_probs, abs=1e-4)
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in out.log_probs)
    assert out.stop_reason == expected.stop_reason
    assert isinstance(out.extra_fields["global_steps"], int)
    assert backend.replica.server_address == "hf_server_0"


async def test_update_weights_reaches_the_server_and_sets_the_weight_version(backend, tiny_vl_model):
    before = await _generate(backend, "w0")
    original = tiny_vl_model.state_dict()[NORM].clone()

    await backend.adapter.update_weights(((name, t) for name, t in [(NORM, original * 3.0)]), global_steps=3)
    changed = await _generate(backend, "w1")
    assert changed.extra_fields["global_steps"] == 3
    assert changed.log_probs[0] != pytest.approx(before.log_probs[0], abs=1e-3)

    await backend.adapter.update_weights(iter([(NORM, original)]))  # no step given: the version moves on by one
    restored = await _generate(backend, "w2")
    assert restored.extra_fields["global_steps"] == 4
    assert (restored.token_ids, restored.log_probs) == (before.token_ids, pytest.approx(before.log_probs, abs=1e-5))


async def test_a_weight_name_the_model_lacks_is_an_error(backend):
    with pytest.raises(ValueError, match="unknown to the rollout model"):
        await backend.adapter.update_weights(iter([("model.no_such.weight", torch.zeros(2))]))


async def test_lifecycle_calls_of_verls_replica_and_adapter_return_and_serving_goes_on(backend):
    before = await _generate(backend, "l0")
    replica, adapter = backend.replica, backend.adapter
    await replica.sleep()
    await adapter.resume(tags=["weights"])
    await adapter.resume(tags=["kv_cache"])
    await adapter.release()
    await replica.wake_up()
    await replica.abort_all_requests()
    await replica.resume_generation()
    await replica.clear_kv_cache()
    await replica.release_kv_cache()
    await replica.resume_kv_cache()
    await replica.start_profile()
    await replica.stop_profile()
    after = await _generate(backend, "l1")
    assert (after.token_ids, after.log_probs) == (before.token_ids, pytest.approx(before.log_probs, abs=1e-6))


async def test_mm_processor_kwargs_reach_the_server_through_verls_client(backend, tiny_vl_processor):
    """``data.mm_processor_kwargs`` as the agent loops pass them: the server processes the image with them (12
    placeholders for 240 x 320 under max_pixels 12,544, where the processor's defaults give 54) and accepts the
    prompt; without them it refuses the prompt rather than generating from another resolution."""
    processor = tiny_vl_processor  # the server's model directory's
    kwargs = {"min_pixels": 3136, "max_pixels": 12544}
    image = Image.new("RGB", (320, 240), (10, 200, 10))
    content = [{"type": "image", "image": image}, {"type": "text", "text": "What is this?"}]
    text = processor.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    prompt_ids = processor(text=[text], images=[image], return_tensors="pt", **kwargs)["input_ids"][0].tolist()
    assert prompt_ids.count(processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")) == 12
    client = backend.manager.get_client()
    out = await client.generate(
        "mm1", prompt_ids=prompt_ids, sampling_params=dict(GREEDY), image_data=[image], mm_processor_kwargs=kwargs
    )
    assert len(out.token_ids) >= 1
    with pytest.raises(Exception, match="image placeholders do not match"):
        await client.generate("mm2", prompt_ids=prompt_ids, sampling_params=dict(GREEDY), image_data=[image])
