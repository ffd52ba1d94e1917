"""``bench/bench_rollout_vllm.py`` on the stand-in engine: our loop runs the workload it is told (episodes x turns of
``--gen`` tokens, one question image each), the recording holds what the engine was sent, and the replay sends vLLM
the same turns with one placeholder per image, as verl's server does; the timed rounds run in this process or split
over worker actors as verl's AgentLoopManager splits a batch. The vLLM side itself needs the GPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # the bench scripts, as they run
import bench_rollout_vllm as bench  # noqa: E402

IMAGE_PAD = 151655


@pytest.fixture(scope="module")
def result(tiny_vl_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "figures.json"
    args = bench.parse_args(["--model", str(tiny_vl_model_dir), "--engine", "stand-in", "--episodes", "3",
                             "--turns", "3", "--gen", "8", "--image-side", "56", "--reps", "1", "--agent-workers", "1",
                             "--json", str(out)])
    return bench.run(args), out


@pytest.fixture(scope="module")
def two_workers(tiny_vl_model_dir, ray_cluster, tmp_path_factory):
    """Timed rounds split over two worker actors, on the session's Ray."""
    out = tmp_path_factory.mktemp("bench") / "figures.json"
    args = bench.parse_args(["--model", str(tiny_vl_model_dir), "--engine", "stand-in", "--episodes", "4",
                             "--turns", "2", "--gen", "8", "--image-side", "56", "--reps", "2", "--agent-workers", "2",
                             "--json", str(out)])
    return bench.run(args), out


def test_ours_runs_every_turn_of_every_episode_with_the_token_count_asked(result):
    figures, _ = result
    episodes = figures["recording"].episodes()
    assert len(episodes) == 3 and all(len(turns) == 3 for turns in episodes.values())
    for turns in episodes.values():
        assert [t.generated for t in turns] == [8, 8, 8]
        for before, after in zip(turns, turns[1:]):  # the context only grows: the turn's prompt extends the last
            assert after.prompt_ids[: len(before.prompt_ids)] == before.prompt_ids
            assert len(after.prompt_ids) > len(before.prompt_ids) + 8  # its reply and an error observation
        # a 56x56 image is the tiny model's minimum, 4 x 28^2 pixels: 4 merged visual tokens
        assert all(t.images == 1 and t.prompt_ids.count(IMAGE_PAD) == 4 for t in turns)


def test_one_worker_runs_every_timed_round_in_this_process(result):
    figures, path = result
    assert figures["rounds"] == [[{"q0": [8, 8, 8], "q1": [8, 8, 8], "q2": [8, 8, 8]}]]  # one round, one "worker"
    assert json.loads(path.read_text())["agent_workers"] == 1


def test_two_workers_split_each_round_into_contiguous_chunks_of_whole_episodes(two_workers):
    figures, path = two_workers
    # verl's AgentLoopManager split: 4 episodes over 2 workers, q0 q1 to the first, q2 q3 to the second; every
    # episode ran its 2 turns of 8 tokens in both timed rounds
    assert figures["rounds"] == [[{"q0": [8, 8], "q1": [8, 8]}, {"q2": [8, 8], "q3": [8, 8]}]] * 2
    assert len(figures["recording"].turns) == 4 * 2  # the warm-up, in this process, recorded
    written = json.loads(path.read_text())
    assert written["agent_workers"] == 2 and len(written["ours_s"]) == 2 and "rounds" not in written


def test_worker_chunks_are_verls_contiguous_equal_chunks():
    assert bench.worker_chunks(6, 3) == [[0, 1], [2, 3], [4, 5]]
    assert bench.worker_chunks(2, 1) == [[0, 1]]


def test_episodes_that_do_not_divide_among_the_workers_are_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--model", "m", "--episodes", "6", "--agent-workers", "4"])
    assert "--episodes 6 is not a multiple of --agent-workers 4" in capsys.readouterr().err


def test_replay_sends_the_recorded_turns_with_one_placeholder_per_image(result, tiny_vl_processor):
    figures, _ = result
    recording = figures["recording"]
    plan = bench.replay_plan(recording, tiny_vl_processor)
    flat = [turn for episode in plan for turn in episode]
    assert len(flat) == len(recording.turns) == 9
    for (prompt, images, tokens), recorded in zip(flat, [t for ts in recording.episodes().values() for t in ts]):
        assert prompt.count(IMAGE_PAD) == 1 and len(images) == 1 and images[0].size == (56, 56)
        assert [i for i in prompt if i != IMAGE_PAD] == [i for i in recorded.prompt_ids if i != IMAGE_PAD]
        assert tokens == 8


def test_the_replay_engine_is_asked_for_exactly_the_recorded_tokens(result, tiny_vl_processor):
    import asyncio

    figures, _ = result
    engine = bench.StandInEngine()
    plan = bench.replay_plan(figures["recording"], tiny_vl_processor)
    asyncio.run(bench.replay_rounds(engine, plan, reps=2))
    assert engine.generated == 3 * 9 * 8  # warm-up and two rounds, 9 turns of 8 tokens
    assert engine.prompt_tokens == 3 * sum(len(p) for episode in plan for p, _, _ in episode)


