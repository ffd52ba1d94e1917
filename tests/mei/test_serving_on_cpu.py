"""The trainer's MEI server on the MEI pool (``trainer.v1.neos.mei.serve``): a real Ray actor on a real verl
``RayResourcePool`` (CPU bundles here: no GPU on this machine; on a GPU pool it takes a share of the bundle's GPU)
starts the transformers MEI server with the tiny model, reports an address that serves the run's version, and stops
it. The vLLM engine's command is checked as built; it runs in tests/mei/test_vllm_server_on_gpu.py."""

import json
import sys
import urllib.request

import pytest
from verl.single_controller.ray import RayResourcePool

from verl_ext.mei.serving import ServeSettings, server_command, start_on_pool


def test_the_pool_starts_an_mei_server_that_serves_the_runs_version(ray_cluster, tiny_vl_model_dir, free_port):
    pool = RayResourcePool(process_on_nodes=[1], use_gpu=False, max_colocate_count=3)
    port = free_port()
    actor, url = start_on_pool(pool, ServeSettings(enable=True, engine="hf", port=None, max_new_tokens=8),
                               str(tiny_vl_model_dir), "v0", f"http://127.0.0.1:{port}")
    try:
        assert url.endswith(f":{port}")  # server_url's port, so a tool server's --mei-endpoint finds it
        with urllib.request.urlopen(url + "/admin/version", timeout=10) as resp:
            assert json.loads(resp.read())["version"] == "v0"
        assert ray_cluster.get(actor.alive.remote())
    finally:
        ray_cluster.get(actor.stop.remote())
        ray_cluster.kill(actor)


def test_commands_per_engine_and_refusals():
    vllm = server_command(ServeSettings(enable=True, args=["--max-model-len", "32768"]), "/m", "v3", 8010)
    assert vllm[:3] == [sys.executable, "-m", "verl_ext.mei.vllm_server"]
    assert vllm[vllm.index("--") + 1:] == ["--max-model-len", "32768"] and "--max-new-tokens" in vllm
    assert vllm[vllm.index("--version") + 1] == "v3" and vllm[vllm.index("--host") + 1] == "0.0.0.0"
    with pytest.raises(ValueError, match="engine hf takes none"):
        server_command(ServeSettings(engine="hf", args=["--x"]), "/m", "v0", 8010)
    with pytest.raises(ValueError, match="engine"):
        ServeSettings.model_validate({"engine": "sglang"})
