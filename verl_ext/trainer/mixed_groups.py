"""Neos' adaptive mixed-group sampling (Neos App. B) inside verl's v1 trainer.

The framework-free :class:`~verl_ext.trainer.sampler.MixedGroupSampler` decides which trajectory to start, when a
batch is ready and what it holds. This module is the verl layer around it:

- :class:`MixedGroupReplayBuffer` (a verl ``ReplayBuffer``) owns the sampler for the ``train`` partition. Its
  ``sample()`` admits trajectories as prompt rows with ``__session_ids__`` (run-wide session indices; the worker runs
  exactly those, see ``verl_ext.rollout.tq_worker``), polls TransferQueue for each session's status tag, reports each
  ended trajectory (success: the final output's ``rm_scores`` sum >= 0.5, ``admission.SUCCESS_THRESHOLD``), asks a
  worker to judge a group's new failures whenever the sampler says the group is eligible, and once ``ready()`` returns
  the selection: exactly B x G trajectories (their keys, one per single-output session). Validation batches go to
  verl's own ``sample()``.
- Policy boundary: at selection every trajectory still running is cancelled, not waited for: the workers cancel the
  sessions' asyncio tasks (no further turns, tool calls or TransferQueue writes) and verl's
  ``CheckpointEngineManager.abort_replicas`` aborts their in-flight generate requests (then ``resume_generation``
  reopens the replicas for the next round; the aborted requests' clients are gone, so nothing resumes them; the
  ``hf`` backend cannot interrupt a request, so there a cancelled request's generation runs out unseen). Their
  rows, completed trajectories not kept and every status tag of the batch are cleared from TransferQueue before
  ``sample()`` returns, so no old-policy trajectory reaches the next step; questions not selected go back to the
  front of the sampler's queue and are sampled afresh under the next policy. The judge calls of the batch are
  awaited before it is returned, so selected failures carry their labels when the estimator reads them.
- :class:`MixedGroupSamplingMixin` plugs the buffer into the trainer: the dataloader yields one question per fetch
  (``data.gen_batch_size = 1``) so every question taken is either in the sampler's queue or window (and in the
  checkpoint) or done; ``prepare_step`` dispatches nothing (the buffer admits); the buffer's state (sampler state and
  the dataset rows of queued questions) is saved next to verl's checkpoint and restored on resume.

Config (``trainer.v1.neos.sampler``): ``enable`` (default true; false: verl's plain on-policy batches of B questions x
G, e.g. for a smoke run whose policy solves all or none), ``max_per_group``, ``window``, ``admission_limit`` (defaults:
1.5G, 2B, 2BG from ``SamplerConfig``), ``adaptive_admission`` (``AdmissionSettings``: the in-flight limit follows the
replicas' KV usage, waiting and preempted requests, ``admission_limit`` its upper bound; ``enable: false`` keeps the
constant; metrics ``neos_sampler/admission_limit``, ``.../preemptions``, ``.../admission_fallbacks``),
``max_deferred`` (deferrals in one batch before the run stops with an error; default the training set's size) and
``poll_interval`` (seconds between TransferQueue polls, default 1.0). B is ``data.train_batch_size`` (per
``parameter_sync_step``), G is ``actor_rollout_ref.rollout.n``. Rewards must be known at sampling time (a rule-based
reward or ``reward.reward_model.enable_resource_pool``), and the agent-loop manager must be
``verl_ext.rollout.tq_worker.NeosAgentLoopManagerTQ``.

A trajectory whose agent loop raises (tool server down at session open, a processor error) ends with no rows, with or
without the sampler: it is counted per batch in ``neos_rollout/failed_sessions`` and ``.../failed_session_share``
(the sampler's aborted ones; with verl's batches the sampled groups' missing members), and a share above
``trainer.v1.neos.failed_session_warn_share`` (default 0.05) logs a warning.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import ray
import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf, open_dict
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.utils import tensordict_utils as tu

from verl_ext.rollout.admission import SESSIONS_KEY, SUCCESS_THRESHOLD, TRAIN, admission_key
from verl_ext.rollout.admission_control import AdmissionController, AdmissionSettings
from verl_ext.rollout.replica_signals import ReplicaProbe
from verl_ext.trainer.metrics import (
    DEFAULT_FAILED_SESSION_WARN_SHARE,
    failed_session_metrics,
    failed_session_warn_share,
    sessions_present,
)
from verl_ext.trainer.sampler import Admission, GroupStatus, MixedGroupSampler, SamplerConfig, Selection

log = logging.getLogger(__name__)
CHECKPOINT_FILE = "neos_sampler.pt"
METRIC_PREFIX = "neos_sampler/"
_ENDED = ("finished", "failure")


def mixed_group_settings(config: DictConfig, groups: int) -> tuple[SamplerConfig, float, int | None]:
    """``SamplerConfig`` (B = ``groups``, G = ``rollout.n``, the rest from ``trainer.v1.neos.sampler``), the poll
    interval and ``max_deferred`` (None: the training set's size, known once the dataloader exists)."""
    options = _sampler_options(config)
    options.pop("enable", None)
    options.pop("adaptive_admission", None)
    max_deferred = options.pop("max_deferred", None)
    if max_deferred is not None and int(max_deferred) < 1:
        raise ValueError(f"trainer.v1.neos.sampler.max_deferred must be >= 1, got {max_deferred}")
    poll_interval = float(options.pop("poll_interval", 1.0))
    if poll_interval <= 0:
        raise ValueError(f"trainer.v1.neos.sampler.poll_interval must be > 0, got {poll_interval}")
    sampler = SamplerConfig(groups=groups, group_size=int(config.actor_rollout_ref.rollout.n), **options)
    return sampler, poll_interval, None if max_deferred is None else int(max_deferred)


def _sampler_options(config: DictConfig) -> dict[str, Any]:
    options = (config.trainer.v1.get("neos") or {}).get("sampler") or {}
    return OmegaConf.to_container(options, resolve=True) if isinstance(options, DictConfig) else dict(options)


def admission_settings(config: DictConfig) -> AdmissionSettings:
    """``trainer.v1.neos.sampler.adaptive_admission`` (absent: the defaults, adaptive on)."""
    given = _sampler_options(config).get("adaptive_admission") or {}
    try:
        return AdmissionSettings.model_validate(given)
    except ValueError as exc:
        first = exc.errors()[0] if hasattr(exc, "errors") else {"loc": (), "msg": str(exc)}
        field_name = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"trainer.v1.neos.sampler.adaptive_admission.{field_name}: {first['msg']}") from None


