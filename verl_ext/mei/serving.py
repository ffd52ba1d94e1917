"""The MEI server started by the trainer on the dedicated MEI pool (Neos §4.1: 8 GPUs of their own for MEI serving
and SFT): a Ray actor on the pool's first bundle runs ``python -m verl_ext.mei.vllm_server`` (or the transformers
``verl_ext.mei.server`` with ``engine: hf``) as its child, on the GPU Ray gave it, and reports its address.

Config ``trainer.v1.neos.mei.serve`` (used only with ``pool: dedicated``): ``enable`` (default false: the MEI server
at ``server_url`` is started outside the job), ``engine`` (``vllm`` or ``hf``), ``port`` (default: ``server_url``'s
port, so a tool server started with ``--mei-endpoint`` at that address finds it), ``max_new_tokens`` and ``args``
(extra ``vllm serve`` flags, e.g. ``[--gpu-memory-utilization, "0.5", --max-model-len, "32768"]``). The actor takes a
share of the bundle's GPU (``1 / max_colocate_count``), as verl's own colocated workers do, so it sits on the same GPU
as the pool's first MEI SFT rank: size ``--gpu-memory-utilization`` for both. The server child dies with its actor.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from tool_server.ray_fleet import die_with_parent
from verl_ext.mei.vllm_server import wait_healthy

ENGINES = {"vllm": "verl_ext.mei.vllm_server", "hf": "verl_ext.mei.server"}


class ServeSettings(BaseModel):
    """``trainer.v1.neos.mei.serve``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enable: bool = False
    engine: Literal["vllm", "hf"] = "vllm"
    port: int | None = Field(None, ge=1, le=65535)
    max_new_tokens: int = Field(2048, ge=1)
    args: list[str] = []
    start_timeout_s: float = Field(1800.0, gt=0)


def server_command(settings: ServeSettings, model_path: str, version: str, port: int) -> list[str]:
    command = [sys.executable, "-m", ENGINES[settings.engine], "--model", str(model_path), "--version", version,
               "--host", "0.0.0.0", "--port", str(port), "--max-new-tokens", str(settings.max_new_tokens)]
    if settings.engine == "hf":  # on the actor's GPU (the CPU on a pool without GPUs)
        if settings.args:
            raise ValueError("trainer.v1.neos.mei.serve.args are vllm serve flags; engine hf takes none")
        return command
    return [*command, "--", *settings.args]


class MEIServerProcess:
    """Ray actor body: the MEI server of the dedicated pool, a child process on this actor's GPU."""

    def __init__(self, command: Sequence[str], port: int) -> None:
        import ray

        self._proc = subprocess.Popen(list(command), env=dict(os.environ), preexec_fn=die_with_parent)
        self._url = f"http://{ray.util.get_node_ip_address()}:{port}"
        self._local = f"http://127.0.0.1:{port}"

    def address(self, timeout_s: float) -> str:
        """Once the server answers ``/health`` (its model loaded); raises if it exits or the time runs out."""
        asyncio.run(wait_healthy(self._local, self._proc, timeout_s))
        return self._url

    def alive(self) -> bool:
        return self._proc.poll() is None

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def start_on_pool(
    pool: Any, settings: ServeSettings, model_path: str, version: str, server_url: str
) -> tuple[Any, str]:
    """Start the MEI server on ``pool``'s first bundle (a verl ``RayResourcePool``) serving ``model_path`` as
    ``version``; returns the actor and its address once it is healthy (the trainer then checks the version)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    port = settings.port or urlsplit(server_url).port or 8010
    command = server_command(settings, model_path, version, port)
    placement_group = pool.get_placement_groups()[0]
    actor = ray.remote(MEIServerProcess).options(
        num_cpus=0, num_gpus=1 / pool.max_colocate_count if pool.use_gpu else 0, max_restarts=0,
        scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=placement_group,
                                                             placement_group_bundle_index=0),
    ).remote(command, port)
    try:
        url = ray.get(actor.address.remote(settings.start_timeout_s))
    except BaseException:
        ray.kill(actor)
        raise
    return actor, url
