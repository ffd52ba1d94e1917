"""``SearchWorkflow``: rLLM's ``Workflow`` running our protocols' turns through rLLM's rollout engine.

Each turn: ``rollout_engine.get_model_response(messages, tools=...)`` (Neos passes its tools natively, ModalSearcher
lists them in the system prompt), the turn's text to our ``ToolServerEnv`` (in the workflow's executor, since
envs are synchronous), and the observation messages appended in the form the engine's route needs (``engines``):
on the parser route rLLM's engine form, so tool images sit on ``user`` messages where rLLM's Qwen parser renders
them and ``process_image_data`` finds them; on the chat route (``OpenAIEngine`` without a tokenizer) valid OpenAI
chat, native calls answered by ``tool`` messages. An engine that cannot carry images is refused when the workflow is
made, before any episode. At the end the last step
carries our reward (answer judge; ModalSearcher's accuracy + format), so the trajectory reward, a sum of step
rewards, is exactly it. One trajectory per episode, named after the protocol.

Use with ``AgentWorkflowEngine(workflow_cls=SearchWorkflow, workflow_args={"protocol": "neos",
"tool_server_url": ...}, rollout_engine=...)``; any ``SearchSettings`` key may be given in ``workflow_args``.
"""

from __future__ import annotations

from typing import Any

from verl_ext.rllm import require_rllm
from verl_ext.rllm.engines import message_route
from verl_ext.rllm.env import ToolServerEnv
from verl_ext.rllm.episode import RLLM_TERMINATION, assistant_text, native_calls

_workflow = require_rllm("rllm.workflows.workflow")
_types = require_rllm("rllm.types")
Workflow, TerminationEvent, TerminationReason = (
    _workflow.Workflow, _workflow.TerminationEvent, _workflow.TerminationReason
)
Episode, Step, Trajectory = _types.Episode, _types.Step, _types.Trajectory

_WORKFLOW_KEYS = ("timeout", "gamma", "reward_bonus_coeff", "store")


class SearchWorkflow(Workflow):
    def __init__(self, rollout_engine: Any, executor: Any, protocol: str | None = None, **kwargs: Any) -> None:
        self.chat = message_route(rollout_engine) == "chat"  # first: an engine without images is refused here
        super().__init__(rollout_engine, executor, **{k: kwargs.pop(k) for k in _WORKFLOW_KEYS if k in kwargs})
        self.env = ToolServerEnv(protocol=protocol, chat=self.chat, **kwargs)

    async def run(self, task: dict, uid: str, **kwargs: Any) -> Episode:
        # Rollouts of one task (uid "task_id:rollout_idx") form a group: ModalSearcher shares their tool results.
        group_task = {**task, "group_id": str(uid).split(":")[0]}
        _, info = await self.run_in_executor(self._reset_env, group_task, uid)
        env = self.env
        ep = env.episode
        trajectory = Trajectory(name=info["protocol"], task=task)
        messages = env.initial_messages()
        reason: Any = None
        reward, done, step_info = 0.0, False, {}
        try:
            while not done:
                tools = {"tools": ep.native_tools} if ep.native_tools else {}  # chat APIs refuse an empty list
                output = await self.rollout_engine.get_model_response(messages, application_id=uid, **tools, **kwargs)
                calls = native_calls(output.tool_calls or [])
                text, assistant = self._assistant_turn(output, calls)
                messages = [*messages, assistant]
                trajectory.steps.append(
                    Step(chat_completions=messages, model_output=output, model_response=text,
                         thought=output.reasoning or "")
                )
                call_ids = [c["id"] for c in calls if c["id"] is not None]
                observation, reward, done, step_info = await self.run_in_executor(env.step, text, call_ids)
                messages = [*messages, *observation["messages"]]
                trajectory.steps[-1].observation = observation["messages"]
                if not done and output.finish_reason == "length":
                    ep.end_early("response_length")
                    break
        except TerminationEvent as e:  # the engine stopped it (e.g. the prompt outgrew its budget)
            ep.end_early("context" if e.reason == TerminationReason.MAX_PROMPT_LENGTH_EXCEEDED else e.reason.value)
            reason = e.reason
        except BaseException:  # rLLM records the failed episode; the session is not left to the server's TTL
            await self.run_in_executor(env.close_session)
            raise
        if not done:  # ended by the driver: score it as our reward managers would
            reward, reward_info = await self.run_in_executor(env.finish)
        else:
            reward_info = step_info["reward_info"]
        if trajectory.steps:
            trajectory.steps[-1].reward, trajectory.steps[-1].done = reward, True
            trajectory.steps[-1].info.update(reward_info)
        trajectory.info.update(ep.summary())
        self.commit(trajectory=trajectory)
        reason = reason or TerminationReason[RLLM_TERMINATION.get(ep.termination_reason, "UNKNOWN")]
        episode = self.postprocess_episode(self.collect_trajectories(), reason)
        # rLLM's default calls any positive reward correct; ModalSearcher's format share alone is not.
        episode.is_correct = bool(reward_info.get("acc", 0.0))
        episode.info.update({"termination_reason": ep.termination_reason, "reward": reward, **reward_info})
        episode.metrics[f"{info['protocol']}_acc"] = float(episode.is_correct)
        return episode

    def _assistant_turn(self, output: Any, calls: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
        """The turn as our parsers read it, and as the next request repeats it. On the parser route the engine's
        text is the raw completion, calls included; on the chat route the server took the calls out of it, and the
        message is plain OpenAI chat (rLLM's parsers re-render ``reasoning`` when told to; chat APIs take none)."""
        assistant: dict[str, Any] = {"role": "assistant", "content": output.content or ""}
        if self.chat:
            text = assistant_text(output.text, calls)
        else:
            text = output.text if output.text is not None else assistant_text(output.content, calls)
            assistant["reasoning"] = output.reasoning or ""
        if calls:
            assistant["tool_calls"] = calls
        return text, assistant

    def _reset_env(self, task: dict, uid: str) -> tuple[dict, dict]:
        """Workflow.reset resets every BaseEnv attribute with the task (opening our session); runs in a thread."""
        Workflow.reset(self, task, uid)
        ep = self.env.episode
        return {}, {"protocol": ep.protocol, "question_refs": list(ep.register)}
