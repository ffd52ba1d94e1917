"""Turn-level routing behind verl's real server manager, with our agent loop, on the session's CPU Ray.

verl's ``LLMServerManager`` builds the load balancer from ``rollout.router_config_path`` (our shipped
``recipes/routers/*.yaml``, verl's router plugin hook) and its replicas are added with verl's own ``add_servers``, as
verl's elastic trainers add standalone replicas; verl's ``LLMServerClient`` acquires and releases a replica around
every generate request of our ``neos_search_agent`` loop, which runs a verl ``FunctionTool`` (``tool_backend: verl``).
The replicas are ``StandInGenerateServer`` actors (``stand_in_replica``): no vLLM/SGLang can run here; each answers
every turn with the same pre-tokenized tool call after sleeping a configurable time per token, and records the
prompts it served.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import ray
from omegaconf import OmegaConf
from verl.workers.rollout.llm_server import LLMServerManager

from verl_ext.rollout.instantiate import instantiate_agent_loop
from verl_ext.rollout.record import RECORD_KEY, TrajectoryRecord

from . import stand_in_replica
from .stand_in_replica import StandInGenerateServer

ROUTERS = Path(__file__).resolve().parents[2] / "recipes" / "routers"
PAD_WORDS = 120  # each tool observation: ~120 words
FUNCTION_TOOLS = '''
from verl.tools.function_tool import function_tool
from verl.tools.schemas import ToolResponse


@function_tool
def pad(words: int) -> ToolResponse:
    """Return filler text of a given length.

    Args:
        words: how many words
    """
    return ToolResponse(text=" ".join(["filler"] * words))
'''


class Pool:
    """verl's server manager over stand-in replicas ``r0..r{n-1}``, and our loop built per episode."""

    def __init__(self, manager: LLMServerManager, servers: dict, processor, tools) -> None:
        self.manager, self.servers, self.processor, self.tools = manager, servers, processor, tools
        self.balancer = manager.global_load_balancer
        self.questions: list[str] = []

    async def episode(self, question: str, turns: int, agent: str = "neos_search_agent", **settings):
        self.questions.append(question)
        config = OmegaConf.create(
            {
                "actor_rollout_ref": {
                    "rollout": {
                        "prompt_length": 16384,
                        "response_length": 16384,
                        "multi_turn": {"max_tool_response_length": 4000},
                        "custom": {"neos_rollout": {"tool_backend": "verl", "max_turns": turns, **settings}},
                    }
                },
                "data": {},
            }
        )
        client = self.manager.get_client()  # verl's LLMServerClient over the balancer
        loop = instantiate_agent_loop(agent, client, self.processor, config, self.tools)
        out = await loop.run(
            {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True},
            raw_prompt=[{"role": "user", "content": question}],
            uid=question,
        )
        return out, TrajectoryRecord.model_validate(out.extra_fields[RECORD_KEY])

    async def settled_status(self) -> dict:
        """The balancer's status once the releases are in: verl's client releases fire-and-forget, and an asyncio
        actor may run a later call first (bounded: 100 polls)."""
        for _ in range(100):
            status = await self.balancer.get_status.remote()
            if status["total_inflight"] == 0:
                break
            await asyncio.sleep(0.05)
        return status

    async def _served(self) -> dict[str, list[tuple[int, ...]]]:
        served = {}
        for rid, server in self.servers.items():
            try:
                served[rid] = await server.served.remote()
            except ray.exceptions.RayActorError:
                served[rid] = []  # a replica the test killed
        return served

    async def placements(self) -> dict[str, list[str]]:
        """question -> the replica ids that served its episode's turns, in order. An episode is recognised by its
        first prompt (which holds the question): every later turn's prompt extends it (the context only grows)."""
        calls = [(prompt, rid) for rid, prompts in (await self._served()).items() for prompt in prompts]
        calls.sort(key=lambda c: len(c[0]))
        episodes: list[tuple[tuple[int, ...], list[str]]] = []
        for prompt, rid in calls:
            home = next((e for e in episodes if prompt[: len(e[0])] == e[0]), None)
            if home is None:
                episodes.append((prompt, [rid]))
            else:
                home[1].append(rid)
        decode = self.processor.tokenizer.decode
        return {next(q for q in self.questions if q in decode(first)): rids for first, rids in episodes}

    async def served_tokens(self) -> dict[str, int]:
        return {rid: sum(len(p) for p in prompts) for rid, prompts in (await self._served()).items()}


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    """verl's FunctionTool from a function_tool_path file (verl registers a tool name once per process)."""
    from verl.tools.tool_registry import load_all_tools

    path = tmp_path_factory.mktemp("tools") / "tools.py"
    path.write_text(FUNCTION_TOOLS)
    return load_all_tools(tool_config_path=None, function_tool_path=str(path))


