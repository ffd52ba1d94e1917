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

Each side runs a warm-up round, then ``--reps`` timed rounds, each after the caches verl's ``clear_kv_cache`` resets
(prefix, multimodal processor, encoder). The figure is vLLM's median round time over ours (the goal is >= 0.9)
and the overhead per turn. ``--engine stand-in`` runs both sides against :class:`StandInEngine` (instant random
tokens, in-process): a CPU check of the workload, recording and replay; its ratio means nothing.

Where ours runs its episodes: verl runs them in ``actor_rollout_ref.rollout.agent.num_workers`` ``AgentLoopWorker``
Ray actors (its ``AgentLoopManager`` hands each a contiguous equal chunk of the batch), so building each episode's
loop and handling its turns costs CPU in several processes, not one. ``--agent-workers N`` (default: verl's
``num_workers``) does the same for the timed rounds: N :class:`EpisodeWorker` actors, each handed verl's
``LLMServerClient`` and its chunk, its images drawn and its first episode run once when it starts (off the clock);
a round is the wall time from starting every actor's chunk together to the last episode's end. With the stand-in
each actor builds its own :class:`StandInEngine` (an in-process engine cannot be shared; it is a stand-in). The
warm-up round always runs in this process, recorded: the replay needs its prompt ids. ``--agent-workers 1`` runs
the timed rounds in this process too (the bench before the flag).

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


RoundRan = list[dict[str, list[int]]]  # a timed round: per worker, each episode's uid and its tokens a turn


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

    async def reset_caches(self) -> None:
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

    async def reset_caches(self) -> None:
        """What verl's ``clear_kv_cache`` resets before each of ours' rounds: the prefix, multimodal-processor and
        encoder caches. Resetting the prefix cache alone (until 2026-12-07) let the replay's timed rounds reuse the
        processed images of the round before, which ours processes again every round."""
        await self.llm.reset_prefix_cache()
        await self.llm.reset_mm_cache()
        await self.llm.reset_encoder_cache()


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


def draw_images(args: argparse.Namespace, episodes: list[int]) -> dict[int, Any]:
    """Each episode's question image, drawn before any clock starts, as the replay's are: a rollout's images come
    decoded from its dataset."""
    return {i: question_image(args.seed * 100_000 + i, args.image_side) if args.image_side else None
            for i in episodes}


async def run_episodes(args: argparse.Namespace, client: Any, processor: Any, config: Any, model_type: str,
                       images: dict[int, Any]) -> dict[str, list[int]]:
    """The episodes of ``images`` at once, a fresh loop each (as verl's worker builds them); per episode (its uid),
    the tokens each turn generated, from the loop's own trajectory record."""
    from verl_ext.rollout.instantiate import instantiate_agent_loop
    from verl_ext.rollout.record import RECORD_KEY

    async def episode(i: int) -> tuple[str, list[int]]:
        loop = instantiate_agent_loop(AGENT["agent"], client, processor, config, hf_model_type=model_type)
        image = images[i]
        content: Any = f"Question number {i}: what does this picture show?"
        if image is not None:
            content = [{"type": "image", "image": image}, {"type": "text", "text": content}]
        out = await loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True},
                             raw_prompt=[{"role": "user", "content": content}], uid=f"q{i}")
        return f"q{i}", [end - start for start, end in (t["span"] for t in out.extra_fields[RECORD_KEY]["turns"])]

    return dict(await asyncio.gather(*(episode(i) for i in images)))


def _model_type(model: str) -> str:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model).model_type  # verl's Continuous Token builder family


async def run_ours(args: argparse.Namespace, client: Any, processor: Any, config: Any) -> tuple[float, RoundRan]:
    """One round in this process: every episode at once; wall seconds and what each episode ran."""
    model_type, images = _model_type(args.model), draw_images(args, list(range(args.episodes)))
    start = time.perf_counter()
    ran = await run_episodes(args, client, processor, config, model_type, images)
    return time.perf_counter() - start, [ran]


