"""``tool_server.ray_fleet.deploy`` on two Ray nodes (``ray.cluster_utils.Cluster``: two raylets on this machine): one
server per node, each on its own node, both answering. Opt-in: a second Ray cannot share the suite's process with the
session's (``ray_cluster``), and starting two raylets takes ~30 s on 2 cores."""

from __future__ import annotations

import asyncio
import os

import pytest

from neos_core.world.sources import default_cache_dir
from tool_server.ray_fleet import deploy
from verl_ext.tools.client import ToolServerClient

pytestmark = pytest.mark.skipif(
    not os.environ.get("NEOS_TEST_RAY_TWO_NODES"),
    reason="starts its own two-node Ray cluster (~30 s), which cannot run beside the suite's session Ray: run this "
    "file alone with NEOS_TEST_RAY_TWO_NODES=1",
)


def test_one_server_per_node_of_a_two_node_cluster(small_world, tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        cluster.wait_for_nodes()
        args = ["--world", str(small_world), "--no-ocr", "--host", "127.0.0.1", "--mei-log", str(tmp_path / "m.jsonl"),
                "--cache-dir", str(default_cache_dir() / "tool-server")]
        fleet = deploy(args)
        try:
            assert len(fleet.addresses) == 2 and len(set(fleet.node_ids)) == 2
            placed = ray.get([a.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id())
                              for a in fleet.actors])
            assert placed == fleet.node_ids  # each server's actor runs on the node it was pinned to

            async def health() -> list[dict]:
                out = []
                for url in fleet.addresses:
                    async with ToolServerClient(url) as client:
                        out.append(await client.health())
                return out

            assert [h["status"] for h in asyncio.run(health())] == ["ok", "ok"]
        finally:
            fleet.stop()
    finally:
        ray.shutdown()
        cluster.shutdown()