@pytest.fixture(scope="module")
def reply_ids(tiny_vl_processor) -> list[int]:
    text = '<tool_call>\n{"name": "pad", "arguments": {"words": %d}}\n</tool_call><|im_end|>' % PAD_WORDS
    return tiny_vl_processor.tokenizer(text)["input_ids"]


def stand_in(reply_ids: list[int], seconds_per_token: float = 2e-5):
    ray.cloudpickle.register_pickle_by_value(stand_in_replica)  # the stand-in class travels to its actor
    return ray.remote(StandInGenerateServer).remote(reply_ids, seconds_per_token)


@pytest.fixture(scope="module")
def stand_ins(ray_cluster, reply_ids):
    """Three replicas shared by the module's tests (an actor start costs seconds on a busy 2-core box)."""
    servers = {f"r{i}": stand_in(reply_ids) for i in range(3)}
    yield servers
    for actor in servers.values():
        ray.kill(actor)


@pytest.fixture(scope="module")
def shared_managers():
    """Server managers over the module's stand-ins that tests share, keyed by router YAML (each balancer is an actor
    whose start costs ~10 s of CPU on verl's import): only for tests whose assertions hold whatever the balancer
    routed before them (see ``make_pool``)."""
    managers: dict[Path, LLMServerManager] = {}
    yield managers
    for manager in managers.values():
        ray.kill(manager.global_load_balancer)


@pytest.fixture
def make_pool(compose_ppo_config, tiny_vl_model_dir, tiny_vl_processor, tools, stand_ins, shared_managers):
    """``await make_pool(router_yaml, servers=None, shared=False)``: a Pool with a new balancer, or with ``shared`` the
    module's balancer of that YAML over the stand-ins (made on first use). Sharing is for a test that routes nothing
    (the first) or whose policy's choices its assertions accept from any history (sticky: any replica may be an
    episode's home); least_loaded's tie-break remembers all work routed, so an episode that checks it gets a fresh
    one."""
    balancers: list = []

    async def make(router_yaml: Path, servers: dict | None = None, shared: bool = False) -> Pool:
        servers = servers or stand_ins
        await asyncio.gather(*(s.reset.remote() for s in servers.values()))
        if shared and router_yaml in shared_managers:
            return Pool(shared_managers[router_yaml], servers, tiny_vl_processor, tools)
        config = compose_ppo_config(
            tiny_vl_model_dir,
            f"actor_rollout_ref.rollout.router_config_path={router_yaml}",
            "actor_rollout_ref.rollout.nnodes=1",
            rollout="hf",
        )
        manager = await LLMServerManager.create_empty(config=config)  # builds the balancer from the YAML
        await manager.global_load_balancer.add_servers.remote(servers)
        if shared:
            assert servers is stand_ins, "a shared balancer routes to the module's stand-ins"
            shared_managers[router_yaml] = manager
        else:
            balancers.append(manager.global_load_balancer)
        return Pool(manager, servers, tiny_vl_processor, tools)

    yield make
    for actor in balancers:
        ray.kill(actor)


def custom_router(tmp_path: Path, **fields) -> Path:
    path = tmp_path / "router.yaml"
    base = OmegaConf.load(ROUTERS / f"{fields.pop('policy')}.yaml")
    path.write_text(OmegaConf.to_yaml(OmegaConf.merge(base, fields)))
    return path


async def test_the_balancer_verl_builds_is_ours_with_the_files_policy(make_pool):
    pool = await make_pool(ROUTERS / "least_loaded.yaml", shared=True)
    status = await pool.balancer.get_status.remote()
    assert status["policy"] == "least_loaded" and sorted(status["registered_handles"]) == ["r0", "r1", "r2"]


