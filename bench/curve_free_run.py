"""A warm start's free-running check: what the first RL step will see, measured on CPU before a GPU is asked for.

``curve_sft_plain.py``'s checks hand the policy the expert's history and judge one turn at a time. RL hands it its
own history. On 2026-12-07 a warm start that passed those checks on the known-answer set (91% of turns of the
expert's kind, 66% of answers right after the expert's history) wrote 42% well-formed calls and answered 0 of 32
at the first RL step on an H100: one wrong step and the from-scratch policy is off every path it learned.

This runs episodes the way RL runs them: the recipe composed as ``main_ppo`` composes it, its dataset rows through
verl's ``RLHFDataset``, the recipe's agent loop from verl's registry, a real tool server on the world, the
reward manager it configures and its sampling. The one stand-in is the engine: transformers'
``generate`` in this process (``TransformersGenerateClient``) instead of vLLM. It prints the metrics RL logs at a
step (``critic/score/mean``, ``neos_groups/mixed_share``, ``neos_rollout/turn_outcome_share/*``, ...) and writes
them, with every trajectory's turns, to ``--out``::

    PYTHONPATH=. python bench/curve_free_run.py --model .gpu/warm/mrope_gpu400/step_400/huggingface \\
        --data .gpu/curve-data-known --questions 8 --out /tmp/free-run.json

Start RL only where this shows mixed groups: a group of ``G`` that is all failures trains nothing under either
estimator.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock

from neos_core.usage import OneLineParser, positive_int
from tool_server.mei.jsonl import write_atomic

SPLITS = {"rl": "train_files", "benchmark": "val_files"}


def parser() -> OneLineParser:
    p = OneLineParser(prog="python bench/curve_free_run.py", description="Episodes of a warm-started policy as RL "
                      "runs them (the recipe's agent loop, tool server, judge and sampling; transformers' generate "
                      "instead of vLLM): the metrics of RL's first step, on CPU.")
    p.add_argument("--model", type=Path, required=True, metavar="DIR", help="the policy (a Hugging Face directory)")
    p.add_argument("--data", type=Path, required=True, metavar="DIR",
                   help="the curve's data directory (rl.parquet, benchmark.parquet; world/ unless --world)")
    p.add_argument("--world", type=Path, default=None, metavar="DIR", help="the world the tool server serves "
                   "(default: DATA/world)")
    p.add_argument("--split", choices=sorted(SPLITS), default="rl",
                   help="rl: what RL trains on, sampled as RL samples (default); benchmark: the held-out set, "
                   "sampled as verl's validation samples (val_kwargs)")
    p.add_argument("--questions", type=positive_int, default=8, metavar="N", help="the split's first N rows "
                   "(default: 8)")
    p.add_argument("--group-size", type=positive_int, default=None, metavar="G",
                   help="episodes per question (default: the recipe's actor_rollout_ref.rollout.n, or "
                   "val_kwargs.n for --split benchmark)")
    p.add_argument("--temperature", type=float, default=None, metavar="T",
                   help="sampling temperature (default: the recipe's, val_kwargs' for --split benchmark)")
    p.add_argument("--recipe", default="neos_curve", help="the recipe RL runs (default: neos_curve)")
    p.add_argument("--device", default="cpu", help="where the policy runs (default: cpu)")
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="JSON: the metrics and every trajectory")
    return p


def compose(recipe: str, model: Path, data: Path, url: str):
    """The recipe as ``main_ppo`` composes it, pointed at this model, data and tool server (the environment variables
    its values read, set only while it is composed and resolved)."""
    from omegaconf import OmegaConf

    from verl_ext.eval.verl_val import compose_recipe

    env = {"NEOS_CURVE_DATA": str(data), "NEOS_CURVE_POLICY": str(model), "NEOS_TOOL_SERVER_URL": url}
    with mock.patch.dict(os.environ, env):
        config = compose_recipe(recipe, [f"actor_rollout_ref.model.path={model}"])
        OmegaConf.resolve(config)
    return config


def sampling(config, temperature: float | None, validate: bool = False) -> dict[str, Any]:
    """What verl's ``AgentLoopWorker.generate_sequences`` sends: for a training batch the rollout's temperature,
    top-p and top-k; for validation (``validate``) those of ``val_kwargs``, greedy where it does not sample.
    ``temperature`` replaces either's."""
    rollout = config.actor_rollout_ref.rollout
    source = rollout.val_kwargs if validate else rollout
    params = {"temperature": source.temperature, "top_p": source.top_p, "top_k": source.top_k,
              "repetition_penalty": 1.0, "logprobs": rollout.calculate_log_probs}
    if validate and not rollout.val_kwargs.do_sample:
        params.update(temperature=0, top_p=1.0, top_k=-1)
    return params if temperature is None else {**params, "temperature": temperature}


