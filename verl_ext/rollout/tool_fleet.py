"""Tool servers deployed by the training job itself, one per node (``rollout.custom.neos_tool_servers``).

With that key, the driver process (verl's TaskRunner) deploys a tool server on every node of the Ray cluster
(``tool_server.ray_fleet.deploy``) the first time something needs the address: the MEI co-evolution setup (it tells
the servers the MEI version) or the agent-loop manager (before its workers start). The addresses then replace
``custom.neos_rollout.tool_server_url``, the key the agent loops read, so every loop shards its sessions over them
(``verl_ext.tools.shards``). The servers live as long as the driver. Keys: ``args``, the ``python -m tool_server``
arguments (``--world DIR`` at least; ``--workers N`` for N processes per node, ``--redis-url`` for the shared cache
tier every node uses); ``num_cpus``, what each server's actor reserves in Ray (default 0: the job's workers hold the
nodes' CPUs).
"""

from __future__ import annotations

import logging
from typing import Any

from omegaconf import OmegaConf, open_dict

from verl_ext.rollout.settings import CUSTOM_KEY

log = logging.getLogger(__name__)
FLEET_KEY = "neos_tool_servers"
_FLEET: Any = None  # the process's ToolServerFleet, deployed once


def deploy_configured(config: Any) -> list[str] | None:
    """The deployed servers' addresses (deploying them on first call), written into ``config``'s
    ``custom.neos_rollout.tool_server_url``; None when ``custom.neos_tool_servers`` is not set."""
    global _FLEET
    spec = OmegaConf.select(config, f"actor_rollout_ref.rollout.custom.{FLEET_KEY}")
    if not spec:
        return None
    where = f"actor_rollout_ref.rollout.custom.{FLEET_KEY}"
    unknown = set(spec) - {"args", "num_cpus"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} (known: args, num_cpus)")
    args = [str(a) for a in spec.get("args") or []]
    if "--world" not in args:
        raise ValueError(f"{where}.args must give the tool server's --world DIR")
    if _FLEET is None:
        from tool_server.ray_fleet import deploy

        _FLEET = deploy(args, num_cpus=float(spec.get("num_cpus", 0.0)))
        log.info("tool servers deployed, one per node: %s", _FLEET.addresses)
    with open_dict(config):
        OmegaConf.update(
            config, f"actor_rollout_ref.rollout.custom.{CUSTOM_KEY}.tool_server_url", list(_FLEET.addresses),
            force_add=True,
        )
    return list(_FLEET.addresses)