class EpisodeWorker:
    """One of verl's ``AgentLoopWorker`` actors, reduced to what the bench times: its chunk of the episodes, a fresh
    loop each, over the client it was handed at start (as verl hands its workers the server client). Its processor,
    images and modules are loaded when it starts, and :meth:`warm_up` runs its first episode once, off the clock: a
    long-lived verl worker is past its first-call costs (module imports, the chat template's compilation), as this
    process is after the recorded warm-up round. ``client=None``: a :class:`StandInEngine` of its own (the stand-in
    answers in-process, so each actor holds one; only the workload is shared)."""

    def __init__(self, args: argparse.Namespace, client: Any, config: Any, episodes: list[int], rank: int) -> None:
        from transformers import AutoProcessor

        import verl_ext.rollout.instantiate  # noqa: F401  (verl's and our loop modules, imported off the clock)

        self.args, self.config = args, config
        self.client = StandInEngine(args.seed + 1 + rank) if client is None else client
        self.processor = AutoProcessor.from_pretrained(args.model)
        self.model_type, self.images = _model_type(args.model), draw_images(args, episodes)

    async def warm_up(self) -> dict[str, list[int]]:
        first = min(self.images)
        return await run_episodes(self.args, self.client, self.processor, self.config, self.model_type,
                                  {first: self.images[first]})

    async def run_round(self) -> dict[str, list[int]]:
        return await run_episodes(self.args, self.client, self.processor, self.config, self.model_type, self.images)


def worker_chunks(episodes: int, workers: int) -> list[list[int]]:
    """The episode indices each worker runs: verl's ``AgentLoopManager`` splits its batch with ``DataProto.chunk``,
    contiguous equal chunks (the batch must divide)."""
    import numpy as np
    from verl.protocol import DataProto

    batch = DataProto(non_tensor_batch={"index": np.arange(episodes)})
    return [chunk.non_tensor_batch["index"].tolist() for chunk in batch.chunk(workers)]


async def start_workers(args: argparse.Namespace, client: Any, config: Any) -> list[Any]:
    """``--agent-workers`` actors holding their chunks, started and warmed up (the barrier: start-up is not timed)."""
    import ray

    if __name__ != "__main__":  # imported (the tests): a script directory, so the actors get this module by value
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    actor = ray.remote(EpisodeWorker)
    workers = [actor.remote(args, client, config, chunk, rank)
               for rank, chunk in enumerate(worker_chunks(args.episodes, args.agent_workers))]
    await asyncio.gather(*(w.warm_up.remote() for w in workers))
    return workers


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
            f"actor_rollout_ref.rollout.agent.num_workers={args.agent_workers}",
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


async def ours_rounds(args: argparse.Namespace, recording: Recording) -> tuple[list[float], list[RoundRan]]:
    """Warm-up (in this process, recorded) then ``--reps`` timed rounds of ours, in this process (``--agent-workers
    1``) or split over worker actors; the stand-in engine, else verl's vLLM replica. Round times and what ran."""
    import ray
    from omegaconf import OmegaConf
    from transformers import AutoProcessor

    start_ray = (args.engine != "stand-in" or args.agent_workers > 1) and not ray.is_initialized()
    if start_ray:
        ray.init(include_dashboard=False, log_to_driver=False)
    processor = AutoProcessor.from_pretrained(args.model)
    if args.engine == "stand-in":
        engine = StandInEngine(args.seed)
        config = OmegaConf.create({"actor_rollout_ref": {"rollout": loop_config(args)}, "data": {}})
        inner, reset, shared = engine, engine.reset_caches, None  # each worker actor builds its own stand-in
    else:
        from verl.workers.rollout.llm_server import LLMServerManager

        config = _compose_vllm_config(args)
        manager = await LLMServerManager.create(config=config)
        inner = shared = manager.get_client()
        rollout = OmegaConf.to_container(config.actor_rollout_ref.rollout)
        recording.engine = {k: rollout[k] for k in ENGINE_FIELDS}
        recording.capture_sizes = rollout["cudagraph_capture_sizes"]

        async def reset() -> None:
            await asyncio.gather(*(r.clear_kv_cache() for r in manager.rollout_replicas))

    await reset()
    seconds, _ = await run_ours(args, RecordingClient(inner, recording), processor, config)
    print(f"ours round 0 (warm-up, in this process, recorded): {seconds:.2f} s", flush=True)
    workers = await start_workers(args, shared, config) if args.agent_workers > 1 else []
    times, rounds = [], []
    for rep in range(1, args.reps + 1):
        await reset()
        if workers:  # as verl's AgentLoopManager: every worker's chunk at once, the round ends with the last
            start = time.perf_counter()
            ran = list(await asyncio.gather(*(w.run_round.remote() for w in workers)))
            seconds = time.perf_counter() - start
        else:
            seconds, ran = await run_ours(args, inner, processor, config)
        print(f"ours round {rep} (--agent-workers {args.agent_workers}): {seconds:.2f} s", flush=True)
        times.append(seconds)
        rounds.append(ran)
    for worker in workers:
        ray.kill(worker)
    if start_ray:
        ray.shutdown()  # the replica's GPU memory goes back before vLLM's side starts
    return times, rounds


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
        await engine.reset_caches()
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
    p.add_argument("--agent-workers", type=positive_int, default=None, metavar="N",
                   help="agent-loop worker actors the timed rounds of ours are split over, as verl's AgentLoopManager "
                   "splits a batch; 1: all in this process (default: verl's actor_rollout_ref.rollout.agent."
                   "num_workers)")
    p.add_argument("--seed", type=int, default=0, help="images and stand-in tokens (default: 0)")
    p.add_argument("--json", type=Path, default=None, metavar="FILE", help="also write the figures here")
    p.add_argument("--replay", default=None, help=argparse.SUPPRESS)
    return p


