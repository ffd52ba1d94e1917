"""Rollout overhead at a real shape: our agent loop over verl's vLLM server vs vLLM's own generate, same turns.

One GPU, one engine at a time, the same engine settings (the model directory's architecture with dummy weights):

* ours: verl's standalone vLLM replica and load balancer (``LLMServerManager.create``, as a standalone rollout
  starts them) and verl's ``LLMServerClient``; our ``modalsearch_react_agent`` runs ``--episodes`` episodes at once,
  each a question with one image of ``--image-side`` pixels and ``--turns`` turns. The random model writes neither a
  call nor an answer, so each turn's format error is the next observation (the 3-error rule off), and every turn
  writes exactly ``--gen`` tokens (``ignore_eos``, ``max_turn_tokens``). A recording client around verl's keeps
  every turn's prompt ids, images and generated count.
* vLLM: a fresh process builds vLLM's own ``AsyncLLM`` with the engine arguments verl's server used and replays the
  recorded turns: each episode's turns in order, the episodes at once, the same prompt ids (with one placeholder per
  image, as verl's server sends them), images and token counts.

Each side runs a warm-up round, then ``--reps`` timed rounds, the prefix cache reset before each. The figure is
vLLM's median round time over ours (the goal is >= 0.9) and the overhead per turn. ``--engine stand-in`` runs both
sides against :class:`StandInEngine` (instant random tokens, in-process): a CPU check of the workload, recording and
replay; its ratio means nothing.

On the GPU machine (verl + Ray + vLLM staged by ``../shared/gpu/gpu_wheels.sh``, environment of its README)::

    python -m verl_ext.models shape --like qwen3-vl-8b --out /tmp/q3vl8b
    python bench/bench_rollout_vllm.py --model /tmp/q3vl8b --episodes 64 --turns 4 --gen 128 --image-side 448 \\
        --json /tmp/out/rollout_vllm.json

``--replay FILE`` is the internal entry point of the vLLM side's process.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from neos_core.usage import OneLineParser, nonnegative_int, positive_int, share

# The GPU image ships JAX; anything that initialises it would preallocate most of the GPU for XLA.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

TOKENS = (1_000, 150_000)  # ordinary vocabulary ids, clear of Qwen's special tokens
AGENT = {"agent": "modalsearch_react_agent", "max_consecutive_errors": None, "group_cache": False}
# verl rollout-config fields that are vLLM engine arguments: the replay builds its engine with the same values
ENGINE_FIELDS = ("dtype", "load_format", "max_model_len", "max_num_seqs", "enable_chunked_prefill",
                 "max_num_batched_tokens", "enable_prefix_caching", "logprobs_mode", "enforce_eager",
                 "gpu_memory_utilization", "seed")


@dataclass
class Turn:
    episode: str
    prompt_ids: list[int]
    images: int
    generated: int


@dataclass
class Recording:
    """What ours generated, for the replay: turns in call order, each episode's question image (PNG, base64) and the
    engine arguments and CUDA-graph batch sizes of verl's server."""

    turns: list[Turn] = field(default_factory=list)
    images: dict[str, str] = field(default_factory=dict)
    engine: dict[str, Any] = field(default_factory=dict)
    capture_sizes: list[int] = field(default_factory=list)

    def episodes(self) -> dict[str, list[Turn]]:
        out: dict[str, list[Turn]] = {}
        for turn in self.turns:
            out.setdefault(turn.episode, []).append(turn)
        return out


def question_image(seed: int, side: int):
    """A noisy picture (incompressible, so no processor shortcut), the same for a seed."""
    from PIL import Image

    rng = random.Random(seed)
    return Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))