def test_the_vllm_side_resets_the_caches_verl_resets_before_each_of_ours_rounds(result, tiny_vl_processor):
    """Ours' rounds start after verl's ``clear_kv_cache`` (prefix, multimodal-processor and encoder caches); the
    replay must reset the same ones, or its rounds reuse the images processed in the round before. verl's method is
    read from its source: its package needs vLLM, which this machine lacks."""
    import ast
    import asyncio
    import re

    import verl

    source = (Path(verl.__file__).parent / "workers/rollout/vllm_rollout/vllm_async_server.py").read_text()
    verls = next(node for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.AsyncFunctionDef) and node.name == "clear_kv_cache")
    verl_resets = set(re.findall(r"self\.engine\.(reset_\w+)\(", ast.get_source_segment(source, verls)))
    assert verl_resets == {"reset_prefix_cache", "reset_mm_cache", "reset_encoder_cache"}

    called: list[str] = []

    class RecordingAsyncLLM:
        def __getattr__(self, name):
            async def record(*_, **__):
                called.append(name)
            return record

    engine = object.__new__(bench.VllmEngine)  # its __init__ starts vLLM
    engine.llm = RecordingAsyncLLM()
    asyncio.run(engine.reset_caches())
    assert set(called) == verl_resets

    class CountingStandIn(bench.StandInEngine):
        resets = 0

        async def reset_caches(self) -> None:
            self.resets += 1

    counting = CountingStandIn()
    asyncio.run(bench.replay_rounds(counting, bench.replay_plan(result[0]["recording"], tiny_vl_processor), reps=2))
    assert counting.resets == 3  # before the warm-up and each timed round


def test_figures_are_printed_and_written(result):
    figures, path = result
    written = json.loads(path.read_text())
    assert written["engine"] == "stand-in" and len(written["ours_s"]) == len(written["vllm_s"]) == 1
    assert written["ratio"] == pytest.approx(written["vllm_s"][0] / written["ours_s"][0])
    assert "recording" not in written


def test_a_negative_image_side_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--model", "m", "--image-side", "-1"])
    assert "--image-side: must be >= 0, got -1" in capsys.readouterr().err


def test_the_vllm_side_composes_verls_config_with_the_workload_and_every_mirrored_engine_field(tiny_vl_model_dir):
    from omegaconf import OmegaConf

    from verl_ext.rollout.settings import resolve_settings

    args = bench.parse_args(["--model", str(tiny_vl_model_dir), "--turns", "5", "--gen", "64",
                             "--max-model-len", "8192", "--gpu-memory-utilization", "0.4"])
    assert args.agent_workers == 8  # verl 0.9.1's default agent.num_workers, read from its composed config
    rollout = bench._compose_vllm_config(args).actor_rollout_ref.rollout
    assert rollout.agent.num_workers == 8
    assert (rollout.name, rollout.load_format, rollout.ignore_eos, rollout.max_model_len) == ("vllm", "dummy", True,
                                                                                              8192)
    assert rollout.gpu_memory_utilization == 0.4 and rollout.prompt_length == rollout.response_length == 4096
    plain = OmegaConf.to_container(rollout)
    assert set(bench.ENGINE_FIELDS) <= set(plain)  # what the replay's AsyncLLM is built with
    assert plain["cudagraph_capture_sizes"] == [1, 2, 4, 8, 16, 32, 64]  # --episodes 64: both sides capture these
    settings = resolve_settings("modalsearch", plain, {})
    assert (settings.max_turns, settings.max_turn_tokens, settings.max_consecutive_errors) == (5, 64, None)


def test_cuda_graph_sizes_cover_every_batch_up_to_the_episode_count():
    assert bench.capture_sizes(1) == [1]
    assert bench.capture_sizes(48) == [1, 2, 4, 8, 16, 32, 48]


def test_ours_runs_at_the_qwen3_vl_shape_with_its_processor_and_builder(tmp_path):
    """The real Qwen3-VL-8B directory (no weights: the stand-in generates): verl's Qwen3-VL Continuous Token builder
    and the shape's processor, a 512x512 image as 32x32 patches of 16 merged 2x2 = 256 placeholders in every turn."""
    from verl_ext.models.shapes import write_shape

    model = write_shape("qwen3-vl-8b", tmp_path / "q3vl")
    args = bench.parse_args(["--model", str(model), "--engine", "stand-in", "--episodes", "2", "--turns", "2",
                             "--gen", "8", "--image-side", "512", "--reps", "1", "--agent-workers", "1"])
    turns = bench.run(args)["recording"].turns
    assert len(turns) == 4 and all(t.prompt_ids.count(IMAGE_PAD) == 256 for t in turns)