async def test_one_episodes_turns_spread_under_least_loaded(make_pool):
    pool = await make_pool(ROUTERS / "least_loaded.yaml", shared=True)  # the first test routed nothing
    out, record = await pool.episode("question one", turns=6)
    assert len(record.turns) == 6
    placed = (await pool.placements())["question one"]
    assert len(placed) == 6 and set(placed) == {"r0", "r1", "r2"}  # alone, it takes the replicas in turn
    assert all(a != b for a, b in zip(placed, placed[1:]))
    status = await pool.settled_status()
    assert status["total_inflight"] == 0 and all(r["load_tokens"] == 0 for r in status["replicas"].values())


@pytest.mark.parametrize("policy", ["sticky", "cache_aware", "cost_aware"])
async def test_one_episodes_turns_stay_put_under_sticky_and_the_cache_policies_when_idle(make_pool, policy):
    pool = await make_pool(ROUTERS / f"{policy}.yaml", shared=policy == "sticky")  # the others' counters: fresh
    await pool.episode("question one", turns=6)
    placed = (await pool.placements())["question one"]
    assert len(placed) == 6 and len(set(placed)) == 1
    counters = (await pool.balancer.get_status.remote())["counters"]
    if policy != "sticky":  # the first turn's prompt (~1k tokens with the tool schema) has no cached block yet
        assert counters == {"no_cache_match": 1, "cache_hit": 5}


async def test_load_stays_balanced_under_a_skewed_workload(make_pool):
    """One 12-turn episode beside two 2-turn ones, all started together. Sticky keeps the long episode's growing
    prompts on one replica, which serves most of the tokens; least_loaded spreads them."""
    shares = {}
    for policy in ("sticky", "least_loaded"):
        pool = await make_pool(ROUTERS / f"{policy}.yaml", shared=policy == "sticky")
        await asyncio.gather(
            pool.episode("the long question", turns=12),
            pool.episode("short question a", turns=2),
            pool.episode("short question b", turns=2),
        )
        placements = await pool.placements()
        assert {q: len(p) for q, p in placements.items()} == {
            "the long question": 12,
            "short question a": 2,
            "short question b": 2,
        }
        tokens = await pool.served_tokens()
        shares[policy] = max(tokens.values()) / sum(tokens.values())
        long_episode = placements["the long question"]
        if policy == "sticky":
            assert len(set(long_episode)) == 1
            assert shares[policy] > 0.6  # the long episode alone is ~3/4 of all prompt tokens
        else:
            assert set(long_episode) == {"r0", "r1", "r2"}
            assert shares[policy] < 0.45  # 1/3 is perfect; one late turn is ~10% of the total


async def test_a_down_or_removed_replica_is_never_chosen(make_pool, stand_ins, reply_ids, tmp_path):
    doomed = stand_in(reply_ids)
    servers = {"r0": stand_ins["r0"], "r1": doomed, "r2": stand_ins["r2"]}
    pool = await make_pool(custom_router(tmp_path, policy="least_loaded", health_check_timeout_s=5), servers)
    ray.kill(doomed)  # the replica dies
    assert await pool.balancer.probe.remote() == {"r0": True, "r1": False, "r2": True}
    status = await pool.balancer.get_status.remote()
    assert status["replicas"]["r1"]["down"] and status["active_servers"] == 2 and status["probe_failures"] == 1
    _, record = await pool.episode("question one", turns=4)
    assert record.termination_reason != "error" and len(record.turns) == 4
    await pool.balancer.remove_servers.remote(["r2"])  # verl takes a replica out while it sleeps for new weights
    _, record = await pool.episode("question two", turns=3)
    assert len(record.turns) == 3
    await pool.balancer.add_servers.remote({"r2": pool.servers["r2"]})  # awake again
    await pool.episode("question three", turns=4)
    placed = await pool.placements()
    first, second, third = (placed[f"question {n}"] for n in ("one", "two", "three"))
    assert set(first) == {"r0", "r2"} and set(second) == {"r0"} and "r2" in third and "r1" not in third
