"""The paper recipes as a cluster user launches them: composed by ``main_ppo`` from the installed package with only
device keys overridden, every value is the paper's (Neos, Table 12 and Appendix C; ModalSearcher, §4 and Appendix C,
Tables 9-11), and what the trainer derives from them holds at paper scale: the sampler's B, window and admission
limit, one optimizer step per update, verl's own config validation at 32 and 64 ranks, a long question with its image
and the tool schemas inside the prompt budget (real Qwen tokenizer and image processor), the turn limit inside the
response budget."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from PIL import Image

from ..forks import main_ppo_jobs

DEVICE_KEYS = ("actor_rollout_ref.model.path=/models/policy",)


JOBS = {"neos": ("+recipe=neos", *DEVICE_KEYS), "modalsearcher": ("+recipe=modalsearcher", *DEVICE_KEYS),
        "neos_35b": ("+recipe=neos", *DEVICE_KEYS, "data.train_batch_size=32")}  # the paper's larger model


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, dict]:
    """``python -m verl.trainer.main_ppo OVERRIDES --cfg job --resolve`` for each of ``JOBS``, as pip installed it."""
    resolved = {name: (*overrides, "--cfg", "job", "--resolve") for name, overrides in JOBS.items()}
    return main_ppo_jobs(resolved, tmp_path_factory.mktemp("jobs"))


@pytest.fixture(scope="module")
def neos(jobs) -> dict:
    return jobs["neos"]


@pytest.fixture(scope="module")
def modalsearcher(jobs) -> dict:
    return jobs["modalsearcher"]


def test_neos_table_12_values(neos):
    data, actor = neos["data"], neos["actor_rollout_ref"]["actor"]
    rollout = neos["actor_rollout_ref"]["rollout"]
    assert data["train_batch_size"] == 64  # B
    assert rollout["n"] == 8  # G
    assert data["max_prompt_length"] + data["max_response_length"] == 131_072  # context
    assert rollout["multi_turn"]["max_assistant_turns"] == 50
    assert (rollout["temperature"], rollout["top_p"]) == (1.0, 1.0)
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"], actor["clip_ratio_c"]) == (0.2, 0.2, 3.0)
    assert (actor["loss_agg_mode"], actor["entropy_coeff"], actor["use_kl_loss"]) == ("token-mean", 0, False)
    assert neos["algorithm"]["use_kl_in_reward"] is False
    optim = actor["optim"]
    assert (optim["lr"], optim["weight_decay"], optim["betas"], optim["clip_grad"]) == (1e-6, 0.01, [0.9, 0.999], 1.0)
    assert (optim["lr_decay_style"], optim["lr_warmup_steps_ratio"]) == ("constant", 0.0)
    assert actor["ppo_epochs"] == 1 and neos["trainer"]["total_epochs"] == 1
    megatron = actor["megatron"]
    assert actor["strategy"] == "megatron"
    assert (megatron["tensor_model_parallel_size"], megatron["context_parallel_size"],
            megatron["pipeline_model_parallel_size"]) == (4, 2, 1)
    assert neos["trainer"]["n_gpus_per_node"] * neos["trainer"]["nnodes"] == 32  # policy GPUs
    assert neos["trainer"]["v1"]["neos"]["mei"]["update_every"] == 10  # K


def test_neos_freezes_the_vision_tower_in_every_worker(neos, modalsearcher):
    from verl.utils.config import omega_conf_to_dataclass

    from verl_ext.models.freeze import vision_freeze_gap

    actor = neos["actor_rollout_ref"]["actor"]
    assert actor["freeze_vision_tower"] is True
    env = neos["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env["NEOS_FREEZE_VISION_TOWER"] == "1"  # what verl_ext.models.freeze acts on, in each Ray worker
    # Megatron (the paper's engine): Megatron-Bridge's provider freezes encoder and merger before DDP and the optimizer.
    # verl's engine reads them from its own engine dataclass, built here as its worker builds it.
    engine = omega_conf_to_dataclass(OmegaConf.create(actor)).engine
    assert type(engine).__name__ == "McoreEngineConfig" and engine.vanilla_mbridge is False
    overrides = engine.override_transformer_config
    assert (overrides["freeze_vision_model"], overrides["freeze_vision_projection"]) == (True, True)
    assert overrides["freeze_language_model"] is False  # said outright: Megatron-Bridge's Qwen3-VL MoE default is True
    assert overrides["attention_backend"] == "flash"  # verl's own defaults merged, not replaced
    assert vision_freeze_gap(neos, env={}) is None  # the trainer's check passes
    # ModalSearcher trains the vision tower (Table 9: "Vision tower frozen: False")
    assert modalsearcher["actor_rollout_ref"]["actor"]["freeze_vision_tower"] is False
    assert "env_vars" not in modalsearcher["ray_kwargs"]["ray_init"]["runtime_env"]
    assert vision_freeze_gap(modalsearcher, env={}) is None


def test_the_megatron_freeze_follows_verls_freeze_vision_tower_key():
    from .test_recipe_resolution_on_cpu import compose_in_process

    job = compose_in_process("+recipe=neos", *DEVICE_KEYS, "actor_rollout_ref.actor.freeze_vision_tower=false")
    overrides = job.actor_rollout_ref.actor.megatron.override_transformer_config
    assert (overrides.freeze_vision_model, overrides.freeze_vision_projection) == (False, False)


def test_a_config_that_would_leave_the_tower_trainable_is_named(neos):
    """Each way ``freeze_vision_tower=true`` can stay a no-op gets a one-line reason naming the key to set."""
    import copy

    from verl_ext.models.freeze import vision_freeze_gap

    layout = copy.deepcopy(neos)  # a Megatron layout group without the provider keys (e.g. neos_parallel=none)
    for key in ("freeze_vision_model", "freeze_vision_projection", "freeze_language_model"):
        del layout["actor_rollout_ref"]["actor"]["megatron"]["override_transformer_config"][key]
    gap = vision_freeze_gap(layout, env={})
    assert "override_transformer_config.freeze_vision_model=true" in gap
    assert "override_transformer_config.freeze_vision_projection=true" in gap
    assert "override_transformer_config.freeze_language_model=false" in gap

    vanilla = copy.deepcopy(neos)  # the deprecated mbridge backend builds no Megatron-Bridge provider
    vanilla["actor_rollout_ref"]["actor"]["megatron"]["vanilla_mbridge"] = True
    assert "vanilla_mbridge=false" in vision_freeze_gap(vanilla, env={})

    fsdp = copy.deepcopy(neos)  # FSDP without the plugin's hook in the workers
    fsdp["actor_rollout_ref"]["actor"]["strategy"] = "fsdp2"
    del fsdp["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["NEOS_FREEZE_VISION_TOWER"]
    assert "env_vars.NEOS_FREEZE_VISION_TOWER='1'" in vision_freeze_gap(fsdp, env={})
    assert vision_freeze_gap(fsdp, env={"NEOS_FREEZE_VISION_TOWER": "1"}) is None  # set on the Ray cluster instead

    off = copy.deepcopy(neos)  # the tower asked to train while the recipe's hook would still freeze it
    off["actor_rollout_ref"]["actor"]["freeze_vision_tower"] = False
    assert "drop ray_kwargs.ray_init.runtime_env.env_vars.NEOS_FREEZE_VISION_TOWER" in vision_freeze_gap(off, env={})
    del off["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]["NEOS_FREEZE_VISION_TOWER"]
    assert vision_freeze_gap(off, env={}) is None


def test_both_recipes_configure_an_llm_answer_judge(neos, modalsearcher, monkeypatch):
    for job in (neos, modalsearcher):
        judge = job["reward"]["reward_kwargs"]["judge"]
        assert judge["url"] == "http://127.0.0.1:8000/v1" and judge["model"] == "judge"
    from verl_ext.reward.judge import JudgeConfig

    assert JudgeConfig.from_mapping(neos["reward"]["reward_kwargs"]["judge"]).url  # the manager's own parser accepts it


def test_neos_derived_sampler_and_update_plan(neos):
    from verl_ext.trainer.mixed_groups import mixed_group_settings

    config = OmegaConf.create(neos)
    sampler, _, _ = mixed_group_settings(config, config.data.train_batch_size)
    assert (sampler.groups, sampler.group_size, sampler.max_per_group) == (64, 8, 12)
    assert (sampler.window, sampler.admission_limit) == (128, 1024)
    actor = config.actor_rollout_ref.actor
    selected = sampler.groups * sampler.group_size  # exactly B*G trajectories per update
    per_step = actor.ppo_mini_batch_size * config.actor_rollout_ref.rollout.n  # verl's global batch per step
    assert (selected, selected // per_step * actor.ppo_epochs) == (512, 1)  # one optimizer step per update


def test_the_35b_variant_derives_the_papers_smaller_window(jobs):
    job = jobs["neos_35b"]
    from verl_ext.trainer.mixed_groups import mixed_group_settings

    sampler, _, _ = mixed_group_settings(OmegaConf.create(job), 32)
    assert (sampler.window, sampler.admission_limit) == (64, 512)
    assert job["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 32  # follows B


@pytest.mark.parametrize("recipe", ["neos", "modalsearcher"])
@pytest.mark.parametrize("nodes", [4, 8])  # 8-GPU nodes: the paper's 32 policy GPUs, and 64
def test_verl_validates_the_config_at_paper_scale(recipe, nodes, neos, modalsearcher):
    """verl's own check (``validate_config``, run by its TaskRunner; it instantiates the engine's actor config, so a
    key the engine does not know fails here, as ``actor.grad_clip`` did on Megatron)."""
    from verl.utils.config import validate_config

    config = OmegaConf.create({"neos": neos, "modalsearcher": modalsearcher}[recipe])
    config.trainer.n_gpus_per_node, config.trainer.nnodes = 8, nodes
    validate_config(config, use_reference_policy=False, use_critic=False)


def test_modalsearcher_table_10_values(modalsearcher):
    job = modalsearcher
    actor, rollout = job["actor_rollout_ref"]["actor"], job["actor_rollout_ref"]["rollout"]
    assert job["algorithm"]["adv_estimator"] == "rloo_vectorized"
    assert (job["data"]["train_batch_size"], actor["ppo_mini_batch_size"], rollout["n"]) == (96, 96, 6)
    assert (actor["optim"]["lr"], job["trainer"]["total_epochs"], actor["loss_agg_mode"]) == (1e-6, 4, "token-mean")
    assert (actor["use_kl_loss"], actor["entropy_coeff"], job["algorithm"]["use_kl_in_reward"]) == (False, 0, False)
    assert (rollout["name"], rollout["tensor_model_parallel_size"]) == ("vllm", 1)
    assert (rollout["gpu_memory_utilization"], rollout["max_num_batched_tokens"]) == (0.8, 8192)
    assert rollout["multi_turn"]["max_assistant_turns"] == 46
    assert job["data"]["max_prompt_length"] + job["data"]["max_response_length"] == 48_000
    assert job["data"]["mm_processor_kwargs"]["size"]["longest_edge"] == 262_144  # Table 9
    custom = rollout["custom"]["neos_rollout"]
    assert (custom["max_consecutive_errors"], custom["group_cache"]) == (3, True)


LONG_QUESTION = (
    "Start from the flag shown in the image. Let A be the country it belongs to; among the cities of A that lie on "
    "a river rising in a neighbouring country, take the one whose coat of arms shows a white tower on a red field; "
) * 12  # ~2,400 characters: longer than any question our pipelines write


@pytest.mark.parametrize("recipe, protocol", [("neos", "neos"), ("modalsearcher", "modalsearch")])
def test_system_prompt_tool_schemas_long_question_and_a_large_image_fit_the_prompt(
    recipe, protocol, tiny_vl_processor, neos, modalsearcher
):
    from tool_server.protocol import tool_schemas
    from verl_ext.rollout.prompts import system_prompt

    job = {"neos": neos, "modalsearcher": modalsearcher}[recipe]
    schemas = tool_schemas(protocol)
    messages = [
        {"role": "system", "content": system_prompt(protocol, schemas)},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": LONG_QUESTION}]},
    ]
    text = tiny_vl_processor.apply_chat_template(
        messages, tools=schemas if protocol == "neos" else None, add_generation_prompt=True
    )
    photo = Image.new("RGB", (6000, 4000))  # a 24-megapixel question photo: resized to the recipe's pixel limit
    kwargs = job["data"]["mm_processor_kwargs"]
    ids = tiny_vl_processor(text=[text], images=[photo], return_tensors="pt", **kwargs)["input_ids"][0]
    image_tokens = int((ids == tiny_vl_processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum())
    assert image_tokens > 200  # the photo really is large in tokens
    assert len(ids) <= job["data"]["max_prompt_length"], (len(ids), image_tokens)


def test_the_response_budget_holds_every_turn_the_neos_protocol_allows(neos):
    rollout = neos["actor_rollout_ref"]["rollout"]
    turns = rollout["multi_turn"]["max_assistant_turns"]
    turn_tokens = rollout["custom"]["neos_rollout"]["max_turn_tokens"]
    response = neos["data"]["max_response_length"]
    assert turns * turn_tokens <= response
    assert (response - turns * turn_tokens) / turns >= 200  # room left per turn for observations beyond generation


def test_verl_validates_the_smoke_recipe_on_its_fsdp_engine(monkeypatch):
    """neos_smoke swaps neos' Megatron engine for FSDP: the paper's parallel sizes must go with it (verl's FSDP actor
    config rejects a ``megatron`` section: the first H200 run of this session's recipes failed exactly so)."""
    from verl.utils.config import validate_config

    monkeypatch.setenv("NEOS_SMOKE_DATA", "/data/smoke")
    monkeypatch.setenv("NEOS_SMOKE_MODEL", "/models/tiny-vl")
    from .test_recipe_resolution_on_cpu import compose_in_process

    job = compose_in_process("+recipe=neos_smoke")
    assert job.actor_rollout_ref.actor.strategy == "fsdp" and "megatron" not in job.actor_rollout_ref.actor
    validate_config(job, use_reference_policy=False, use_critic=False)


def test_verl_validates_the_modalsearcher_smoke_recipe_and_it_keeps_the_papers_algorithm(monkeypatch):
    """The one-GPU shrink changes sizes only: RLOO, token-mean, lr, the agent loop and its error rule stay the
    paper's (ModalSearcher §4, Table 10), and verl's own validation accepts it on one GPU."""
    from verl.utils.config import validate_config

    monkeypatch.setenv("NEOS_SMOKE_DATA", "/data/smoke")
    monkeypatch.setenv("NEOS_SMOKE_MODEL", "/models/tiny-vl")
    from .test_recipe_resolution_on_cpu import compose_in_process

    paper, job = compose_in_process("+recipe=modalsearcher"), compose_in_process("+recipe=modalsearcher_smoke")
    for key in ("algorithm.adv_estimator", "actor_rollout_ref.actor.loss_agg_mode", "actor_rollout_ref.actor.optim.lr",
                "actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.agent.default_agent_loop",
                "actor_rollout_ref.rollout.custom.neos_rollout", "reward.reward_manager.name"):
        assert OmegaConf.select(job, key) == OmegaConf.select(paper, key), key
    assert job.algorithm.adv_estimator == "rloo_vectorized" and job.actor_rollout_ref.rollout.n >= 2
    assert job.trainer.n_gpus_per_node == 1 and job.data.train_files == "/data/smoke/train.parquet"
    validate_config(job, use_reference_policy=False, use_critic=False)


def test_neos_routes_sticky_with_adaptive_admission_on_vllm_metrics(neos):
    from verl_ext.rollout.admission_control import AdmissionSettings
    from verl_ext.trainer.mixed_groups import admission_settings

    rollout = neos["actor_rollout_ref"]["rollout"]
    assert rollout["router_config_path"].endswith("routers/sticky.yaml")
    assert rollout["disable_log_stats"] is False  # vLLM fills /metrics only with stats on
    settings = admission_settings(OmegaConf.create(neos))
    assert settings == AdmissionSettings() and settings.enable and settings.kv_target == 1.2
    off = OmegaConf.create(neos)
    off.trainer.v1.neos.sampler.adaptive_admission.enable = False
    assert not admission_settings(off).enable
    off.trainer.v1.neos.sampler.adaptive_admission.kv_target = 0
    with pytest.raises(ValueError, match="adaptive_admission.kv_target"):
        admission_settings(off)
