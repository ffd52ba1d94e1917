"""The MEI served by real vLLM behind ``python -m verl_ext.mei.vllm_server``: an image question answered as v0, a
nudged checkpoint reloaded in place as v1 (the trainer's ``activate`` client), the answer's log-probabilities change
and the version with them, a refused load changes nothing. Needs vLLM (``../shared/gpu/gpu_wheels.sh``) and the tiny
VL model (``NEOS_TINY_VL_DIR``); prints the reload time."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from PIL import Image

from verl_ext.mei.server import activate, served_version
from verl_ext.mei.vllm_server import wait_healthy

pytestmark = pytest.mark.gpu


def _png_url(color: str) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (56, 56), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _chat(url: str, color: str) -> dict:
    messages = [{"role": "user", "content": [{"type": "text", "text": "What colour is this?"},
                                             {"type": "image_url", "image_url": {"url": _png_url(color)}}]}]
    body = json.dumps({"model": "mei", "messages": messages, "temperature": 0.0, "max_tokens": 8, "logprobs": True,
                       "top_logprobs": 1}).encode()
    request = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as resp:
        return json.loads(resp.read())


def _first_logprob(answer: dict) -> float:
    return answer["choices"][0]["logprobs"]["content"][0]["logprob"]


def test_vllm_mei_reloads_a_checkpoint_in_place(tmp_path, tiny_vl_model_dir, free_port):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    v1 = tmp_path / "v1"
    model = AutoModelForImageTextToText.from_pretrained(tiny_vl_model_dir, dtype=torch.bfloat16)
    with torch.no_grad():
        model.model.language_model.embed_tokens.weight.mul_(1.5)
    model.save_pretrained(v1)
    AutoProcessor.from_pretrained(tiny_vl_model_dir).save_pretrained(v1)

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "vllm_mei.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "verl_ext.mei.vllm_server", "--model", str(tiny_vl_model_dir),
                             "--version", "v0", "--port", str(port), "--", "--gpu-memory-utilization", "0.2",
                             "--max-model-len", "4096", "--enforce-eager"],
                            env=os.environ, stdout=log, stderr=subprocess.STDOUT)
    try:
        started = time.monotonic()
        asyncio.run(wait_healthy(url, proc, timeout_s=600))
        print(f"vLLM MEI server healthy after {time.monotonic() - started:.1f} s")
        a0 = _chat(url, "red")
        assert a0["model"] == "v0" and a0["usage"]["prompt_tokens"] > 10  # the image's tokens are in the prompt
        assert asyncio.run(served_version(url)) == "v0"
        t0 = time.monotonic()
        assert asyncio.run(activate(url, v1, "v1")) == "v1"
        print(f"reload in place: {time.monotonic() - t0:.2f} s")
        a1 = _chat(url, "red")
        assert a1["model"] == "v1"
        print(f"first-token logprob v0 {_first_logprob(a0):.4f} -> v1 {_first_logprob(a1):.4f}; "
              f"text v0 {a0['choices'][0]['message']['content']!r} v1 {a1['choices'][0]['message']['content']!r}")
        assert _first_logprob(a1) != _first_logprob(a0)
        with pytest.raises(RuntimeError, match="load_failed"):
            asyncio.run(activate(url, tmp_path / "missing", "v2"))
        assert asyncio.run(served_version(url)) == "v1"
        assert _first_logprob(_chat(url, "red")) == pytest.approx(_first_logprob(a1), abs=1e-3)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        print((tmp_path / "vllm_mei.log").read_text()[-3000:])
