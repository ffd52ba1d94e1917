"""Paper-scale rehearsal benchmark: one update's rollout of the composed ``+recipe=neos`` (B = 64, G = 8, window 128,
admission limit 1,024) on CPU, with injected faults, against the same round without faults in the same process.

    PYTHONPATH=. .venv/bin/python bench/bench_rehearsal.py --world WORLD_DIR [--per-token-ms 10] [--base-ms 50]
        [--judge-ms 200] [--tool-timeout-s 15] [--judge-timeout-s 5] [--json results.json]

The parts and the faults are those of ``tests/trainer/test_rehearsal_on_cpu.py`` (``tests/trainer/rehearsal.py``):
the real sampler, ``NeosAgentLoopWorker`` running ``neos_search_agent``, TransferQueue on a local Ray, the real tool
server on the world (in this process, on this event loop), the LLM credit judge client, verl's advantage step and the
MEI schedule; the replicas are ``StandInGenerateServer`` (``--base-ms`` + ``--per-token-ms`` per generated token),
the judge model ``StandInCreditJudgeServer`` (``--judge-ms`` per reply). Faults: tool calls answered 503 or stalled
past ``--tool-timeout-s``, judge replies stalled past ``--judge-timeout-s`` or not JSON, one raising agent loop.

Figures per round: wall time of ``sample()`` (admission to the selected batch, judging included), trajectories
admitted, finished, cancelled at the policy boundary and selected, failed sessions, credit fallbacks per reason, and
the driver's CPU time per policy turn (``time.process_time`` over ``sample()`` / replica calls: tokenization, the
agent loop, the tool server, TransferQueue traffic; the stand-ins only sleep). The ratio is faulted / baseline wall.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "trainer")]  # the test's harness, ``rehearsal`` (some dependencies
# install a ``tests`` package of their own, so it is imported by its own name)

from neos_core.usage import OneLineParser, nonnegative_float, positive_float  # noqa: E402

QUESTIONS = 160


async def one_round(config, processor, rows, args, *, faults: bool, judge, tool_faults, mei_dir) -> dict:
    import transfer_queue as tq
    from rehearsal import StandInGenerateServer, _ExactMatchScored, rehearse

    judge.faults = faults
    judge.requests.clear()
    tool_faults.injected.clear()
    replica = StandInGenerateServer(
        processor.tokenizer, base_s=args.base_ms / 1e3, per_token_s=args.per_token_ms / 1e3, faults=faults
    )
    worker = _ExactMatchScored(config, replica)
    cpu = time.process_time()
    result = await rehearse(config, worker, rows, mei_dir=mei_dir, hang_guard_s=3600)
    cpu = time.process_time() - cpu
    tq.kv_clear(keys=result.keys, partition_id="train")
    m = result.metrics
    tool_errors = sum(1 for r in result.rows for t in r["neos_trajectory"]["turns"] if t.get("error_class") == "tool")
    return {
        "faults": faults,
        "wall_s": round(result.wall_s, 2),
        "selected": int(m["neos_sampler/selected"]),
        "admitted": int(m["neos_sampler/admitted"]),
        "finished": int(m["neos_sampler/finished"]),
        "cancelled": int(m["neos_sampler/cancelled"]),
        "failed_sessions": int(m["neos_rollout/failed_sessions"]),
        "judged_failures": int(m["neos_credit/judged_failures"]),
        "fallbacks": {k.rsplit("/", 1)[1]: round(v * m["neos_credit/judged_failures"])
                      for k, v in m.items() if k.startswith("neos_credit/fallback/")},
        "tool_errors_in_selected": tool_errors,
        "tool_faults_injected": dict(tool_faults.injected),
        "judge_requests": dict(judge.requests),
        "replica_calls": replica.calls,
        "cpu_ms_per_turn": round(1e3 * cpu / max(1, replica.calls), 2),
    }


async def main(args: argparse.Namespace) -> dict:
    import ray
    import transfer_queue as tq
    from aiohttp.test_utils import TestServer
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf
    from transformers import AutoProcessor

    from rehearsal import StandInCreditJudgeServer, ToolFaults, dataset, recipe_overrides
    from tool_server.app import ServerSettings, create_app
    from tool_server.cache import TieredCache
    from tool_server.mei import MEIConfig, build_interface
    from tool_server.offline.world import OfflineWorld
    from verl_ext.models.tiny_vl import cached_tiny_qwen_vl
    from verl_ext.tools.client import close_shared_clients

    tmp = Path(tempfile.mkdtemp(prefix="rehearsal-"))
    model_dir = cached_tiny_qwen_vl()
    processor = AutoProcessor.from_pretrained(model_dir)
    world = OfflineWorld.load(args.world, cache_dir=Path(args.world).parent.parent / "tool-server")
    tool_faults = ToolFaults(stall_s=args.tool_timeout_s + 1.0)
    app = create_app(world=world, mei=build_interface(MEIConfig(log_path=tmp / "mei.jsonl", ocr=False)),
                     cache=TieredCache.from_config(memory_items=1000),
                     settings=ServerSettings(max_register_images=64))
    app.middlewares.append(tool_faults.middleware)
    judge = StandInCreditJudgeServer(stall_s=args.judge_timeout_s + 1.0, latency_s=args.judge_ms / 1e3)
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    async with TestServer(app) as tool_server, TestServer(judge.app(), host="127.0.0.1") as judge_server:
        os.environ["NEOS_TOOL_SERVER_URL"] = str(tool_server.make_url("")).rstrip("/")
        os.environ["NEOS_JUDGE_URL"] = str(judge_server.make_url("/v1"))
        os.environ["NEOS_MEI_LOG"] = str(tmp / "mei.jsonl")
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            config = compose(config_name="ppo_trainer", overrides=[
                f"actor_rollout_ref.model.path={model_dir}",
                *recipe_overrides(tool_timeout_s=args.tool_timeout_s, judge_timeout_s=args.judge_timeout_s),
            ])
        rows = dataset(QUESTIONS)
        rounds = []
        for faults in (False, True):
            rounds.append(await one_round(config, processor, rows, args, faults=faults, judge=judge,
                                          tool_faults=tool_faults, mei_dir=tmp / f"mei-{faults}"))
            print(json.dumps(rounds[-1]), flush=True)
        await close_shared_clients()
    tq.close()
    ray.shutdown()
    world.close()
    baseline, faulted = rounds
    return {"rounds": rounds, "wall_ratio_faulted_over_baseline": round(faulted["wall_s"] / baseline["wall_s"], 2)}


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_rehearsal.py", description="Paper-scale rehearsal: one update's "
                      "rollout of the composed +recipe=neos on CPU with injected faults (tool 503s and stalls, judge "
                      "stalls and garbage, a raising agent loop), against the same round without faults; prints the "
                      "wall-time ratio faulted / baseline.")
    p.add_argument("--world", required=True, metavar="DIR",
                   help="a built small world (python -m data_gen.world build)")
    p.add_argument("--base-ms", type=nonnegative_float, default=50.0, metavar="MS",
                   help="stand-in replica latency per call, milliseconds (default: 50)")
    p.add_argument("--per-token-ms", type=nonnegative_float, default=10.0, metavar="MS",
                   help="stand-in replica latency per generated token, milliseconds (default: 10)")
    p.add_argument("--judge-ms", type=nonnegative_float, default=200.0, metavar="MS",
                   help="stand-in judge latency per reply, milliseconds (default: 200)")
    p.add_argument("--tool-timeout-s", type=positive_float, default=15.0, metavar="SECONDS",
                   help="tool call timeout; injected stalls last longer (default: 15)")
    p.add_argument("--judge-timeout-s", type=positive_float, default=5.0, metavar="SECONDS",
                   help="credit judge request timeout; injected stalls last longer (default: 5)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write every figure of both rounds here")
    return p


if __name__ == "__main__":
    args = parser().parse_args()
    results = asyncio.run(main(args))
    print(json.dumps({"wall_ratio_faulted_over_baseline": results["wall_ratio_faulted_over_baseline"]}))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