class RolloutControl(Protocol):
    """What the buffer needs from the rollout side; :class:`RayRolloutControl` is the trainer's."""

    def dispatch(self, batch: TensorDict) -> None: ...

    def cancel(self, keys: Sequence[str]) -> None: ...

    def assess(self, reference_key: str, failure_keys: Sequence[str], task: dict[str, Any]) -> Any: ...

    def wait(self, pending: Sequence[Any]) -> None: ...


@dataclass
class RayRolloutControl:
    """The trainer's agent-loop manager (``NeosAgentLoopManagerTQ``) and its checkpoint manager (to abort requests)."""

    manager: Any
    checkpoint_manager: Any = None
    probe: ReplicaProbe | None = None  # the replicas' state for adaptive admission (None: the limit stays constant)
    _turn: Iterator[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        missing = [w for w in self.manager.agent_loop_workers if not hasattr(w, "cancel_sessions")]
        if missing:
            raise TypeError(
                "mixed-group sampling needs actor_rollout_ref.rollout.agent.agent_loop_manager_class="
                "verl_ext.rollout.tq_worker.NeosAgentLoopManagerTQ (its workers run and cancel single sessions)"
            )

    def dispatch(self, batch: TensorDict) -> None:
        self.manager.generate_sequences(batch)

    def cancel(self, keys: Sequence[str]) -> None:
        ray.get([w.cancel_sessions.remote(list(keys)) for w in self.manager.agent_loop_workers])
        if self.checkpoint_manager is not None:
            self.checkpoint_manager.abort_replicas()
            self.checkpoint_manager.resume_generation_replicas()

    def assess(self, reference_key: str, failure_keys: Sequence[str], task: dict[str, Any]) -> Any:
        workers = self.manager.agent_loop_workers
        return workers[next(self._turn) % len(workers)].assess_failures.remote(reference_key, list(failure_keys), task)

    def wait(self, pending: Sequence[Any]) -> None:
        for ref in pending:
            try:
                ray.get(ref)
            except Exception:  # a lost worker: those failures keep the outcome advantage
                log.exception("a credit assessment did not complete")


def _row_value(row: TensorDict, key: str) -> Any:
    values = tu.get(row, key, None)
    return None if values is None else values[0]


class MixedGroupReplayBuffer(ReplayBuffer):
    """verl's replay buffer with Neos' sampler deciding the ``train`` batches (see the module docstring)."""

    def __init__(
        self,
        *,
        sampler_config: SamplerConfig,
        next_rows: Callable[[], TensorDict],
        poll_interval: float,
        max_deferred: int | None = None,
        failed_session_warn_share: float = DEFAULT_FAILED_SESSION_WARN_SHARE,
        admission: AdmissionSettings | None = None,
        **replay_buffer_kwargs: Any,
    ) -> None:
        super().__init__(poll_interval=poll_interval, **replay_buffer_kwargs)
        self.admission = admission or AdmissionSettings(enable=False)
        self.controller: AdmissionController | None = None  # made in bind(), once the replicas are known
        self._probe: ReplicaProbe | None = None
        self._fallback_warned = False
        self.failed_session_warn_share = failed_session_warn_share
        self._next_rows = next_rows
        self.rows: dict[str, TensorDict] = {}  # question id (the row's uid) -> its one-row dataset batch
        self.sampler = MixedGroupSampler(sampler_config, self._questions())
        self.control: RolloutControl | None = None
        self.max_deferred = max_deferred  # deferrals in one batch before sample() gives up (DAPO: max_num_gen_batches)
        # MEI co-evolution (Neos §3.5) learns from every success of the round, selected or not: when set, the batch
        # close keeps the extra_fields of completed successes it does not select (see take_unselected_successes).
        self.keep_unselected_successes = False
        self._unselected_successes: list[dict[str, Any]] = []
        self._unselected_failures = 0
        self._reset_batch()

    def bind(self, control: RolloutControl) -> None:
        """Connect the rollout side (the trainer does it in ``fit``, once the agent-loop manager exists)."""
        self.control = control
        probe = getattr(control, "probe", None)
        if self.admission.enable and probe is not None and probe.addresses:
            self._probe = probe
            self.controller = AdmissionController(
                self.admission, self.sampler.config.admission_limit, len(probe.addresses)
            )

    def free_slots(self) -> int:
        """Trajectories to start now: the adaptive limit (updated every ``interval_s``) or the constant, less those
        in flight."""
        limit = self.sampler.config.admission_limit
        if self.controller is not None:
            now = time.monotonic()
            if self.controller.due(now):
                self.controller.update(self._probe.signals(), now)
            limit = self.controller.limit
        return max(0, limit - len(self._in_flight))

    # ------------------------------------------------------------------ sample

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        if partition_id != TRAIN:
            return super().sample(global_steps, partition_id, batch_size)
        if batch_size != self.sampler.config.groups:
            groups = self.sampler.config.groups
            raise ValueError(f"asked for {batch_size} groups, the sampler makes batches of {groups}")
        if self.control is None:
            raise RuntimeError("MixedGroupReplayBuffer.bind() was not called: no rollout to dispatch to")
        while not self.sampler.ready():
            self._dispatch(self.sampler.admit(self.free_slots()), global_steps)
            if self.sampler.exhausted():
                raise RuntimeError("the question source cannot make another batch of mixed groups")
            if self.max_deferred is not None and self.sampler.stats.deferred >= self.max_deferred:
                raise RuntimeError(
                    f"{self.sampler.stats.deferred} questions deferred in one batch ({self.sampler.stats.finished} "
                    f"trajectories judged, {len(self.sampler.eligible())} of {self.sampler.config.groups} mixed "
                    "groups): the policy solves all or none of them and a repeating dataloader would be sampled "
                    "forever. Check the reward and the data, or raise trainer.v1.neos.sampler.max_deferred"
                )
            if not self._poll():
                time.sleep(self.poll_interval)
        return self._close_batch()

    def _reset_batch(self) -> None:
        self._in_flight: dict[str, Admission] = {}  # admission key -> trajectory still running
        self._admitted: set[str] = set()  # every admission key of this batch
        self._final_key: dict[tuple[str, int], str] = {}  # (question, session) -> its final output's key
        self._succeeded: set[tuple[str, int]] = set()  # (question, session) of the judged successes
        self._reference: dict[str, int] = {}  # question -> the success its failures are judged against
        self._judged: dict[str, set[int]] = defaultdict(set)
        self._assessments: list[Any] = []

    def _questions(self) -> Iterator[str]:
        """The sampler's source: one dataloader row at a time, kept until its question is done."""
        while True:
            batch = self._next_rows()
            for i in range(len(batch)):
                row = tu.index_select_tensor_dict(batch, [i])
                question = str(_row_value(row, "uid"))
                self.rows[question] = row
                yield question

    def _dispatch(self, admissions: list[Admission], global_steps: int) -> None:
        if not admissions:
            return
        sessions: dict[str, list[int]] = defaultdict(list)
        for a in admissions:
            sessions[a.question_id].append(a.session_index)
        batch = tu.concat_tensordict([self.rows[q] for q in sessions])
        tu.assign_non_tensor_stack(batch, SESSIONS_KEY, list(sessions.values()))
        tu.assign_non_tensor_data(batch, "global_steps", global_steps)
        keys = [admission_key(a.question_id, a.session_index) for a in admissions]
        tags = [{"is_prompt": True, "status": "pending", "global_steps": global_steps} for _ in keys]
        tq.kv_batch_put(keys=keys, partition_id=TRAIN, tags=tags)
        self._in_flight.update(zip(keys, admissions))
        self._admitted.update(keys)
        self.control.dispatch(batch)

    @staticmethod
    def _listing() -> dict[str, dict]:
        return (tq.kv_list(TRAIN) or {}).get(TRAIN, {})

    @staticmethod
    def _outputs(listing: dict[str, dict]) -> dict[str, list[str]]:
        """Admission key -> its trajectory keys ``{uid}_{session}_{i}``, in output order."""
        outputs: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for key, tag in listing.items():
            parts = key.rsplit("_", 2)
            if tag.get("is_prompt") or len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()):
                continue
            outputs[admission_key(parts[0], int(parts[1]))].append((int(parts[2]), key))
        return {k: [key for _, key in sorted(v)] for k, v in outputs.items()}

    def _poll(self) -> bool:
        """Report every trajectory that ended since the last poll (session order); False when none had.

        All of them, also those after the one that made the sampler ready: a completed success not reported would be
        cancelled instead of kept for MEI, and a group that became eligible too is judged in case it is selected."""
        listing = self._listing()
        ended = sorted(
            (a.session_index, k) for k, a in self._in_flight.items() if listing.get(k, {}).get("status") in _ENDED
        )
        if not ended:
            return False
        outputs = self._outputs(listing)
        finished = [k for _, k in ended if listing[k]["status"] == "finished" and outputs.get(k)]
        rewards = dict(zip(finished, self._rewards([outputs[k][-1] for k in finished]), strict=True))
        for _, key in ended:
            a = self._in_flight.pop(key)
            if key in rewards:
                self._final_key[(a.question_id, a.session_index)] = outputs[key][-1]
                success = rewards[key] >= SUCCESS_THRESHOLD
                if success:
                    self._succeeded.add((a.question_id, a.session_index))
                status = self.sampler.finish(a.question_id, a.session_index, success)
            else:
                status = self.sampler.abort(a.question_id, a.session_index)
            if status is GroupStatus.ELIGIBLE:
                self._assess(a.question_id)
        return True

    @staticmethod
    def _rewards(keys: list[str]) -> list[float]:
        if not keys:
            return []
        try:
            scores = tq.kv_batch_get(keys=keys, partition_id=TRAIN, select_fields=["rm_scores"])["rm_scores"]
        except Exception as exc:
            raise RuntimeError(
                "mixed-group sampling needs each trajectory's reward when it is put (rm_scores): use a rule-based "
                "reward or reward.reward_model.enable_resource_pool=True"
            ) from exc
        return [float(s.sum().item()) for s in scores]

    def _assess(self, question: str) -> None:
        """Judge the group's failures not judged yet against its lowest-index success (known at eligibility)."""
        outcomes = self.sampler.outcomes(question)
        reference = self._reference.setdefault(question, min(s for s, ok in outcomes.items() if ok))
        new = [s for s, ok in sorted(outcomes.items()) if not ok and s not in self._judged[question]]
        if not new:
            return
        self._judged[question].update(new)
        row = self.rows[question]
        task = {key: _row_value(row, key) or {} for key in ("extra_info", "reward_model")}
        self._assessments.append(
            self.control.assess(
                self._final_key[(question, reference)], [self._final_key[(question, s)] for s in new], task
            )
        )

    def _close_batch(self) -> tuple[KVBatchMeta, dict]:
        selection = self.sampler.select()
        cancel = [admission_key(a.question_id, a.session_index) for a in selection.cancel]
        if cancel:
            self.control.cancel(cancel)
        self.control.wait(self._assessments)
        listing = self._listing()
        outputs = self._outputs(listing)
        selected = [admission_key(g.question_id, s) for g in selection.groups for s in g.sessions]
        keys = [key for k in selected for key in outputs[k]]
        if self.keep_unselected_successes:
            self._keep_unselected(selection)
        kept = set(keys)
        stale = [*self._admitted, *(key for k in self._admitted for key in outputs.get(k, ()) if key not in kept)]
        tq.kv_clear(keys=[k for k in stale if k in listing], partition_id=TRAIN)
        for question in [g.question_id for g in selection.groups] + selection.deferred:
            self.rows.pop(question, None)
        metrics = self._metrics(selection)
        self._reset_batch()
        return KVBatchMeta(partition_id=TRAIN, keys=keys, tags=[listing[k] for k in keys]), metrics

    def _keep_unselected(self, selection: Selection) -> None:
        """The extra_fields of every completed success not selected (all-success, deferred and carried groups, a
        selected group's surplus), read before the batch close clears them; failures are only counted."""
        kept = {(g.question_id, s) for g in selection.groups for s in g.sessions}
        unselected = sorted((s, q) for q, s in self._final_key if (q, s) not in kept)
        successes = [self._final_key[(q, s)] for s, q in unselected if (q, s) in self._succeeded]
        self._unselected_failures += len(unselected) - len(successes)
        if successes:
            extra = tq.kv_batch_get(keys=successes, partition_id=TRAIN, select_fields=["extra_fields"])["extra_fields"]
            self._unselected_successes.extend(e or {} for e in (extra.tolist() if hasattr(extra, "tolist") else extra))

    def take_unselected_successes(self) -> tuple[list[dict[str, Any]], int]:
        """``(extra_fields of the unselected successes, number of unselected failures)`` since the last take."""
        taken = (self._unselected_successes, self._unselected_failures)
        self._unselected_successes, self._unselected_failures = [], 0
        return taken

    def _metrics(self, selection: Selection) -> dict[str, float]:
        metrics = selection.stats.metrics(prefix=METRIC_PREFIX)
        metrics[f"{METRIC_PREFIX}carried"] = float(len(selection.carried))
        metrics[f"{METRIC_PREFIX}judged_failures"] = float(sum(len(s) for s in self._judged.values()))
        outcomes = [ok for g in selection.groups for ok in g.outcomes]
        metrics[f"{METRIC_PREFIX}selected_success_share"] = sum(outcomes) / max(1, len(outcomes))
        stats = selection.stats  # an aborted trajectory's agent loop raised: its slot went to another sample
        metrics.update(
            failed_session_metrics(stats.aborted, stats.finished + stats.aborted, self.failed_session_warn_share)
        )
        metrics.update(self._admission_metrics())
        return metrics

    def _admission_metrics(self) -> dict[str, float]:
        """The batch's mean in-flight limit, preemptions and the controller's updates without a KV signal."""
        if self.controller is None:
            return {f"{METRIC_PREFIX}admission_limit": float(self.sampler.config.admission_limit)}
        st = self.controller.take_stats()
        fallbacks = st.updates - st.by_source["kv"]
        share = self.controller.fallback_share()
        if share > self.admission.fallback_warn_share and not self._fallback_warned:
            self._fallback_warned = True
            log.warning(
                "adaptive admission: %.0f%% of its updates had no KV metrics from the replicas (%d scrape failures; "
                "vLLM needs actor_rollout_ref.rollout.disable_log_stats=false): it follows turn latency or holds",
                100 * share, self._probe.scrape_failures,
            )
        mean_limit = st.limit_sum / st.updates if st.updates else float(self.controller.limit)
        return {
            f"{METRIC_PREFIX}admission_limit": mean_limit,
            f"{METRIC_PREFIX}preemptions": st.preemptions,
            f"{METRIC_PREFIX}admission_fallbacks": float(fallbacks),
        }

    # -------------------------------------------------------------- checkpoint

    def save(self, path: str) -> None:
        """Sampler state and the dataset rows of every question it still holds (written whole, then renamed)."""
        state = self.sampler.state_dict()
        held = [*state["queue"], *(g["question_id"] for g in state["window"])]
        tmp = f"{path}.tmp"
        torch.save({"sampler": state, "rows": {q: self.rows[q] for q in held}}, tmp)
        os.replace(tmp, path)

    def load(self, path: str) -> None:
        """Restore ``save()`` into this fresh buffer; the dataloader is already where the checkpoint left it.

        Trajectories in flight at save time no longer exist: they are aborted (their slots freed, nothing counted).
        """
        saved = torch.load(path, weights_only=False)
        self.sampler.load_state_dict(saved["sampler"], source_positioned=True)
        self.rows = dict(saved["rows"])
        for a in self.sampler.in_flight():
            self.sampler.abort(a.question_id, a.session_index)


