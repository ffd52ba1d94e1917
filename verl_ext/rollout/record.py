"""What one rollout episode leaves behind for the trainer, the credit judge and MEI selection (no verl import).

The agent loops put ``TrajectoryRecord.model_dump(mode="json")`` into ``AgentLoopOutput.extra_fields[RECORD_KEY]``
and the termination reason into ``extra_fields["termination_reason"]`` (the reward managers' contract). verl carries
``extra_fields`` unchanged into ``non_tensor_batch`` (legacy trainer) and into TransferQueue's ``extra_fields`` column
(v1 trainer), so these plain-JSON values reach every consumer without a verl change.

Spans: turn ``i`` owns response tokens ``[start, end)``; those are exactly the i-th maximal run of 1s in the
trajectory's ``response_mask`` (the loop only marks generated tokens), so a consumer holding just ``response_mask``
(an advantage estimator inside verl's v1 trainer) recovers the same turn of every token: see
``verl_ext.advantage``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RECORD_KEY = "neos_trajectory"
# With reward_kwargs.dump_trajectories, the reward managers copy the record (as JSON text) and the row's
# extra_info[EVAL_KEY] into reward_extra_info under these names: what verl's validation dump writes per sample.
EVAL_KEY, TRAJECTORY_JSON = "neos_eval_key", "neos_trajectory_json"
RECORD_SCHEMA_VERSION = 1

Protocol = Literal["neos", "modalsearch"]
# answer: the policy answered. max_turns: the turn budget ran out (the last turn had tools disabled).
# agent_errors / tool_errors: ModalSearcher's rule (3 consecutive errors) ended it, by whose fault; tool_errors also
# when the tool server holding the episode's session was lost (a call's error_type session_lost).
# context: the next observation or generation did not fit the context budget. response_length: the response budget
# ran out mid-generation.
TerminationReason = Literal["answer", "max_turns", "agent_errors", "tool_errors", "context", "response_length"]
# call_ok: a tool ran. call_error: the call was refused or failed. answer: a final answer. no_action: the turn has
# neither a well-formed call nor an answer (an error observation was sent back, classified agent-caused).
TurnOutcome = Literal["call_ok", "call_error", "answer", "no_action"]
ErrorClass = Literal["agent", "tool"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageEntry(_Record):
    """One entry of the episode's visual register, in register order."""

    ref: str  # img_1, img_2, ... (Neos) or the server's id for it (ModalSearcher shows image_xxxxxxxx ids as text)
    source: str  # "question" or the tool that added it
    turn: int | None  # the policy turn whose call added it; None for question images
    in_context: bool  # whether its pixels entered the policy's context (and so every later generate call)


class CallRecord(_Record):
    """One tool call of a turn and what came of it."""

    tool_name: str
    arguments: dict[str, Any]
    ok: bool
    error_class: ErrorClass | None = None
    error_type: str | None = None  # e.g. unknown_tool, invalid_arguments, timeout, connection_error
    observation: str = ""  # the text the policy was shown (after truncation)
    images_added: list[str] = Field(default_factory=list)  # register refs whose pixels entered the context
    latency_s: float = 0.0  # tool wall time as the client saw it
    mei_call_ids: list[str] = Field(default_factory=list)
    mei_versions: list[str] = Field(default_factory=list)
    cached: bool = False


class TurnRecord(_Record):
    index: int  # 0-based assistant turn
    span: tuple[int, int]  # [start, end) in response ids; end - start = generated tokens of this turn
    text: str  # the assistant's decoded text for this turn, special tokens removed
    outcome: TurnOutcome
    calls: list[CallRecord] = Field(default_factory=list)  # one per call (both papers: at most one per turn)
    error_class: ErrorClass | None = None  # the turn's class when outcome is call_error/no_action
    error_type: str | None = None  # the format error (malformed_call, bad_format, ...) or the first call's error
    observation_delivered_to_policy: bool = True  # False: the result did not fit the context and was withheld
    tools_enabled: bool = True  # False on the final turn, when tools are disabled


class TrajectoryRecord(_Record):
    schema_version: Literal[1] = RECORD_SCHEMA_VERSION
    protocol: Protocol
    question: str
    session_id: str | None
    group_id: str | None  # the verl uid of the question: one group of rollouts
    mei_version: str | None
    termination_reason: TerminationReason
    error_class_ended: ErrorClass | None = None  # set when agent_errors/tool_errors ended the episode
    final_answer: str | None = None
    images: list[ImageEntry] = Field(default_factory=list)
    turns: list[TurnRecord] = Field(default_factory=list)

    def span_turns(self) -> dict[str, int]:
        """The span ids the credit judge may use (``t0``, ``t1``, ...) mapped to turns: ``assessment_to_credit``'s
        second argument. Only turns whose observation reached the policy are blamable for what followed, but every
        turn is listed: the judge decides, the schema keeps ids stable."""
        return {span_id(turn.index): turn.index for turn in self.turns}


def span_id(turn: int) -> str:
    return f"t{turn}"
