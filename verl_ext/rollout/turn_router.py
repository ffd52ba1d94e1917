"""verl's rollout load balancer with turn-level routing: :class:`TurnLoadBalancer`, loaded through verl 0.9.1's own
router plugin hook ``actor_rollout_ref.rollout.router_config_path`` (a YAML with ``router_class`` and the
:class:`~verl_ext.rollout.routing.RouterSettings`; ``recipes/routers/*.yaml`` ship one per policy:
``${neos_path:routers/cost_aware.yaml}``, +recipe=neos's). verl builds it as a Ray actor shared by every agent-loop
worker's ``LLMServerClient``, which calls ``acquire_server`` before and ``release_server`` after each generate
request.

It implements verl's ``RequestLoadBalancer`` protocol (``verl/workers/rollout/router.py``), so verl's trainers drive it
as they drive their own: ``remove_servers`` / ``add_servers`` while replicas sleep for a weight update (the removed
replica is never chosen; a re-added one starts with an empty prefix cache), ``clear_sticky_cache`` at phase switches,
``get_total_inflight`` while draining. It also probes every replica every ``health_check_interval_s`` (Ray's
``__ray_ready__``): a replica whose actor died or does not answer within ``health_check_timeout_s`` is marked down and
skipped until a later probe succeeds. Methods are coroutines: the actor is an asyncio actor, one event loop, no locks.
``get_status()["turn_latency_s"]`` is each replica's mean turn time (acquire to release, exponentially weighted): the
adaptive admission's signal where the engine exports no KV metrics (``verl_ext.rollout.replica_signals``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from typing import Any

import ray

from verl_ext.rollout.routing import RouterSettings, TurnRouter, prefix_keys

log = logging.getLogger(__name__)
LATENCY_WEIGHT = 0.1  # of each new turn in a replica's mean turn time


def _max_tokens(sampling_params: dict[str, Any] | None) -> int | None:
    params = sampling_params or {}
    value = params.get("max_tokens", params.get("max_new_tokens"))
    return None if value is None else int(value)


class TurnLoadBalancer:
    """``router_class`` for ``rollout.router_config_path``: verl calls ``TurnLoadBalancer(servers, yaml_dict)``."""

    def __init__(self, servers: dict[str, Any], config: dict[str, Any] | None = None) -> None:
        settings = {k: v for k, v in (config or {}).items() if k != "router_class"}
        self.settings = RouterSettings.model_validate(settings)
        self._handles: dict[str, Any] = dict(servers)
        self.router = TurnRouter(self.settings, servers)
        self._probing: asyncio.Task[None] | None = None
        self.probe_failures = 0
        self._started: dict[tuple[str, str], deque[float]] = defaultdict(deque)  # (replica, request id) -> starts
        self.turn_latency_s: dict[str, float] = {}

    def _ensure_probing(self) -> None:
        """Started from the first call, inside the actor's event loop (the constructor runs outside it)."""
        if self._probing is None or self._probing.done():
            self._probing = asyncio.get_running_loop().create_task(self._probe_forever())

    async def _probe_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.health_check_interval_s)
            await self.probe()

    async def probe(self) -> dict[str, bool]:
        """One health round over every replica in the pool; returns replica id -> up."""
        ids = list(self._handles)

        async def alive(rid: str) -> bool:
            try:
                await asyncio.wait_for(self._handles[rid].__ray_ready__.remote(), self.settings.health_check_timeout_s)
                return True
            except (asyncio.TimeoutError, ray.exceptions.RayError):
                return False

        results = dict(zip(ids, await asyncio.gather(*(alive(rid) for rid in ids)), strict=True))
        for rid, up in results.items():
            if rid in self._handles and self.router.set_down(rid, not up):
                if up:
                    log.warning("rollout replica %s answers again: routing to it resumes", rid)
                else:
                    self.probe_failures += 1
                    log.warning("rollout replica %s did not answer its health probe: no turns go to it", rid)
        return results

    # verl's RequestLoadBalancer protocol
    def require_acquire_fields(self) -> list[str]:
        return ["prompt_ids", "sampling_params"]

    def require_release_fields(self) -> list[str]:
        return ["request_id"]

    async def acquire_server(
        self, request_id: str, prompt_ids: list[int] | None = None, sampling_params: dict[str, Any] | None = None
    ) -> tuple[str, Any]:
        self._ensure_probing()
        ids = list(prompt_ids or [])
        cached = self.settings.policy in ("cache_aware", "cost_aware")  # the policies that read the prefix mirrors
        keys = prefix_keys(ids, self.settings.block_tokens) if cached else []
        decision = self.router.route(request_id, keys, len(ids), _max_tokens(sampling_params))
        self._started[(decision.replica, request_id)].append(time.monotonic())
        return decision.replica, self._handles[decision.replica]

    async def release_server(self, server_id: str, request_id: str | None = None) -> None:
        self.router.release(server_id, request_id or "")
        started = self._started.get((server_id, request_id or ""))
        if started:
            took = time.monotonic() - started.popleft()
            if not started:
                del self._started[(server_id, request_id or "")]
            mean = self.turn_latency_s.get(server_id)
            self.turn_latency_s[server_id] = took if mean is None else mean + LATENCY_WEIGHT * (took - mean)

    async def add_servers(self, servers: dict[str, Any]) -> None:
        self._handles.update(servers)
        self.router.add(servers)

    async def remove_servers(self, server_ids: list[str]) -> None:
        for sid in server_ids:
            self._handles.pop(sid, None)
        self.router.remove(server_ids)

    async def get_all_servers(self) -> list[str]:
        return [rid for rid, s in self.router.replicas.items() if not s.down]

    async def clear_sticky_cache(self) -> dict[str, Any]:
        dropped = self.router.clear()
        return {"cleared_entries": dropped, "server_loads": self._loads()}

    async def get_total_inflight(self) -> int:
        return sum(s.in_flight for s in self.router.replicas.values())

    async def get_status(self) -> dict[str, Any]:
        status = self.router.status()
        return {
            "servers": self._loads(),
            "total_inflight": await self.get_total_inflight(),
            "active_servers": len(await self.get_all_servers()),
            "registered_handles": list(self._handles),
            "probe_failures": self.probe_failures,
            "turn_latency_s": dict(self.turn_latency_s),
            **status,
        }

    def _loads(self) -> dict[str, int]:
        return {rid: s.in_flight for rid, s in self.router.replicas.items()}