class MixedGroupSamplingMixin:
    """Put before ``PPOTrainerSync``: ``class NeosTrainer(MixedGroupSamplingMixin, ..., PPOTrainerSync)``.

    It replaces the replay buffer (``_build_replay_buffer`` does not call verl's, so a trainer override that sets
    ``trainer_mode`` first and then calls ``super()`` still works), dispatches nothing in ``prepare_step``, binds the
    agent-loop manager in ``fit`` and adds its state to ``_save_checkpoint``/``_load_checkpoint``; nothing else needs
    calling. ``trainer.v1.sampler.custom_sampler`` and ``algorithm.filter_groups`` are refused (they pick groups too).
    With ``trainer.v1.neos.sampler.enable=false`` every hook is verl's.
    """

    def _mixed_groups(self) -> bool:
        return bool(((self.config.trainer.v1.get("neos") or {}).get("sampler") or {}).get("enable", True))

    def _build_replay_buffer(self) -> ReplayBuffer:
        if not self._mixed_groups():
            return super()._build_replay_buffer()  # type: ignore[misc]
        config = self.config
        filter_groups = config.algorithm.get("filter_groups") or {}
        if filter_groups.get("enable", False):
            raise ValueError("algorithm.filter_groups (DAPO) and Neos' mixed-group sampling both pick groups: use one")
        custom = config.trainer.v1.sampler.get("custom_sampler") or {}
        if custom.get("path") or custom.get("name"):
            raise ValueError(
                "trainer.v1.sampler.custom_sampler and Neos' mixed-group sampling both pick groups: use one"
            )
        reward_model = config.reward.reward_model
        if reward_model.enable and not reward_model.enable_resource_pool:
            raise ValueError(
                "mixed-group sampling judges each trajectory as it ends: a colocated reward model scores only after "
                "sampling; use a rule-based reward or reward.reward_model.enable_resource_pool=True"
            )
        sampler_config, poll_interval, max_deferred = mixed_group_settings(
            config, config.data.train_batch_size // self.parameter_sync_step
        )
        sampler = config.trainer.v1.sampler
        return MixedGroupReplayBuffer(
            sampler_config=sampler_config,
            next_rows=lambda: self._next_train_batch(1),
            poll_interval=poll_interval,
            max_deferred=max_deferred,
            failed_session_warn_share=failed_session_warn_share(config),
            admission=admission_settings(config),
            trainer_mode=self.trainer_mode,
            trainer_config=config.trainer.v1.get(self.trainer_mode, {}),
            max_off_policy_threshold=sampler.max_off_policy_threshold,
            max_off_policy_strategy=sampler.max_off_policy_strategy,
            sampler_kwargs=sampler.sampler_kwargs,
            refill_fn=self._add_prompts_to_generate,
        )

    def _init_dataloader(self) -> None:
        if not self._mixed_groups():
            return super()._init_dataloader()  # type: ignore[misc]
        self._one_question_per_fetch()
        super()._init_dataloader()  # type: ignore[misc]
        if self.replay_buffer.max_deferred is None:  # a whole pass over the data without B mixed groups
            self.replay_buffer.max_deferred = len(self.train_dataloader.dataset)

    def _one_question_per_fetch(self) -> None:
        """``data.gen_batch_size = 1``: the dataloader's position then matches the questions the sampler took."""
        with open_dict(self.config):
            self.config.data.gen_batch_size = 1

    def _step_once(self, metrics: dict, timing_raw: dict, sample_batch_size: int) -> KVBatchMeta:
        """verl's step; with verl's batches, the trajectories missing from the sampled groups (an agent loop raised;
        verl trains the group on the rest) are counted: ``sample_batch_size`` x ``rollout.n`` were started. (The
        sampler counts its own: ``BatchStats.aborted``.)"""
        batch = super()._step_once(metrics, timing_raw, sample_batch_size)  # type: ignore[misc]
        if not self._mixed_groups():
            started = sample_batch_size * int(self.config.actor_rollout_ref.rollout.n)
            failed = started - sessions_present(batch.keys, batch.tags)
            metrics.update(failed_session_metrics(failed, started, failed_session_warn_share(self.config)))
        return batch

    def prepare_step(self) -> dict:
        if not self._mixed_groups():
            return super().prepare_step()  # type: ignore[misc]
        return {}  # the replay buffer admits trajectories itself

    def fit(self, agent_loop_manager: Any) -> None:
        if self._mixed_groups():
            control = RayRolloutControl(agent_loop_manager, getattr(self, "checkpoint_manager", None), self._probe())
            self.replay_buffer.bind(control)
        return super().fit(agent_loop_manager)  # type: ignore[misc]

    def _probe(self) -> ReplicaProbe | None:
        """Every rollout replica's address and the load balancer, from verl's server managers."""
        managers = self._rollout_server_managers()  # type: ignore[attr-defined]
        addresses = [a for m in managers for a in (getattr(m, "server_addresses", None) or [])]
        if not addresses:
            log.warning("adaptive admission: no rollout replica addresses; the in-flight limit stays constant")
            return None
        return ReplicaProbe(addresses, getattr(managers[-1], "global_load_balancer", None))

    def _save_checkpoint(self) -> None:
        super()._save_checkpoint()  # type: ignore[misc]
        if not self._mixed_groups():
            return
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")  # verl's
        self.replay_buffer.save(os.path.join(folder, CHECKPOINT_FILE))

    def _load_checkpoint(self) -> None:
        super()._load_checkpoint()  # type: ignore[misc]
        if not self.global_steps or not self._mixed_groups():
            return  # training from scratch, or verl's batches
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        if self.config.trainer.resume_mode == "resume_path":
            folder = self.config.trainer.resume_from_path
        path = os.path.join(folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder), CHECKPOINT_FILE)
        if os.path.exists(path):
            self.replay_buffer.load(path)
        else:
            log.warning("no %s in the checkpoint: the sampler starts afresh", CHECKPOINT_FILE)
