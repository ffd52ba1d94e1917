"""One tool server per node of a Ray cluster (the training cluster's), and their addresses for the agent loops.

:func:`deploy` starts a :class:`ToolServerNode` actor on every alive node, pinned there
(``NodeAffinitySchedulingStrategy``, not soft: one server group per node, never two on one). Each launches ``python -m
tool_server ARGV --host 0.0.0.0`` as its child (``--workers N`` in ARGV makes that node's group N processes behind its
router; ``--host`` in ARGV replaces 0.0.0.0) and reports ``http://<node ip>:<port>``; ``--port 0`` (the default here)
lets each take a free port. The addresses go to the agent loops as their ``tool_server_url`` list, which shards sessions
over the healthy ones (``verl_ext.tools.shards``).

The actors ask Ray for no CPU by default: a training job reserves its nodes' CPUs for its own workers, and a launcher
waiting for one would never start. The server children die with their actor (``PR_SET_PDEATHSIG``), so ending the
driver, or ``ToolServerFleet.stop``, leaves no server behind.

``python -m tool_server.ray_fleet [--ray-address ADDR] -- SERVER_ARGS`` deploys on a running cluster, prints the
addresses (``NEOS_TOOL_SERVER_URL=...``) and keeps the servers up until interrupted, logging any that dies.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from neos_core.usage import OneLineParser, nonnegative_float, positive_float
from tool_server.launch import start

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the server child before exec: SIGTERM when the actor process that started it dies (Linux)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class ToolServerNode:
    """Ray actor body: the tool server of this node, a child process of the actor."""

    def __init__(self, argv: Sequence[str]) -> None:
        import ray

        argv = list(argv) if "--host" in argv else [*argv, "--host", "0.0.0.0"]
        self._proc, url = start(argv, stderr=None, preexec_fn=die_with_parent)
        host = urlsplit(url).hostname
        if host in ("0.0.0.0", "::"):  # listening on every interface: other nodes reach it at this node's address
            host = ray.util.get_node_ip_address()
        self._url = f"http://{host}:{urlsplit(url).port}"

    def address(self) -> str:
        return self._url

    def server_pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    def stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


@dataclass
class ToolServerFleet:
    """The deployed servers: ``addresses[i]`` is served by ``actors[i]`` on node ``node_ids[i]``."""

    actors: list[Any]
    addresses: list[str]
    node_ids: list[str]

    def alive(self) -> list[bool]:
        """Per server: its actor answers and its server process runs (an actor on a lost node does not answer)."""
        import ray

        states = []
        for actor in self.actors:
            try:
                states.append(bool(ray.get(actor.alive.remote(), timeout=10)))
            except (ray.exceptions.RayError, TimeoutError):
                states.append(False)
        return states

    def stop(self) -> None:
        import ray

        for actor in self.actors:
            try:
                ray.get(actor.stop.remote(), timeout=60)
            except (ray.exceptions.RayError, TimeoutError):
                pass  # a lost actor's server died with it
            ray.kill(actor)


def cluster_nodes() -> list[str]:
    """Ids of the alive nodes with CPUs (as verl's agent-loop manager spreads its workers)."""
    import ray

    return [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0]


def deploy(
    argv: Sequence[str], *, node_ids: Sequence[str] | None = None, num_cpus: float = 0.0, timeout_s: float = 900.0
) -> ToolServerFleet:
    """A tool server (``python -m tool_server ARGV``) on each of ``node_ids`` (default: every alive node), once all
    listen. A server that does not start fails the deployment (the others are stopped): a training job that needs
    one per node should not start with fewer. ``timeout_s`` covers loading the world."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    argv = list(argv)
    if "--port" not in argv:
        argv += ["--port", "0"]
    nodes = list(node_ids) if node_ids is not None else cluster_nodes()
    if not nodes:
        raise RuntimeError("no alive Ray node with CPUs to run a tool server on")
    remote = ray.remote(ToolServerNode)
    actors = [
        remote.options(
            num_cpus=num_cpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
            max_restarts=0,
        ).remote(argv)
        for node in nodes
    ]
    fleet = ToolServerFleet(actors, [], nodes)
    try:
        fleet.addresses = ray.get([a.address.remote() for a in actors], timeout=timeout_s)
    except BaseException:
        fleet.stop()
        raise
    return fleet


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m tool_server.ray_fleet",
        description="Run one tool server per node of a Ray cluster; print their addresses for NEOS_TOOL_SERVER_URL.",
        usage="%(prog)s [--ray-address ADDR] [--num-cpus N] -- SERVER_ARGS (those of python -m tool_server)",
    )
    p.add_argument("--ray-address", default="auto", metavar="ADDR",
                   help="the Ray cluster to join (default: auto, the running one)")
    p.add_argument("--num-cpus", type=nonnegative_float, default=0.0, metavar="N",
                   help="CPUs each server's actor reserves in Ray (default: 0, so servers never wait behind the job)")
    p.add_argument("--check-every-s", type=positive_float, default=30.0, metavar="SECONDS",
                   help="how often the servers' liveness is logged (default: 30)")
    p.add_argument("server_args", nargs=argparse.REMAINDER, metavar="SERVER_ARGS",
                   help="after --: the arguments of python -m tool_server, at least --world DIR")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    server_args = args.server_args[1:] if args.server_args[:1] == ["--"] else args.server_args
    if "--world" not in server_args:
        p.error("give the tool server's arguments after --, at least --world DIR")
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import ray

    ray.init(address=args.ray_address)
    fleet = deploy(server_args, num_cpus=args.num_cpus)
    print("NEOS_TOOL_SERVER_URL=" + ",".join(fleet.addresses), flush=True)
    try:
        while True:
            time.sleep(args.check_every_s)
            dead = [a for a, up in zip(fleet.addresses, fleet.alive()) if not up]
            if dead:
                log.warning("tool servers not running: %s (their sessions are lost; new sessions avoid them)", dead)
    except KeyboardInterrupt:
        return 0
    finally:
        fleet.stop()


if __name__ == "__main__":
    sys.exit(main())