def _check_rounds(args: argparse.Namespace, recording: Recording, rounds: list[RoundRan]) -> None:
    """Every round, the warm-up included, ran every episode for ``--turns`` turns: else the figure is not the
    workload asked for."""
    short = "an episode ended early (an answer or the context budget)"
    expected = args.episodes * args.turns
    if len(recording.turns) != expected:
        raise RuntimeError(f"ours ran {len(recording.turns)} turns, expected {args.episodes} x {args.turns}: {short}")
    for rep, ran in enumerate(rounds, 1):
        turns = {uid: len(t) for worker in ran for uid, t in worker.items()}
        if sorted(turns) != sorted(f"q{i}" for i in range(args.episodes)) or set(turns.values()) != {args.turns}:
            raise RuntimeError(f"ours round {rep} ran {len(turns)} episodes of {sorted(set(turns.values()))} turns, "
                               f"expected {args.episodes} of {args.turns}: {short}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both sides, the ratio printed; the figures, what each timed round of ours ran and the recording returned."""
    recording = Recording()
    ours, rounds = asyncio.run(ours_rounds(args, recording))
    _check_rounds(args, recording, rounds)
    expected = args.episodes * args.turns
    theirs = vllm_rounds(args, recording)
    ours_s, vllm_s = statistics.median(ours), statistics.median(theirs)
    result = {"engine": args.engine, "model": str(args.model), "episodes": args.episodes, "turns": args.turns,
              "gen": args.gen, "image_side": args.image_side, "agent_workers": args.agent_workers, "ours_s": ours,
              "vllm_s": theirs, "ratio": vllm_s / ours_s, "overhead_ms_per_turn": 1e3 * (ours_s - vllm_s) / expected,
              "rounds": rounds, "recording": recording}
    print(f"vLLM/ours: {result['ratio']:.3f}x (median round {vllm_s:.2f} s vs {ours_s:.2f} s, --agent-workers "
          f"{args.agent_workers}; {result['overhead_ms_per_turn']:+.1f} ms per turn over {expected} turns of "
          f"{args.gen} tokens)")
    if args.json:
        figures = {k: v for k, v in result.items() if k not in ("rounds", "recording")}
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return result


def verl_agent_workers() -> int:
    """verl's default ``actor_rollout_ref.rollout.agent.num_workers``, from its composed trainer config."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        return compose(config_name="ppo_trainer").actor_rollout_ref.rollout.agent.num_workers


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, ``--agent-workers`` resolved (verl's default when not given) and checked: verl's split
    needs equal chunks."""
    p = parser()
    args = p.parse_args(argv)
    if args.replay:
        return args
    args.agent_workers = args.agent_workers or verl_agent_workers()
    if args.episodes % args.agent_workers:
        p.error(f"--episodes {args.episodes} is not a multiple of --agent-workers {args.agent_workers} (verl's "
                "AgentLoopManager splits a batch into equal chunks)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replay:
        return _replay_main(args)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
