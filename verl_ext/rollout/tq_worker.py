"""verl v1 agent-loop worker and manager that assess each group's failures while the rollout goes on.

verl's ``AgentLoopWorkerTQ`` runs all ``rollout.n`` trajectories of a prompt in one ``_run_prompt`` and, for each
finished trajectory, ``_agent_loop_postprocess`` scores it (the reward loop) and puts it into TransferQueue; the group
is marked finished only after all of them are in. Our override scores first, hands the trajectory to a
:class:`~verl_ext.credit.group.GroupAssessor`, and puts it with ``extra_fields["neos_credit"]`` once the group's
failures are judged, so the labels are in TransferQueue before the trainer can see the group, and judging one group
overlaps with every other group's generation. ``TurnCreditAdvantageMixin`` then delivers them to ``neos_turn_credit``.

Select it with ``actor_rollout_ref.rollout.agent.agent_loop_manager_class=verl_ext.rollout.tq_worker.NeosAgentLoopManagerTQ``
and configure the judge under ``actor_rollout_ref.rollout.custom.neos_credit_judge``: ``{kind: offline}`` (the task's
``extra_info.task_path``, ``OfflinePathJudge``) or ``{kind: llm, url: ..., model: ...}``
(``CreditJudgeConfig`` fields, ``CreditJudge``, plus ``references``: the path of data generation's
``references.jsonl``, whose verified success for the row's ``extra_info.reference_trajectory_id`` is the judge's
reference; without it, or for a task it lacks, a success of the same group is). Validation rollouts are not judged.

Mixed-group sampling (``verl_ext.trainer.mixed_groups``) changes two things. A prompt row carrying
``__session_ids__`` runs exactly those sessions (run-wide session indices chosen by the sampler, not ``0..n-1``), each
with its own status tag in TransferQueue under :func:`admission_key`, so the trainer sees every trajectory end and can
cancel the ones still running (:meth:`NeosAgentLoopWorker.cancel_sessions`) at the policy boundary. And those
trajectories are put at once, unjudged: the trainer decides when a group is eligible (it may have more or fewer than
``rollout.n`` members, spread over workers) and asks a worker to judge its failures then
(:meth:`NeosAgentLoopWorker.assess_failures`), so only groups that can be selected are judged and the labels are in
TransferQueue before the batch is handed to the estimator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np
import ray
import transfer_queue as tq
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ, apply_greedy_sampling_params
from verl.utils import tensordict_utils as tu

from verl_ext.credit.group import GroupAssessor
from verl_ext.credit.judge import CreditJudge, CreditJudgeConfig
from verl_ext.credit.labels import CREDIT_KEY, CreditLabels, unassessed
from verl_ext.credit.offline_judge import OfflinePathJudge, TaskPath
from verl_ext.credit.references import load_references, reference_id, with_reference
from verl_ext.rollout.admission import SESSIONS_KEY, SUCCESS_THRESHOLD, TRAIN, admission_key
from verl_ext.rollout.record import RECORD_KEY, TrajectoryRecord
from verl_ext.rollout.tool_fleet import deploy_configured
from verl_ext.tools.client import png_base64

log = logging.getLogger(__name__)
JUDGE_KEY = "neos_credit_judge"
JUDGE_IMAGES_KEY = "neos_judge_images"  # extra_fields of a failed row: its images for the judge, until judged

# Set inside a mixed-group prompt's session tasks (each task copies the context it was created in): the trainer
# judges those groups, so ``_agent_loop_postprocess`` must not wait for a fixed-size group.
_TRAINER_JUDGES: ContextVar[bool] = ContextVar("neos_trainer_judges", default=False)


def _images_key(record: TrajectoryRecord) -> tuple[str | None, str | None]:
    return record.group_id, record.session_id


_VerlWorker = AgentLoopWorkerTQ.__ray_metadata__.modified_class.__mro__[1]  # the class under verl's @ray.remote


def task_path(extra_info: Any) -> TaskPath | None:
    """The row's verified path, ``extra_info.task_path``: the JSON text both data generators export (Neos App. A, step 8:
    success references for credit; ``reasoning_path`` holds the steps themselves, not the judge's evidence list).
    None, with a warning, when a row has none or a malformed one: its failures then keep the outcome advantage."""
    raw = extra_info.get("task_path") if isinstance(extra_info, dict) else None
    if raw is None:
        return None
    try:
        return TaskPath.model_validate_json(raw) if isinstance(raw, (str, bytes)) else TaskPath.model_validate(raw)
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        log.warning("extra_info.task_path is not a TaskPath, credit falls back to the outcome advantage: %s", e)
        return None


class NeosAgentLoopWorker(_VerlWorker):
    """``AgentLoopWorkerTQ`` + group credit assessment before each trajectory is put."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        rollout = self.config.actor_rollout_ref.rollout
        self.judge_config = dict((rollout.get("custom") or {}).get(JUDGE_KEY) or {"kind": "offline"})
        kind = self.judge_config.pop("kind", "offline")
        if kind not in ("offline", "llm"):
            raise ValueError(f"{JUDGE_KEY}.kind must be offline or llm, got {kind!r}")
        references = self.judge_config.pop("references", None)
        self.llm_judge = CreditJudge(CreditJudgeConfig.from_mapping(self.judge_config)) if kind == "llm" else None
        self.references = load_references(references) if references and self.llm_judge else {}
        if self.llm_judge is not None and not references:
            log.warning(
                "%s.references is not set: failures are judged against a success of their own group (checked only "
                "by the answer reward), not a verified reference (Neos §3.4); set it to data generation's "
                "references.jsonl", JUDGE_KEY,
            )
        self.assessor = GroupAssessor(size=int(rollout.n))
        self._warned = False
        self._sessions: dict[str, asyncio.Task[None]] = {}  # admission key -> running mixed-group session
        self._submitted: set[tuple[str, str]] = set()  # (uid, session) of trajectories in the assessor, until they end
        self._judge_images: dict[tuple[str | None, str | None], dict[str, str]] = {}  # failures awaiting the judge

    def _assess_group(self, kwargs: dict[str, Any]):
        if self.llm_judge is not None:
            verified = self.references.get(reference_id(kwargs.get("extra_info")) or "")
            judge = self.llm_judge

            async def llm(reference: TrajectoryRecord, failures: Sequence[TrajectoryRecord]) -> list[CreditLabels]:
                images = [self._judge_images.pop(_images_key(f), None) for f in failures]
                return await judge.assess_group(reference, failures, images)

            return with_reference(llm, verified)
        path = task_path(kwargs.get("extra_info"))

        async def offline(reference: TrajectoryRecord, failures: Sequence[TrajectoryRecord]) -> list[CreditLabels]:
            """The task's own verified path (keyed by the question as the policy saw it); a row without one falls
            back (no_task_path) to the outcome advantage."""
            paths = [path.model_copy(update={"question": reference.question})] if path else []
            return await OfflinePathJudge(paths).assess_group(reference, failures)

        return offline

    async def _agent_loop_postprocess(self, output: Any, validate: bool, **kwargs: Any) -> None:
        outputs = output if isinstance(output, list) else [output]
        final = outputs[-1]
        trainer_judges = _TRAINER_JUDGES.get()
        if not validate and RECORD_KEY in final.extra_fields and (not trainer_judges or self._sends_images()):
            await self._compute_score(outputs, kwargs=kwargs)  # verl's own scoring; the later call sees it is done
            if final.reward_score is None:
                if not self._warned:
                    log.warning("no reward before TransferQueue (no async reward loop): credit is not assessed here")
                    self._warned = True
            else:
                record = TrajectoryRecord.model_validate(final.extra_fields[RECORD_KEY])
                images = await self._failure_images(record, float(final.reward_score), final.multi_modal_data)
                if trainer_judges:  # judged later, maybe by another worker: the pixels travel with the row
                    if images:
                        final.extra_fields[JUDGE_IMAGES_KEY] = images
                    return await super()._agent_loop_postprocess(output, validate, **kwargs)
                if images and record.session_id is not None:
                    self._judge_images[_images_key(record)] = images
                self._submitted.add((str(kwargs["uid"]), str(kwargs["session_id"])))
                try:
                    labels = await self.assessor.submit(
                        str(kwargs["uid"]),
                        str(kwargs["session_id"]),
                        record,
                        float(final.reward_score),
                        self._assess_group(kwargs),
                    )
                finally:
                    self._judge_images.pop(_images_key(record), None)  # a group never judged leaves none behind
                if labels is not None:
                    final.extra_fields[CREDIT_KEY] = labels.model_dump(mode="json")
        return await super()._agent_loop_postprocess(output, validate, **kwargs)

    async def _run_agent_loop(self, sampling_params: dict, trajectory: dict, **kwargs: Any) -> Any:
        """verl's, and a trajectory that raises before its group's assessor has it (tool server down at session
        open, a processor error, a failed reward call) is withdrawn from the group, which completes without it: its
        siblings are assessed among themselves instead of waiting for it forever. verl's ``_run_prompt`` still logs
        the error and marks the group ``failure``; the trainer counts the missing trajectory
        (``neos_rollout/failed_sessions``)."""
        member = (str(kwargs.get("uid")), str(kwargs.get("session_id")))
        try:
            return await super()._run_agent_loop(sampling_params, trajectory, **kwargs)
        except BaseException:
            if not trajectory["validate"] and not _TRAINER_JUDGES.get() and member not in self._submitted:
                await self.assessor.withdraw(*member)
            raise
        finally:
            self._submitted.discard(member)

    def _sends_images(self) -> bool:
        return self.llm_judge is not None and self.llm_judge.config.images

    async def _failure_images(
        self, record: TrajectoryRecord, reward: float, multi_modal_data: dict[str, Any] | None
    ) -> dict[str, str]:
        """Register ref -> PNG data URL of every image a failed trajectory showed its agent, for the LLM judge
        (empty for successes, other judges, text-only judges). The agent loop's ``multi_modal_data["images"]``
        holds exactly the register's in-context images, in register order."""
        images = list((multi_modal_data or {}).get("images") or [])
        if reward >= SUCCESS_THRESHOLD or not images or not self._sends_images():
            return {}
        refs = [image.ref for image in record.images if image.in_context]
        if len(refs) != len(images):
            log.warning("%d images in the agent's context but %d in-context refs in its register: the judge gets "
                        "this failure as text only", len(images), len(refs))
            return {}
        loop = asyncio.get_running_loop()
        encoded = await loop.run_in_executor(None, lambda: [png_base64(image) for image in images])
        return {ref: "data:image/png;base64," + data for ref, data in zip(refs, encoded, strict=True)}

    async def _run_prompt(self, prompt: dict, sampling_params: dict, trajectory: dict, trace: bool = False) -> None:
        """verl's ``_run_prompt``, except that a row with ``__session_ids__`` runs exactly those sessions."""
        sessions = prompt.pop(SESSIONS_KEY, None)
        if sessions is None or trajectory["validate"]:
            return await super()._run_prompt(prompt, sampling_params, trajectory=trajectory, trace=trace)
        prompt.pop("__rollout_n__", None)
        params = dict(sampling_params)
        if not prompt.pop("__do_sample__", True):
            apply_greedy_sampling_params(params)
        token = _TRAINER_JUDGES.set(True)  # copied into the session tasks created below
        tasks = []
        try:
            for session in sessions:
                key = admission_key(str(prompt["uid"]), int(session))
                task = asyncio.create_task(self._run_session(key, int(session), params, trajectory, trace, prompt))
                self._sessions[key] = task
                task.add_done_callback(lambda _, k=key: self._sessions.pop(k, None))
                tasks.append(task)
        finally:
            _TRAINER_JUDGES.reset(token)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_session(
        self, key: str, session: int, params: dict, trajectory: dict, trace: bool, prompt: dict
    ) -> None:
        """One trajectory and its status tag: running, then finished (its rows are in) or failure (none are)."""
        await tq.async_kv_put(key=key, partition_id=TRAIN, tag={"status": "running"})
        try:
            await self._run_agent_loop(params, trajectory=trajectory, trace=trace, session_id=session, **prompt)
        except asyncio.CancelledError:
            raise  # cancelled at the policy boundary: the trainer clears this session's keys
        except Exception:
            log.exception("mixed-group session %s failed", key)
            await tq.async_kv_put(key=key, partition_id=TRAIN, tag={"status": "failure"})
        else:
            await tq.async_kv_put(key=key, partition_id=TRAIN, tag={"status": "finished"})

    async def cancel_sessions(self, keys: Sequence[str]) -> int:
        """Cancel this worker's running sessions among ``keys`` and wait until they have stopped writing."""
        tasks = [task for key in keys if (task := self._sessions.get(key)) is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    async def assess_failures(self, reference_key: str, failure_keys: Sequence[str], task: dict[str, Any]) -> int:
        """Judge failed trajectories of one question against a success of it, both already in TransferQueue, and
        write each failure's labels into its ``extra_fields``. ``task`` is the dataset row's ``extra_info`` and
        ``reward_model`` (the offline judge's path and answer). Returns how many were labelled; a judge that raises
        labels each failure unassessed (reason ``error``: the plain outcome advantage, counted by the estimator)."""
        keys = [reference_key, *failure_keys]
        data = await tq.async_kv_batch_get(keys=keys, partition_id=TRAIN, select_fields=["extra_fields"])
        extra = [dict(e) for e in data["extra_fields"]]
        if any(RECORD_KEY not in e for e in extra):
            return 0  # not our agent loop: nothing to judge
        records = [TrajectoryRecord.model_validate(e[RECORD_KEY]) for e in extra]
        for record, fields in zip(records[1:], extra[1:]):  # the failures' pixels, dropped from the rows written back
            images = fields.pop(JUDGE_IMAGES_KEY, None)
            if images and self.llm_judge is not None and record.session_id is not None:
                self._judge_images[_images_key(record)] = images
        try:
            labels = await self._assess_group(task)(records[0], records[1:])
        except Exception:  # counted: each failure falls back with reason "error"
            log.exception("credit judge failed for %s: outcome advantages only", list(failure_keys))
            judge = self.llm_judge.name if self.llm_judge is not None else "offline_path"
            labels = [unassessed(judge, len(r.turns), "error") for r in records[1:]]
        for fields, label in zip(extra[1:], labels, strict=True):
            fields[CREDIT_KEY] = label.model_dump(mode="json")
        await tq.async_kv_batch_put(
            keys=list(failure_keys),
            partition_id=TRAIN,
            fields=tu.get_tensordict({"extra_fields": np.array(extra[1:], dtype=object)}),
        )
        return len(failure_keys)


NeosAgentLoopWorkerTQ = ray.remote(NeosAgentLoopWorker)


class NeosAgentLoopManagerTQ(AgentLoopManagerTQ):
    """verl's v1 agent-loop manager with :class:`NeosAgentLoopWorker` as its workers (and, with
    ``custom.neos_tool_servers``, a tool server per node deployed before them: :mod:`verl_ext.rollout.tool_fleet`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.agent_loop_workers_class = NeosAgentLoopWorkerTQ
        deploy_configured(self.config)  # the workers get the config with the servers' addresses
