"""The tool servers on Ray (``tool_server.ray_fleet``, ``verl_ext.rollout.tool_fleet``) and the agent loops' view of
several servers (``verl_ext.tools.shards``): real ``python -m tool_server`` processes launched by Ray actors on the
session's local Ray (one node: the second server group stands for a second node's), real HTTP.

What is checked: the deployed addresses reach the agent loops through ``custom.neos_rollout.tool_server_url``;
sessions are placed by their shard key's rendezvous order; a server killed mid-run loses its sessions' later calls as
counted tool-caused errors (``session_lost``) while the other server's sessions go on, and new sessions avoid it.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from omegaconf import OmegaConf

from neos_core.ports import free_local_port
from neos_core.world.sources import default_cache_dir
from tool_server.ray_fleet import cluster_nodes, deploy
from verl_ext.rllm.episode import SearchSettings
from verl_ext.rollout.protocols import ToolCall
from verl_ext.rollout.settings import resolve_settings
from verl_ext.rollout.tool_backend import ToolSession, tool_catalog
from verl_ext.rollout.tool_fleet import deploy_configured
from verl_ext.tools.client import ToolServerClient, ToolServerUnavailable
from verl_ext.tools.shards import ServerShards, server_urls


def _server_args(small_world, tmp_path, name: str) -> list[str]:
    return ["--world", str(small_world), "--no-ocr", "--host", "127.0.0.1",  # loopback: tests reach no network
            "--cache-dir", str(default_cache_dir() / "tool-server"), "--mei-log", str(tmp_path / f"{name}.jsonl")]


@pytest.fixture
def fleets(ray_cluster, small_world, tmp_path, monkeypatch):
    """The job's fleet from the config (one server per node: one here) and a second group on the same node."""
    from verl_ext.rollout import tool_fleet

    monkeypatch.setattr(tool_fleet, "_FLEET", None)
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "response_length": 256,
        "custom": {
            "neos_tool_servers": {"args": _server_args(small_world, tmp_path, "a")},
            "neos_rollout": {"tool_server_url": "${oc.env:NEOS_TOOL_SERVER_URL,http://127.0.0.1:8080}"},
        },
    }}})
    with ThreadPoolExecutor(2) as pool:  # side by side: each loads the world
        configured = pool.submit(deploy_configured, config)
        second = pool.submit(deploy, _server_args(small_world, tmp_path, "b"), node_ids=cluster_nodes()[:1])
        configured.result()
        second = second.result()
    yield config, tool_fleet._FLEET, second
    second.stop()
    tool_fleet._FLEET.stop()


async def test_addresses_reach_the_loops_sessions_shard_by_key_and_a_dead_server_loses_only_its_own(
    fleets, ray_cluster
):
    config, first, second = fleets
    assert len(first.addresses) == len(cluster_nodes()) == 1  # one server group per node
    settings = resolve_settings("neos", config.actor_rollout_ref.rollout, {})
    assert settings.tool_server_url == first.addresses  # the key the loops read now holds the deployed addresses
    assert deploy_configured(config) == first.addresses  # deployed once per process

    urls = first.addresses + second.addresses
    dead = second.addresses[0]
    catalog = await tool_catalog(urls, "neos", 30.0)
    shards = ToolSession(urls, catalog, timeout_s=30.0, max_in_flight=8).shards

    def keys(prefix: str, first_choice: str, n: int) -> list[str]:
        return [k for k in (f"{prefix}-{i}" for i in range(1000)) if shards.ranked(k)[0] == first_choice][:n]

    def opened(keys: list[str]) -> list[ToolSession]:
        return [ToolSession(urls, catalog, timeout_s=30.0, max_in_flight=8, shard_key=k) for k in keys]

    async def no_images():
        return []

    sessions = opened(keys("group", urls[0], 6) + keys("group", dead, 6))
    assert all(s.shards is shards for s in sessions)  # one health view per process
    for s in sessions:
        await s.open(no_images, None)
    assert [s.client.base_url for s in sessions] == [urls[0]] * 6 + [dead] * 6  # the shard key's rendezvous order
    search = ToolCall("TextSearch", {"query": ["flag of France"]})
    assert all(o.ok for o in [await s.call(search, 0) for s in sessions])

    # the second server dies: its sessions' calls are counted tool-caused errors, the first server's go on
    os.kill(ray_cluster.get(second.actors[0].server_pid.remote()), signal.SIGKILL)
    outcomes = [await s.call(search, 1) for s in sessions]
    for s, o in zip(sessions, outcomes):
        if s.client.base_url == dead:
            assert (o.ok, o.error_class, o.error_type, o.session_lost) == (False, "tool", "session_lost", True)
        else:
            assert o.ok
    assert shards.events["marked_down"] >= 1
    for _ in range(300):  # the fleet's own view: the killed process is reaped by its actor (at once, or nearly)
        if second.alive() == [False]:
            break
        time.sleep(0.1)
    assert second.alive() == [False] and first.alive() == [True]

    # new sessions avoid it, those whose first choice it was included (counted as rerouted)
    fresh = opened(keys("new", dead, 4) + keys("new", urls[0], 4))
    for s in fresh:
        await s.open(no_images, None)
    assert {s.client.base_url for s in fresh} == {urls[0]}
    assert shards.events["rerouted"] == 4
    for s in sessions + fresh:
        await s.close()
    async with ToolServerClient(first.addresses[0]) as c:
        assert (await c.health())["sessions"] == 0


def test_address_settings_take_one_url_a_list_or_a_comma_separated_string():
    assert server_urls("http://a:1") == ["http://a:1"]
    assert server_urls(" http://a:1/, http://b:2 ") == ["http://a:1", "http://b:2"]
    assert server_urls(["http://a:1", "http://b:2"]) == ["http://a:1", "http://b:2"]
    for bad in ("", " , ", ["http://a:1", "http://a:1/"]):
        with pytest.raises(ValueError):
            server_urls(bad)
    listed = OmegaConf.create({"response_length": 64, "custom": {"neos_rollout": {"tool_server_url": ["http://a:1"]}}})
    assert resolve_settings("neos", listed, {}).tool_server_url == ["http://a:1"]  # a YAML list, as a plain list
    with pytest.raises(ValueError, match="tool_server_url"):
        resolve_settings("neos", listed, {"tool_server_url": "http://a:1,http://a:1"})
    with pytest.raises(ValueError, match="use one tool server"):  # rLLM's episodes hold one connection pool
        SearchSettings.for_protocol("neos", tool_server_url="http://a:1,http://b:2")


async def test_with_every_server_down_an_open_fails_after_trying_each_once_counted():
    urls = [f"http://127.0.0.1:{free_local_port()}" for _ in range(2)]  # nothing listens there
    shards = ServerShards(urls, timeout_s=5.0)
    with pytest.raises(ToolServerUnavailable):
        await shards.place("g", lambda client: client.open_session([]))
    assert shards.events["marked_down"] == 2 and shards.healthy() == []
    with pytest.raises(ToolServerUnavailable):  # all down: each is tried again (one may be back), not none
        await shards.place("g", lambda client: client.open_session([]))
    assert shards.events["marked_down"] == 4


def test_the_fleet_cli_needs_the_servers_world(capsys):
    from tool_server.ray_fleet import main

    with pytest.raises(SystemExit) as exit_:
        main(["--", "--workers", "2"])
    assert exit_.value.code == 2 and "--world DIR" in capsys.readouterr().err
