"""``ToolServerEnv``: rLLM's ``BaseEnv`` over one tool-server session, for either protocol.

rLLM's environments are synchronous (gym's ``reset``/``step``, run in its executor threads); our session is async.
Each env therefore owns an event loop and a connection pool bound to it, and runs its coroutines there: envs never
share a loop, so they are safe in rLLM's thread pool (``is_multithread_safe``), one thread at a time per env, and
callable from async code too.

Observations: ``reset`` gives the system prompt, the question, its images (PIL) and the tool schemas; ``step(text)``
takes the assistant turn as text (Qwen's form; OpenAI-native calls: ``episode.assistant_text``) and gives the
messages to append, in rLLM's engine form (``messages.engine_observation``: images as images on ``user`` messages),
or with ``chat=True`` as OpenAI chat wants them (``engines``: native calls answered by ``tool`` messages with the
ids ``step`` is given, images on ``user`` messages).
The reward is 0 until the episode ends, then our verl reward managers' reward (``reward.outcome.score_turns``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from verl_ext.reward.judge import AnswerJudge
from verl_ext.rllm import require_rllm
from verl_ext.rllm.episode import SearchEpisode, SearchSettings, SearchTask
from verl_ext.rllm.messages import (
    answer_native_calls,
    engine_observation,
    engine_prompt,
    instruction,
    openai_observations,
)
from verl_ext.tools.client import ToolServerClient

BaseEnv = require_rllm("rllm.environments.base.base_env").BaseEnv

T = TypeVar("T")


class ToolServerEnv(BaseEnv):
    """One episode at a time; ``reset(task)`` closes the previous session and opens the next."""

    def __init__(
        self, task: dict[str, Any] | None = None, protocol: str | None = None, chat: bool = False, **settings: Any
    ) -> None:
        self.task = task
        self.protocol = protocol
        self.chat = chat
        self.settings_overrides = settings
        self._loop = asyncio.new_event_loop()
        self._client: ToolServerClient | None = None
        self.episode: SearchEpisode | None = None

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """``coro`` on the env's loop. Called from inside a running event loop (the sync API used from async code),
        the env's loop runs in a helper thread, since a thread can run one loop at a time; the caller blocks, as a
        synchronous environment does."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._loop.run_until_complete(coro)
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(self._loop.run_until_complete, coro).result()

    def reset(self, task: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        if task is not None:
            self.task = task
        if self.task is None:
            raise ValueError("ToolServerEnv.reset needs a task (a row of our task data)")
        self._run(self._close_episode())
        search_task = SearchTask.from_row(self.task)
        protocol = self.protocol or search_task.protocol or "neos"
        settings = SearchSettings.for_protocol(protocol, **self.settings_overrides)
        if self._client is None:
            self._client = ToolServerClient(settings.tool_server_url, timeout_s=settings.call_timeout_s)
        self.episode = SearchEpisode(search_task, settings, client=self._client)
        refs = self._run(self.episode.open())
        observation = {
            "messages": self.initial_messages(),
            "tools": self.episode.native_tools,
            "question": search_task.question,
            "images": list(self.episode.question_images),
        }
        return observation, {"protocol": protocol, "question_refs": refs, "max_turns": settings.max_turns}

    def initial_messages(self) -> list[dict[str, Any]]:
        """The episode's opening messages (engine form): system prompt, question with its images."""
        ep = self._require_episode()
        messages = engine_prompt(ep)
        if ep.final_turn:  # a one-turn budget: tools are disabled from the start
            messages.append(instruction(ep.final_instruction))
        return messages

    def step(self, action: Any, call_ids: Sequence[str] = ()) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        """``action``: the assistant turn's text (or an rLLM ``Action`` holding it); ``call_ids``: the ids of its
        native calls, which the observations answer in the chat form."""
        ep = self._require_episode()
        text = getattr(action, "action", action)
        if not isinstance(text, str):
            raise TypeError(f"ToolServerEnv.step takes the assistant turn as text, got {type(text).__name__}")
        observations = self._run(ep.act(text))
        if observations is None:
            reward, info = self.finish()
            return {"messages": []}, reward, True, {**ep.summary(), "reward_info": info}
        if self.chat:
            messages = openai_observations(answer_native_calls(observations, list(call_ids)), inline_images=False)
        else:
            messages = [engine_observation(o) for o in observations]
        if ep.final_turn:  # the next turn is the last: tools are disabled
            messages.append(instruction(ep.final_instruction))
        return {"messages": messages}, 0.0, False, {"turn": ep.turn, "register": list(ep.register)}

    def finish(self) -> tuple[float, dict[str, Any]]:
        """Ends the episode (also one its driver stopped early): its reward and extra info; the session is closed."""
        ep = self._require_episode()
        try:
            return self._run(ep.score(AnswerJudge(ep.settings.judge_config())))
        finally:
            self.close_session()

    def close_session(self) -> None:
        """Closes the episode's tool-server session (idempotent); the episode's record stays readable."""
        if self.episode is not None:
            self._run(self.episode.close())

    def _require_episode(self) -> SearchEpisode:
        if self.episode is None:
            raise RuntimeError("call reset() before step()")
        return self.episode

    async def _close_episode(self) -> None:
        if self.episode is not None:
            episode, self.episode = self.episode, None
            await episode.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._close_episode())
        if self._client is not None:
            self._run(self._client.close())
            self._client = None
        self._loop.close()

    @staticmethod
    def from_dict(info: dict[str, Any]) -> ToolServerEnv:
        """rLLM's factory: ``info`` is a task row; settings may ride along under ``env_settings``."""
        info = dict(info)
        settings = dict(info.pop("env_settings", None) or {})
        return ToolServerEnv(task=info, **settings)

    @staticmethod
    def is_multithread_safe() -> bool:
        return True