def _png(image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def _unpng(text: str):
    from PIL import Image

    return Image.open(io.BytesIO(base64.b64decode(text))).convert("RGB")


class RecordingClient:
    """verl's ``generate`` contract around another client, recording each turn (the prompt is copied before the call:
    the loop edits its stream in place once the call returns)."""

    def __init__(self, inner: Any, recording: Recording) -> None:
        self.inner, self.recording = inner, recording

    async def generate(self, request_id: str, **kwargs: Any):
        prompt, images = list(kwargs["prompt_ids"]), kwargs.get("image_data") or []
        if images and request_id not in self.recording.images:
            self.recording.images[request_id] = _png(images[0])
        out = await self.inner.generate(request_id=request_id, **kwargs)
        self.recording.turns.append(Turn(request_id, prompt, len(images), len(out.token_ids)))
        return out


class StandInEngine:
    """Stands in for vLLM on a machine without a GPU: ``max_tokens`` random ordinary tokens at once, as verl's
    ``generate`` (ours) and as a replay target (vLLM's side). Counts the tokens it was asked for."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.prompt_tokens = self.generated = 0

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any):
        from verl.workers.rollout.replica import TokenOutput

        ids = await self.complete(prompt_ids, [], sampling_params["max_tokens"])
        return TokenOutput(token_ids=ids, log_probs=[-1.0] * len(ids), stop_reason="length",
                           extra_fields={"global_steps": 0})

    async def complete(self, prompt_ids: list[int], images: list[Any], max_tokens: int) -> list[int]:
        self.prompt_tokens += len(prompt_ids)
        self.generated += max_tokens
        return [self.rng.randrange(*TOKENS) for _ in range(max_tokens)]

    async def reset_prefix_cache(self) -> None:
        return None


class VllmEngine:
    """vLLM's own ``AsyncLLM`` (vLLM's side): token-id prompts with their images, ``ignore_eos``, log-probs on (as
    verl asks), nothing else between the caller and the engine."""

    def __init__(self, model: str, engine: dict[str, Any], max_images: int, capture_sizes: list[int]) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        compilation = {"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": capture_sizes}  # as verl's
        args = AsyncEngineArgs(model=model, limit_mm_per_prompt={"image": max(max_images, 1)},
                               compilation_config=compilation, **engine)
        self.llm = AsyncLLM.from_engine_args(args)
        self.n = 0

    async def complete(self, prompt_ids: list[int], images: list[Any], max_tokens: int) -> list[int]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        self.n += 1
        prompt = TokensPrompt(prompt_token_ids=prompt_ids, multi_modal_data={"image": images} if images else {})
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=1.0, logprobs=0)
        final = None
        async for final in self.llm.generate(prompt, params, request_id=f"replay-{self.n}"):  # noqa: B007
            continue  # each yield is the request's output so far; the last is the whole answer
        return list(final.outputs[0].token_ids)

    async def reset_prefix_cache(self) -> None:
        await self.llm.reset_prefix_cache()


# ---------------------------------------------------------------------------------------------- ours


def loop_config(args: argparse.Namespace) -> dict[str, Any]:
    """The rollout keys our loop reads: ``--turns`` turns of ``--gen`` tokens, verl's tools (none is ever called)."""
    return {
        "prompt_length": args.max_model_len // 2,
        "response_length": args.max_model_len // 2,
        "multi_turn": {"max_tool_response_length": 4000},
        "custom": {"neos_rollout": {"tool_backend": "verl", "max_turns": args.turns, "max_turn_tokens": args.gen,
                                    **{k: v for k, v in AGENT.items() if k != "agent"}}},
    }


async def run_ours(args: argparse.Namespace, client: Any, processor: Any, config: Any) -> float:
    """One round: ``--episodes`` episodes at once, a fresh loop each (as verl's worker builds them); wall seconds."""
    from transformers import AutoConfig

    from verl_ext.rollout.instantiate import instantiate_agent_loop

    model_type = AutoConfig.from_pretrained(args.model).model_type  # verl's Continuous Token builder family
    # drawn before the clock starts, as the replay's are: a rollout's images come decoded from its dataset
    images = [question_image(args.seed * 100_000 + i, args.image_side) if args.image_side else None
              for i in range(args.episodes)]

    async def episode(i: int) -> None:
        loop = instantiate_agent_loop(AGENT["agent"], client, processor, config, hf_model_type=model_type)
        image = images[i]
        content: Any = f"Question number {i}: what does this picture show?"
        if image is not None:
            content = [{"type": "image", "image": image}, {"type": "text", "text": content}]
        await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True},
                       raw_prompt=[{"role": "user", "content": content}], uid=f"q{i}")

    start = time.perf_counter()
    await asyncio.gather(*(episode(i) for i in range(args.episodes)))
    return time.perf_counter() - start


def capture_sizes(episodes: int) -> list[int]:
    """CUDA-graph batch sizes for at most ``episodes`` running sequences: powers of two and ``episodes`` itself, on
    both sides (vLLM's default list runs to 512, whose capture would dominate each side's start)."""
    return sorted({min(2 ** i, episodes) for i in range(episodes.bit_length() + 1)})


