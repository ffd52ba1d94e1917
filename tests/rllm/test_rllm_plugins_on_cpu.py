"""Our agent, tools and reward as rLLM plugins, against rLLM's real classes (``BaseEnv``, ``Workflow``,
``AgentWorkflowEngine``, ``QwenChatTemplateParser``, the ``rllm eval`` CLI with its model gateway, entry-point
discovery), a real tool server process on the small world, and scripted stand-ins for the model: no model here
writes valid calls, and rLLM's policy servers (vLLM behind verl) cannot run on CPU.

They run where rLLM is importable (it is not on the package index; see docs/rllm.md for the install from its
repository into an environment of its own) and are skipped elsewhere, as in CI.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

pytest.importorskip(
    "rllm", reason="rLLM is not installed: it installs from its repository into its own environment (docs/rllm.md)"
)

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402
from rllm.engine.agent_workflow_engine import AgentWorkflowEngine  # noqa: E402
from rllm.engine.rollout.rollout_engine import ModelOutput, RolloutEngine  # noqa: E402
from rllm.environments.base.base_env import BaseEnv  # noqa: E402
from rllm.eval.agent_loader import load_agent  # noqa: E402
from rllm.eval.evaluator_loader import load_evaluator  # noqa: E402
from rllm.parser.chat_template_parser import QwenChatTemplateParser  # noqa: E402
from rllm.types import AgentConfig  # noqa: E402
from rllm.workflows.workflow import TerminationEvent, TerminationReason  # noqa: E402

from neos_core.world.sources import default_cache_dir  # noqa: E402
from tool_server.launch import served  # noqa: E402
from verl_ext.rllm.benchmark import export  # noqa: E402
from verl_ext.rllm.env import ToolServerEnv  # noqa: E402
from verl_ext.rllm.flow import ModalSearchFlow, NeosAnswerEvaluator, NeosSearchFlow  # noqa: E402
from verl_ext.rllm.workflow import SearchWorkflow  # noqa: E402

from .conftest import ORIGIN, call, react, row  # noqa: E402

VISION = "<|vision_start|><|image_pad|><|vision_end|>"


@pytest.fixture(scope="module")
def tool_server_url(small_world, tmp_path_factory) -> Iterator[str]:
    # the session's feature cache, and the MEI log in a temporary folder: by default it lands in the working
    # directory (the checkout)
    with served(small_world, "--cache-dir", str(default_cache_dir() / "tool-server"),
                "--mei-log", str(tmp_path_factory.mktemp("tool-server") / "mei.jsonl")) as url:
        yield url


@pytest.fixture(scope="module")
def qwen_tokenizer(request):
    transformers = pytest.importorskip("transformers", reason="the Qwen tokenizer needs transformers")
    if not os.environ.get("NEOS_TINY_VL_DIR") and importlib.util.find_spec("torch") is None:
        pytest.skip("no torch here to build the tiny Qwen2.5-VL: set NEOS_TINY_VL_DIR to a built one "
                    "(python -m verl_ext.models build)")
    return transformers.AutoTokenizer.from_pretrained(request.getfixturevalue("tiny_vl_model_dir"))


@pytest.fixture(scope="module")
def qwen_processor(request, qwen_tokenizer):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoProcessor.from_pretrained(request.getfixturevalue("tiny_vl_model_dir"))


class ScriptedStandInEngine(RolloutEngine):
    """A stand-in for a policy server behind rLLM's engine: it writes scripted turns, but renders every prompt with
    rLLM's real ``QwenChatTemplateParser`` over the real Qwen tokenizer and parses its completion with it, as rLLM's
    ``VerlEngine`` does. It records each prompt and the images the request carries, collected as
    ``QwenChatTemplateParser.process_image_data`` collects them (every message's ``images``, in order). Like
    ``VerlEngine`` it holds the model's processor (None: a text-only engine)."""

    def __init__(self, tokenizer, turns: list[str | BaseException], processor=None) -> None:
        super().__init__()
        self.tokenizer = tokenizer
        self.processor = processor
        self.chat_parser = QwenChatTemplateParser(tokenizer)
        self.turns = turns
        self.prompts: list[str] = []
        self.images: list[list[Image.Image]] = []

    async def _get_model_response(self, messages: list[dict], **kwargs) -> ModelOutput:
        prompt = self.chat_parser.parse(messages, add_generation_prompt=True, is_first_msg=True,
                                        tools=kwargs.get("tools") or [])
        self.prompts.append(prompt)
        self.images.append([im for m in messages if m.get("images") is not None for im in m["images"]])
        text = self.turns[len(self.prompts) - 1]
        if isinstance(text, BaseException):  # what a real engine raises (e.g. the prompt outgrew its budget)
            raise text
        completion_ids = self.tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        parsed = self.chat_parser.parse_completion(completion_ids)
        return ModelOutput(
            text=self.tokenizer.decode(completion_ids, skip_special_tokens=True),
            content=parsed["content"],
            reasoning=parsed["reasoning"],
            tool_calls=parsed["tool_calls"],
            prompt_ids=self.tokenizer.encode(prompt, add_special_tokens=False),
            completion_ids=completion_ids,
            finish_reason="stop",
        )


async def run_tasks(engine: AgentWorkflowEngine, rows: list[dict], **kwargs) -> list:
    """``engine.execute_tasks``, then each pooled workflow's env closed (rLLM's engine has no shutdown of its own),
    from this event loop: the synchronous env API works from async code too."""
    try:
        return await engine.execute_tasks(rows, **kwargs)
    finally:
        while engine.workflow_queue is not None and not engine.workflow_queue.empty():
            engine.workflow_queue.get_nowait().env.close()


def test_the_env_is_an_rllm_base_env_returning_tool_images_as_images(tool_server_url):
    env = ToolServerEnv.from_dict({**row("Which country's flag is it?", "Mexico"),
                                   "env_settings": {"tool_server_url": tool_server_url}})
    assert isinstance(env, BaseEnv) and env.is_multithread_safe()
    try:
        observation, info = env.reset()
        assert info["protocol"] == "neos" and info["question_refs"] == ["img_1"]
        assert observation["messages"][1]["images"][0].size == (64, 48)
        assert {t["function"]["name"] for t in observation["tools"]} >= {"FetchImage", "TextSearch"}
        observation, reward, done, info = env.step(call("FetchImage", urls=[f"{ORIGIN}/media/flag_mex.png"]))
        (message,) = observation["messages"]
        assert (reward, done, info["register"]) == (0.0, False, ["img_1", "img_2"])
        assert message["role"] == "user" and isinstance(message["images"][0], Image.Image)
        observation, reward, done, info = env.step("Mexico")
        assert (reward, done, info["termination_reason"]) == (1.0, True, "answer")
        assert info["reward_info"]["judge"] == "rule"
        assert env.episode._session.session_id is None  # the ended episode's session is closed on the server
        env.reset(row("Which country?", "France"))  # the next episode gets a fresh session
        assert env.episode.register == ["img_1"]
    finally:
        env.close()


async def test_the_workflow_runs_neos_turns_through_rllms_engine_with_tool_images_where_qwen_renders_them(
    tool_server_url, qwen_tokenizer, qwen_processor
):
    model = ScriptedStandInEngine(qwen_tokenizer, processor=qwen_processor, turns=[
        call("FetchImage", urls=[f"{ORIGIN}/media/flag_mex.png"]),
        call("CropImage", crop_config={"img_2": [0, 0, 500, 500]}),
        "Mexico",
    ])
    engine = AgentWorkflowEngine(
        workflow_cls=SearchWorkflow,
        workflow_args={"protocol": "neos", "tool_server_url": tool_server_url},
        rollout_engine=model,
        n_parallel_tasks=1,
    )
    (episode,) = await run_tasks(engine, [row("Which country's flag has the emblem?", "Mexico")], task_ids=["t0"])
    assert episode.termination_reason == TerminationReason.ENV_DONE and episode.is_correct
    (trajectory,) = episode.trajectories
    assert trajectory.name == "neos" and trajectory.reward == 1.0 and len(trajectory.steps) == 3
    assert [s.reward for s in trajectory.steps] == [0.0, 0.0, 1.0]
    assert trajectory.info["register"] == ["img_1", "img_2", "img_3"]
    # The model saw the question image, then + the fetched image, then + its crop: one placeholder per image.
    assert [len(images) for images in model.images] == [1, 2, 3]
    assert [p.count(VISION) for p in model.prompts] == [1, 2, 3]
    # ... the tool image inside the tool turn, before its text, where parse_user puts a user turn's images
    assert "<|im_start|>user\n" + VISION + "<tool_response>\nImages shown above, in order: img_2." in model.prompts[1]
    assert '"name": "FetchImage"' in model.prompts[0]  # Neos' tools are native: the template lists them
    # Each step's prompt extends the previous step's prompt and completion: rLLM's verl transform merges the
    # trajectory into one row (rllm/trainer/verl/transform.py, _process_trajectory).
    assert trajectory.is_cumulative()
    for prev, step in zip(trajectory.steps, trajectory.steps[1:]):
        full = list(prev.model_output.prompt_ids) + list(prev.model_output.completion_ids)
        assert list(step.model_output.prompt_ids[: len(full)]) == full


async def test_the_workflow_scores_modalsearch_with_accuracy_and_format(
    tool_server_url, qwen_tokenizer, qwen_processor
):
    model = ScriptedStandInEngine(qwen_tokenizer, processor=qwen_processor, turns=[
        react("t2t_search", query="flag of France"), "<think>found it</think><answer>France</answer>",
    ])
    engine = AgentWorkflowEngine(
        workflow_cls=SearchWorkflow,
        workflow_args={"tool_server_url": tool_server_url},  # the row's agent_name picks the protocol
        rollout_engine=model,
        n_parallel_tasks=1,
    )
    (episode,) = await run_tasks(engine, [row("Which country?", "France", "modalsearch_react_agent")])
    (trajectory,) = episode.trajectories
    assert trajectory.name == "modalsearch" and trajectory.reward == pytest.approx(0.9 + 0.1)
    assert episode.info["fmt"] == 1.0 and episode.is_correct
    assert "t2t_search" in model.prompts[0] and "<tools>" not in model.prompts[0]  # tools listed in our prompt


async def test_format_credit_alone_is_not_counted_correct(tool_server_url, qwen_tokenizer, qwen_processor):
    model = ScriptedStandInEngine(qwen_tokenizer, processor=qwen_processor,
                                  turns=["<think>guess</think><answer>Spain</answer>"])
    engine = AgentWorkflowEngine(workflow_cls=SearchWorkflow, workflow_args={"tool_server_url": tool_server_url},
                                 rollout_engine=model, n_parallel_tasks=1)
    (episode,) = await run_tasks(engine, [row("Which country?", "France", "modalsearch_react_agent")])
    assert episode.trajectories[0].reward == pytest.approx(0.1) and not episode.is_correct


async def test_an_episode_the_engine_terminates_is_still_scored_and_its_session_closed(
    tool_server_url, qwen_tokenizer, qwen_processor
):
    model = ScriptedStandInEngine(qwen_tokenizer, processor=qwen_processor, turns=[
        call("TextSearch", query=["flag of Mexico"]), TerminationEvent(TerminationReason.MAX_PROMPT_LENGTH_EXCEEDED),
    ])
    engine = AgentWorkflowEngine(workflow_cls=SearchWorkflow, workflow_args={"tool_server_url": tool_server_url},
                                 rollout_engine=model, n_parallel_tasks=1)
    (episode,) = await run_tasks(engine, [row("Which country?", "Mexico")])
    assert episode.termination_reason == TerminationReason.MAX_PROMPT_LENGTH_EXCEEDED
    assert episode.info["termination_reason"] == "context" and episode.info["reward"] == 0.0
    (trajectory,) = episode.trajectories
    assert len(trajectory.steps) == 1 and trajectory.reward == 0.0
    assert await open_sessions(tool_server_url) == 0


async def test_an_engine_failure_is_an_error_episode_with_its_session_closed(
    tool_server_url, qwen_tokenizer, qwen_processor
):
    model = ScriptedStandInEngine(qwen_tokenizer, processor=qwen_processor,
                                  turns=[call("TextSearch", query=["Mexico"]), RuntimeError("engine down")])
    engine = AgentWorkflowEngine(workflow_cls=SearchWorkflow, workflow_args={"tool_server_url": tool_server_url},
                                 rollout_engine=model, n_parallel_tasks=1, retry_limit=1, raise_on_error=False)
    (episode,) = await run_tasks(engine, [row("Which country?", "Mexico")])
    assert episode.termination_reason == TerminationReason.ERROR
    assert episode.info["error"]["error_message"] == "engine down"
    assert await open_sessions(tool_server_url) == 0


async def open_sessions(url: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(url + "/healthz") as resp:
        return (await resp.json())["sessions"]


async def test_a_dead_model_server_fails_the_flow_and_its_session_is_closed(tool_server_url, tmp_path: Path):
    flow = NeosSearchFlow(tool_server_url=tool_server_url, model_timeout_s=10)
    dead = AgentConfig(base_url="http://127.0.0.1:9/v1", model="none", session_uid="s0")  # port 9: nothing listens
    with pytest.raises(aiohttp.ClientError):  # rLLM's engine records the episode as an error
        await flow.arun(row("Which country?", "France"), dead)
    assert await open_sessions(tool_server_url) == 0


def test_the_flows_and_evaluators_are_found_through_rllms_entry_points():
    assert isinstance(load_agent("neos_search"), NeosSearchFlow)
    assert isinstance(load_agent("modalsearch_react"), ModalSearchFlow)
    assert isinstance(load_evaluator("neos_answer_judge"), NeosAnswerEvaluator)
    assert load_evaluator("modalsearch_reward").protocol == "modalsearch"


def openai_chat_problem(body: dict) -> str | None:
    """What OpenAI's chat API refuses in a request (vLLM's too, for the ids): a ``tools`` list that is empty, a
    ``tool`` message that answers no call of the assistant turn before it, an unanswered call, an image outside a
    ``user`` message, an unknown field on a message."""
    if "tools" in body and not body["tools"]:
        return "tools: [] is too short"
    pending: set[str] = set()
    for i, m in enumerate(body["messages"]):
        extra = set(m) - {"role", "content", "name", "tool_calls", "tool_call_id"}
        if extra:
            return f"messages[{i}]: unknown fields {sorted(extra)}"
        if m["role"] == "tool":
            if m.get("tool_call_id") not in pending:
                return f"messages[{i}]: a tool message must answer a tool_call_id of the preceding assistant turn"
            pending.discard(m["tool_call_id"])
            continue
        if pending:
            return f"messages[{i}]: tool calls {sorted(pending)} have no tool message"
        if m["role"] == "assistant":
            pending = {c["id"] for c in m.get("tool_calls") or []}
            if any(not isinstance(c["function"]["arguments"], str) for c in m.get("tool_calls") or []):
                return f"messages[{i}]: tool call arguments must be a JSON string"
        if m["role"] != "user" and isinstance(m["content"], list) and any(
                p.get("type") == "image_url" for p in m["content"]):
            return f"messages[{i}]: image_url parts are only allowed in user messages"
    return None


class ScriptedStandInChatServer:
    """A stand-in for an OpenAI-compatible model server (the upstream of rLLM's gateway): it answers each chat
    completion with the next scripted assistant message and keeps the requests."""

    def __init__(self, replies: list[dict]) -> None:
        self.replies, self.requests = replies, []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _complete(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if (problem := openai_chat_problem(body)) is not None:
            return web.json_response({"error": {"type": "invalid_request_error", "message": problem}}, status=400)
        message = self.replies[min(len(self.requests), len(self.replies)) - 1]
        return web.json_response({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })

    def __enter__(self) -> str:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_post("/v1/chat/completions", self._complete)
        self.runner = web.AppRunner(app)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.runner.setup(), self.loop).result()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        asyncio.run_coroutine_threadsafe(site.start(), self.loop).result()
        return f"http://127.0.0.1:{self.runner.addresses[0][1]}/v1"

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def test_rllm_eval_runs_our_agent_on_our_benchmark_split(tool_server_url, tmp_path: Path):
    bench = tmp_path / "neos-bench"
    export([row("Which country's flag is it?", "Mexico")], bench, name="neos-bench")
    native_call = {"id": "call_1", "type": "function", "function": {
        "name": "FetchImage", "arguments": json.dumps({"urls": [f"{ORIGIN}/media/flag_mex.png"]})}}
    replies = [{"content": "", "tool_calls": [native_call]}, {"content": "Mexico"}]
    env = {**os.environ, "HOME": str(tmp_path), "NEOS_TOOL_SERVER_URL": tool_server_url}
    model = ScriptedStandInChatServer(replies)
    with model as base_url:
        run = subprocess.run(
            [str(Path(sys.executable).parent / "rllm"), "eval", str(bench), "--agent", "neos_search",
             "--evaluator", "neos_answer_judge", "--base-url", base_url, "--model", "scripted-stand-in",
             "--no-ui", "--concurrency", "1", "--output", str(tmp_path / "results.json"),
             "--episodes-dir", str(tmp_path / "episodes")],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert (results["score"], results["correct"], results["errors"]) == (1.0, 1, 0), results
    assert results["items"][0]["signals"] == {"accuracy": 1.0}
    # Through rLLM's gateway the model got the question image, our native tools, and the fetched image.
    first, second = model.requests
    assert [p["type"] for p in first["messages"][1]["content"]] == ["image_url", "text"]
    assert {t["function"]["name"] for t in first["tools"]} >= {"FetchImage"}
    tool_turn, image_turn = second["messages"][3:5]
    assert tool_turn["role"] == "tool" and tool_turn["tool_call_id"] == "call_1"
    assert image_turn["role"] == "user" and image_turn["content"][0]["image_url"]["url"].startswith("data:image/png")


def native_fetch(call_id: str = "call_1") -> dict:
    return {"id": call_id, "type": "function", "function": {
        "name": "FetchImage", "arguments": json.dumps({"urls": [f"{ORIGIN}/media/flag_mex.png"]})}}


async def test_the_workflow_runs_through_rllms_openai_engine_in_chat_mode_with_native_calls(tool_server_url):
    """rLLM's real ``OpenAIEngine`` without a tokenizer (chat completions) against ``ScriptedStandInChatServer``, a
    stand-in for an OpenAI-compatible model server: it returns a native tool call, which reaches the workflow as
    OpenAI's ``ChatCompletionMessageFunctionToolCall`` (issue 34: ``c.name`` raised AttributeError, an ERROR episode),
    and it refuses a conversation a real server refuses (``openai_chat_problem``)."""
    from rllm.engine.rollout.openai_engine import OpenAIEngine

    model = ScriptedStandInChatServer([{"content": "", "tool_calls": [native_fetch()]}, {"content": "Mexico"}])
    with model as base_url:
        openai_engine = OpenAIEngine(model="scripted-stand-in", base_url=base_url, api_key="none", api_retries=1)
        engine = AgentWorkflowEngine(
            workflow_cls=SearchWorkflow,
            workflow_args={"protocol": "neos", "tool_server_url": tool_server_url},
            rollout_engine=openai_engine,
            n_parallel_tasks=1,
        )
        (episode,) = await run_tasks(engine, [row("Which country's flag is it?", "Mexico")])
    assert episode.termination_reason == TerminationReason.ENV_DONE and episode.is_correct, episode.info
    (trajectory,) = episode.trajectories
    assert trajectory.reward == 1.0 and trajectory.info["register"] == ["img_1", "img_2"]
    assert trajectory.info["calls"][0]["name"] == "FetchImage" and trajectory.info["calls"][0]["ok"]
    first, second = model.requests
    assert [p["type"] for p in first["messages"][1]["content"]] == ["text", "image_url"]  # the question image
    assert {t["function"]["name"] for t in first["tools"]} >= {"FetchImage"}
    assistant, tool_turn, image_turn = second["messages"][2:5]
    assert assistant["tool_calls"] == [native_fetch()]
    assert tool_turn["role"] == "tool" and tool_turn["tool_call_id"] == "call_1"
    assert image_turn["role"] == "user" and image_turn["content"][1]["image_url"]["url"].startswith("data:image/png")


def test_an_engine_that_cannot_carry_images_is_refused_with_one_line(qwen_tokenizer):
    """rLLM's ``OpenAIEngine`` with a tokenizer renders prompts as text for the completions endpoint, and an engine
    on the parser route without a processor drops images too: the workflow refuses both when it is made (the
    engine's pool), instead of rolling out on image placeholders with no pixels (issue 34)."""
    from rllm.engine.rollout.openai_engine import OpenAIEngine

    completions = OpenAIEngine(model="m", tokenizer=qwen_tokenizer, chat_parser=QwenChatTemplateParser(qwen_tokenizer),
                               base_url="http://127.0.0.1:9/v1", api_key="none")
    text_only = ScriptedStandInEngine(qwen_tokenizer, turns=[])
    for rollout_engine in (completions, text_only):
        engine = AgentWorkflowEngine(workflow_cls=SearchWorkflow, workflow_args={"tool_server_url": "http://x"},
                                     rollout_engine=rollout_engine, n_parallel_tasks=1)
        with pytest.raises(ValueError, match="images would never reach the model") as refused:
            asyncio.run(engine.execute_tasks([row("Which?", "Mexico")]))
        assert "\n" not in str(refused.value) and type(rollout_engine).__name__ in str(refused.value)


async def test_the_flow_reports_an_episode_out_of_turns_as_max_turns_exceeded(tool_server_url):
    """``rllm eval`` recorded ``env_done`` for an episode that hit ``max_turns`` (issue 34): the flow now sets the
    episode's ``termination_reason``. The stand-in model server keeps calling a tool; 2 turns, the last tools-off."""
    flow = NeosSearchFlow(tool_server_url=tool_server_url, max_turns=2)
    with ScriptedStandInChatServer([{"content": "", "tool_calls": [native_fetch()]}]) as base_url:
        episode = await flow.arun(row("Which country?", "Mexico"),
                                  AgentConfig(base_url=base_url, model="scripted-stand-in", session_uid="s0"))
    assert episode.termination_reason == TerminationReason.MAX_TURNS_EXCEEDED
    assert episode.metadata["termination_reason"] == "max_turns" and len(episode.trajectories[0].steps) == 2