async def run_episodes(client: Any, processor: Any, config, rows: list[dict[str, Any]], group_size: int,
                       params: dict[str, Any]) -> list[dict[str, Any]]:
    """``group_size`` episodes of every row at once, each scored by the reward manager the recipe configures (verl's
    ``load_reward_manager`` on its ``reward`` section); one dict each."""
    from verl.trainer.ppo.reward import load_reward_manager

    import verl_ext.reward.managers  # noqa: F401  (registers the managers, as the plugin does)
    from verl_ext.rollout.instantiate import instantiate_agent_loop
    from verl_ext.rollout.record import RECORD_KEY
    from verl_ext.tools.client import close_shared_clients
    from verl_ext.walkthrough.scoring import score

    manager = load_reward_manager(config, processor.tokenizer)
    default_loop = config.actor_rollout_ref.rollout.agent.default_agent_loop

    async def episode(number: int, row: dict[str, Any], member: int) -> dict[str, Any]:
        loop = instantiate_agent_loop(row.get("agent_name") or default_loop, client, processor, config)
        out = await loop.run(dict(params), **{**row, "uid": f"q{number}"})
        reward, prediction = await score(manager, out, row["extra_info"]["question"],
                                         row["reward_model"]["ground_truth"])
        record = out.extra_fields[RECORD_KEY]
        return {"question": number, "member": member, "reward": reward, "prediction": prediction,
                "target": row["reward_model"]["ground_truth"]["target"], "extra_fields": out.extra_fields,
                "turns": [{"outcome": t["outcome"], "error_type": t.get("error_type"),
                           "tools": [c["tool_name"] for c in t["calls"]], "text": t["text"]}
                          for t in record["turns"]]}

    try:
        return list(await asyncio.gather(*(episode(n, row, m) for n, row in enumerate(rows)
                                           for m in range(group_size))))
    finally:
        await close_shared_clients()  # the loops' tool-server connections belong to this event loop


def metrics(episodes: list[dict[str, Any]]) -> dict[str, float]:
    """The step metrics RL logs, computed by the functions the trainer calls."""
    from verl_ext.credit import CreditParams
    from verl_ext.trainer.metrics import batch_metrics, group_metrics

    rewards = [e["reward"] for e in episodes]
    out = {"critic/score/mean": sum(rewards) / len(rewards)}
    out.update(group_metrics([str(e["question"]) for e in episodes], rewards))
    out.update(batch_metrics([e["extra_fields"] for e in episodes], CreditParams()))
    return out


def check(model: Any, processor: Any, *, data: Path, world: Path, split: str = "rl", questions: int = 8,
          group_size: int | None = None, temperature: float | None = None, recipe: str = "neos_curve",
          forced: Any = None) -> dict[str, Any]:
    """Run ``questions`` x ``group_size`` episodes and return the result ``--out`` holds. ``forced``: the generate
    client's test device (scripted turns), never for a real check."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from tool_server.launch import served
    from verl_ext.rollout.hf_generate import TransformersGenerateClient

    start = time.perf_counter()
    with served(world.resolve(), "--no-ocr", "--log-level", "WARNING") as url:
        config = compose(recipe, Path(model.name_or_path).resolve(), data.resolve(), url)
        files = config.data[SPLITS[split]]
        dataset = RLHFDataset(data_files=files, tokenizer=processor.tokenizer, config=config.data,
                              processor=processor)
        if len(dataset) < questions:
            raise ValueError(f"--questions {questions}: {files} holds {len(dataset)} rows")
        rows = [{k: v for k, v in dataset[i].items() if not hasattr(v, "shape")} for i in range(questions)]
        rollout = config.actor_rollout_ref.rollout
        client = TransformersGenerateClient(model, processor, max_new_tokens=rollout.response_length, forced=forced)
        validate = split == "benchmark"
        group_size = group_size or (rollout.val_kwargs.n if validate else rollout.n)
        params = sampling(config, temperature, validate)
        episodes = asyncio.run(run_episodes(client, processor, config, rows, group_size, params))
    figures = metrics(episodes)
    for e in episodes:
        del e["extra_fields"]
    return {"model": model.name_or_path, "data": str(files), "questions": questions, "group_size": group_size,
            "sampling": params, "seconds": round(time.perf_counter() - start, 1), "metrics": figures,
            "episodes": episodes}


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    world = args.world or args.data / "world"
    for flag, path in (("--model", args.model / "config.json"), ("--world", world / "manifest.json")):
        if not path.is_file():
            p.error(f"{flag}: {path} not found")
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(args.model)
    model = AutoModelForImageTextToText.from_pretrained(args.model, dtype=torch.float32).to(args.device).eval()
    try:
        result = check(model, processor, data=args.data, world=world, split=args.split, questions=args.questions,
                       group_size=args.group_size, temperature=args.temperature, recipe=args.recipe)
    except ValueError as exc:
        p.error(str(exc))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(args.out, json.dumps(result, indent=1, ensure_ascii=False).encode(), durable=False)
    figures, episodes = result["metrics"], result["episodes"]
    for key in sorted(figures):
        print(f"{key}: {figures[key]:.3f}")
    right = sum(e["reward"] >= 0.5 for e in episodes)
    print(f"{right} of {len(episodes)} answers right ({args.questions} questions x {result['group_size']}); "
          f"{args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