def _compose_vllm_config(args: argparse.Namespace):
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    rollout = loop_config(args)
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={os.path.abspath(args.model)}",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.nnodes=1",
            "actor_rollout_ref.rollout.n_gpus_per_node=1",
            "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            "actor_rollout_ref.rollout.load_format=dummy",
            "actor_rollout_ref.rollout.ignore_eos=True",
            f"actor_rollout_ref.rollout.gpu_memory_utilization={args.gpu_memory_utilization}",
            f"actor_rollout_ref.rollout.cudagraph_capture_sizes={capture_sizes(args.episodes)}",
            f"actor_rollout_ref.rollout.max_model_len={args.max_model_len}",
            f"actor_rollout_ref.rollout.prompt_length={rollout['prompt_length']}",
            f"actor_rollout_ref.rollout.response_length={rollout['response_length']}",
            f"actor_rollout_ref.rollout.multi_turn.max_tool_response_length="
            f"{rollout['multi_turn']['max_tool_response_length']}",
        ])
    OmegaConf.set_struct(config, False)
    config.actor_rollout_ref.rollout.custom = rollout["custom"]
    return config


async def ours_rounds(args: argparse.Namespace, recording: Recording) -> list[float]:
    """Warm-up (recorded) then ``--reps`` timed rounds of ours; the stand-in in-process, else verl's vLLM replica."""
    from omegaconf import OmegaConf
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(args.model)
    if args.engine == "stand-in":
        engine = StandInEngine(args.seed)
        config = OmegaConf.create({"actor_rollout_ref": {"rollout": loop_config(args)}, "data": {}})
        inner, reset = engine, engine.reset_prefix_cache
    else:
        import ray
        from verl.workers.rollout.llm_server import LLMServerManager

        ray.init(include_dashboard=False, log_to_driver=False)
        config = _compose_vllm_config(args)
        manager = await LLMServerManager.create(config=config)
        inner = manager.get_client()
        rollout = OmegaConf.to_container(config.actor_rollout_ref.rollout)
        recording.engine = {k: rollout[k] for k in ENGINE_FIELDS}
        recording.capture_sizes = rollout["cudagraph_capture_sizes"]

        async def reset() -> None:
            await asyncio.gather(*(r.clear_kv_cache() for r in manager.rollout_replicas))

    times = []
    for rep in range(args.reps + 1):
        await reset()
        client = RecordingClient(inner, recording) if rep == 0 else inner
        seconds = await run_ours(args, client, processor, config)
        print(f"ours round {rep}{' (warm-up, recorded)' if rep == 0 else ''}: {seconds:.2f} s", flush=True)
        if rep:
            times.append(seconds)
    if args.engine != "stand-in":
        ray.shutdown()  # the replica's GPU memory goes back before vLLM's side starts
    return times


# ---------------------------------------------------------------------------------------------- vLLM's side


def replay_plan(recording: Recording, processor: Any) -> list[list[tuple[list[int], list[Any], int]]]:
    """Per episode, its turns as vLLM receives them from verl's server: the prompt with one placeholder per image
    (``qwen2_5_vl_dedup_image_tokens``), the images, the token count. Computed before any timing."""
    from verl.workers.rollout.utils import qwen2_5_vl_dedup_image_tokens

    plan = []
    for episode, turns in recording.episodes().items():
        image = [_unpng(recording.images[episode])] if episode in recording.images else []
        plan.append([(qwen2_5_vl_dedup_image_tokens(t.prompt_ids, processor), image[: t.images], t.generated)
                     for t in turns])
    return plan


async def replay_rounds(engine: Any, plan: list[list[tuple[list[int], list[Any], int]]], reps: int) -> list[float]:
    async def episode(turns: list[tuple[list[int], list[Any], int]]) -> None:
        for prompt, images, tokens in turns:
            got = await engine.complete(prompt, images, tokens)
            if len(got) != tokens:
                raise RuntimeError(f"replay: asked {tokens} tokens, got {len(got)}")

    times = []
    for rep in range(reps + 1):
        await engine.reset_prefix_cache()
        start = time.perf_counter()
        await asyncio.gather(*(episode(turns) for turns in plan))
        seconds = time.perf_counter() - start
        print(f"vLLM round {rep}{' (warm-up)' if rep == 0 else ''}: {seconds:.2f} s", flush=True)
        if rep:
            times.append(seconds)
    return times


def _replay_main(args: argparse.Namespace) -> int:
    from transformers import AutoProcessor

    data = json.loads(Path(args.replay).read_text())
    recording = Recording([Turn(**t) for t in data["turns"]], data["images"], data["engine"], data["capture_sizes"])
    plan = replay_plan(recording, AutoProcessor.from_pretrained(args.model))
    start = time.perf_counter()
    engine = VllmEngine(os.path.abspath(args.model), recording.engine, max(t.images for t in recording.turns),
                        recording.capture_sizes)
    print(f"vLLM engine ready in {time.perf_counter() - start:.1f} s; replaying {len(plan)} episodes", flush=True)
    times = asyncio.run(replay_rounds(engine, plan, args.reps))
    print("REPLAY " + json.dumps(times), flush=True)
    return 0


def vllm_rounds(args: argparse.Namespace, recording: Recording) -> list[float]:
    """vLLM's side: in-process for the stand-in, else a fresh process (the replica's CUDA context is gone)."""
    if args.engine == "stand-in":
        from transformers import AutoProcessor

        plan = replay_plan(recording, AutoProcessor.from_pretrained(args.model))
        return asyncio.run(replay_rounds(StandInEngine(args.seed), plan, args.reps))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(asdict(recording), f)
    cmd = [sys.executable, __file__, "--replay", f.name, "--model", args.model, "--reps", str(args.reps)]
    print("vLLM's side, rerunnable alone:", " ".join(cmd[1:]), flush=True)  # if a time limit cuts this call short
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout:  # passed on as they come: a replay cut short by a timeout shows where it was
            print(line, end="", flush=True)
            if line.startswith("REPLAY "):  # the figures are in: the engine's shutdown is not waited for
                proc.terminate()
                return json.loads(line[7:])
    raise subprocess.CalledProcessError(proc.returncode, cmd)


# ---------------------------------------------------------------------------------------------- main


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_rollout_vllm.py", description="Rollout overhead at a real shape: our "
                      "agent loop over verl's vLLM server vs vLLM's own AsyncLLM replaying the same turns; prints "
                      "vLLM/ours round time (goal >= 0.9).")
    p.add_argument("--model", required=True, metavar="DIR",
                   help="model directory (python -m verl_ext.models shape --like NAME); served with dummy weights")
    p.add_argument("--engine", choices=("vllm", "stand-in"), default="vllm",
                   help="vllm (default; needs a GPU, verl, Ray, vLLM) or stand-in (CPU check of the plumbing)")
    p.add_argument("--episodes", type=positive_int, default=64, metavar="N", help="episodes at once (default: 64)")
    p.add_argument("--turns", type=positive_int, default=4, metavar="N", help="turns an episode (default: 4)")
    p.add_argument("--gen", type=positive_int, default=128, metavar="TOKENS", help="tokens a turn (default: 128)")
    p.add_argument("--image-side", type=nonnegative_int, default=448, metavar="PX",
                   help="side of each episode's question image; 0: text only (default: 448)")
    p.add_argument("--reps", type=positive_int, default=3, metavar="N",
                   help="timed rounds per side after one warm-up (default: 3)")
    p.add_argument("--gpu-memory-utilization", type=share, default=0.8, metavar="F",
                   help="vLLM's share of the GPU, both sides (default: 0.8)")
    p.add_argument("--max-model-len", type=positive_int, default=16384, metavar="TOKENS",
                   help="vLLM's context; half is the prompt budget, half the response budget (default: 16384)")
    p.add_argument("--seed", type=int, default=0, help="images and stand-in tokens (default: 0)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures here")
    p.add_argument("--replay", default=None, help=argparse.SUPPRESS)
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both sides, the ratio printed; the figures and the recording returned."""
    recording = Recording()
    ours = asyncio.run(ours_rounds(args, recording))
    expected = args.episodes * args.turns
    if len(recording.turns) != expected:
        raise RuntimeError(f"ours ran {len(recording.turns)} turns, expected {args.episodes} x {args.turns}: an "
                           "episode ended early (an answer or the context budget)")
    theirs = vllm_rounds(args, recording)
    ours_s, vllm_s = statistics.median(ours), statistics.median(theirs)
    result = {"engine": args.engine, "model": str(args.model), "episodes": args.episodes, "turns": args.turns,
              "gen": args.gen, "image_side": args.image_side, "ours_s": ours, "vllm_s": theirs,
              "ratio": vllm_s / ours_s, "overhead_ms_per_turn": 1e3 * (ours_s - vllm_s) / expected,
              "recording": recording}
    print(f"vLLM/ours: {result['ratio']:.3f}x (median round {vllm_s:.2f} s vs {ours_s:.2f} s; "
          f"{result['overhead_ms_per_turn']:+.1f} ms per turn over {expected} turns of {args.gen} tokens)")
    if args.json:
        args.json.write_text(json.dumps({k: v for k, v in result.items() if k != "recording"}, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.replay:
        return _replay_main(args)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
