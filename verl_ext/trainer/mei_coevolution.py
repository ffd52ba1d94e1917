"""MEI co-evolution (Neos §3.5, Appendix C.3) inside verl's v1 trainer: retain MEI calls after every policy update,
fine-tune MEI every K updates, and make the MEI server and the tool server use the new checkpoint before the next
rollout round.

After each actor update every completed trajectory of the round (the selected batch, plus the successes the
mixed-group sampler did not select: all-success and deferred groups, carried groups, surplus samples) is joined to
the tool server's MEI log by call id; the paper's rule (``verl_ext.mei.selection``: all valid calls of successes, and
of failures selected for optimisation only the calls at productive or corrective turns) picks the calls to keep and
the crash-safe ``MEIBuffer`` stores them. When K policy updates have passed and calls are pending, an MEI SFT worker
group (verl's ``TrainingWorker`` on the policy's engine, FSDP or Megatron; vision tower frozen) trains one epoch from
the latest MEI weights, saves an HF checkpoint, the MEI server loads it (``/admin/load``) and the tool server is told
the new version (``/admin/mei_version``). That happens in ``_update_actor``, before verl's ``on_step_end`` pushes the
policy weights and the next step's rollout starts.

One version per trajectory: the tool server fixes each session to the version active when it was created and keys
MEI-backed cache entries by it (``tool_server.tools``); each round's MEI versions, as the trajectory records hold them
per call, are counted (``mei/round_versions`` must be 1, ``mei/round_unexpected_version_calls`` 0; a warning
otherwise).

Placement (``pool``): ``shared`` (default) puts the MEI SFT workers on the policy's resource pool, their weights and
Adam state offloaded to host memory between updates; ``dedicated`` gives them a Ray resource pool of their own,
``n_gpus_per_node`` x ``nnodes`` GPUs (the paper: 8 of 40 for MEI serving and SFT), added to verl's pool spec so
verl's resource check counts it; with ``serve.enable`` the trainer starts the MEI server (vLLM) on its first GPU
beside the SFT workers.

Config (``trainer.v1.neos.mei``): ``enable``, ``update_every`` (K, paper 10), ``log_path`` (the MEI log the tool
server writes, ``--mei-log``), ``server_url`` (the MEI server), ``tool_server_url`` (default
``actor_rollout_ref.rollout.custom.neos_rollout.tool_server_url``), ``model_path`` (the initial MEI checkpoint),
``initial_version`` (the version the MEI server serves it as, default ``v0``), ``buffer_dir`` (default
``<trainer.default_local_dir>/mei``), ``pool``, ``n_gpus_per_node``, ``nnodes``, ``serve`` (start the MEI server on
the dedicated pool: ``verl_ext.mei.serving``), ``train`` (``MEITrainSettings`` fields
other than ``model_path``; ``engine`` defaults to the policy's), ``max_skipped_updates`` (default 3: the run fails once
that many due MEI updates in a row had no usable retained call; null lets it train on without MEI updates). At start
every tool server must answer with a model MEI (``verl_ext.mei.server.announce`` refuses an extractive one). Resume: the
buffer directory holds the MEI version, the checkpoint it came from and the retained calls not yet trained on; ``init``
makes the MEI server serve that checkpoint again and tells the tool server before the first rollout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from typing import Any

from omegaconf import DictConfig, OmegaConf
from transfer_queue import KVBatchMeta

from tool_server.mei.log import BlobStore, MEILog, blobs_dir_of
from verl_ext.credit.labels import CREDIT_KEY, CreditLabels
from verl_ext.mei.buffer import MEIBuffer
from verl_ext.mei.selection import RolloutResult, select_calls
from verl_ext.rollout.admission import SUCCESS_THRESHOLD
from verl_ext.rollout.record import RECORD_KEY, TrajectoryRecord
from verl_ext.trainer.rows import selected_rows

log = logging.getLogger(__name__)
MEI_POOL = "neos_mei_pool"
PLACEMENTS = ("shared", "dedicated")


def rollout_results(rows: list[dict[str, Any]], successes: list[bool], *, selected: bool) -> list[RolloutResult]:
    """Rows (their ``extra_fields``) and outcomes -> what MEI selection needs; rows without a trajectory record
    (another agent loop) are left out."""
    results = []
    for extra, success in zip(rows, successes, strict=True):
        record = (extra or {}).get(RECORD_KEY)
        if record is None:
            continue
        labels = (extra or {}).get(CREDIT_KEY)
        results.append(
            RolloutResult(
                record=TrajectoryRecord.model_validate(record),
                success=success,
                selected=selected,
                labels=CreditLabels.model_validate(labels) if labels is not None else None,
            )
        )
    return results


def version_mix(results: list[RolloutResult], expected: str) -> dict[str, float]:
    """The round's MEI versions as its records hold them per call: how many distinct ones (1 when the round used
    one MEI), and the calls served under another version than ``expected`` (the one the trainer activated)."""
    calls = Counter(v for r in results for turn in r.record.turns for call in turn.calls for v in call.mei_versions)
    return {"mei/round_versions": float(len(calls)),
            "mei/round_unexpected_version_calls": float(sum(n for v, n in calls.items() if v != expected))}


def mei_placement(mei: DictConfig) -> str:
    placement = str(mei.get("pool", "shared"))
    if placement not in PLACEMENTS:
        raise ValueError(f"trainer.v1.neos.mei.pool must be one of {PLACEMENTS}, got {placement!r}")
    return placement


def mei_pool_spec(mei: DictConfig) -> list[int]:
    """GPUs per node of the dedicated MEI pool (verl's ``resource_pool_spec`` shape); the paper's 8 by default."""
    per_node, nodes = int(mei.get("n_gpus_per_node", 8)), int(mei.get("nnodes", 1))
    if per_node < 1 or nodes < 1:
        raise ValueError(f"trainer.v1.neos.mei.n_gpus_per_node and nnodes must be >= 1, got {per_node}, {nodes}")
    return [per_node] * nodes


def max_skipped_updates(mei: DictConfig) -> int | None:
    """``max_skipped_updates``: None (never fail) or a count >= 1."""
    value = mei.get("max_skipped_updates", 3)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"trainer.v1.neos.mei.max_skipped_updates must be an integer >= 1 or null, got {value!r}")
    return value


def mei_train_settings(config: DictConfig, model_path: str) -> Any:
    """``MEITrainSettings`` from ``trainer.v1.neos.mei.train``, on the policy's engine unless ``train.engine`` says
    otherwise, with the offload defaults of the placement."""
    from verl_ext.mei.worker import MEITrainSettings

    mei = config.trainer.v1.neos.mei
    train = mei.get("train")
    train = dict(OmegaConf.to_container(train, resolve=True)) if train is not None else {}
    policy_engine = "megatron" if config.actor_rollout_ref.actor.strategy == "megatron" else "fsdp"
    train.setdefault("engine", policy_engine)
    return MEITrainSettings(model_path=str(model_path), **train).placed(mei_placement(mei))


async def resume_served_version(buffer: MEIBuffer, server_url: str) -> str | None:
    """On resume, make the MEI server serve the buffer's latest MEI checkpoint (a restarted server starts from the
    initial one); returns the served version, or None before the first MEI update."""
    from verl_ext.mei.server import activate

    if not buffer.state.checkpoint:
        return None
    return await activate(server_url, buffer.state.checkpoint, buffer.state.mei_version)


class MEICoEvolutionMixin:
    """Put before verl's trainer class in the bases (``NeosTrainer``); a no-op unless ``...neos.mei.enable``."""

    def _mei_config(self) -> Any:
        return (self.config.trainer.v1.get("neos") or {}).get("mei") or OmegaConf.create({"enable": False})

    def _init_resource_pool_mgr(self) -> None:
        """verl's pools, plus the dedicated MEI pool when asked for (so verl's resource check counts its GPUs)."""
        super()._init_resource_pool_mgr()  # type: ignore[misc]
        cfg = self._mei_config()
        if cfg.get("enable", False) and mei_placement(cfg) == "dedicated":
            self.resource_pool_manager.resource_pool_spec[MEI_POOL] = mei_pool_spec(cfg)

    def _mei_resource_pool(self) -> Any:
        manager = self.resource_pool_manager
        if mei_placement(self._mei_config()) == "dedicated":
            return manager.resource_pool_dict[MEI_POOL]
        return manager.get_resource_pool(self._actor_role())

    def init(self) -> None:
        super().init()  # type: ignore[misc]
        cfg = self._mei_config()
        self.mei_enabled = bool(cfg.get("enable", False))
        if not self.mei_enabled:
            return
        if hasattr(self.replay_buffer, "keep_unselected_successes"):  # the mixed-group sampler's buffer
            self.replay_buffer.keep_unselected_successes = True
        from verl_ext.mei.server import announce, served_version
        from verl_ext.mei.worker import build_worker_group
        from verl_ext.rollout.tool_fleet import deploy_configured

        deploy_configured(self.config)  # tool servers deployed by the job: their addresses are the ones to tell
        self.mei_tool_server_url = cfg.get("tool_server_url") or OmegaConf.select(
            self.config, "actor_rollout_ref.rollout.custom.neos_rollout.tool_server_url")
        for key, value in (("log_path", cfg.get("log_path")), ("server_url", cfg.get("server_url")),
                           ("model_path", cfg.get("model_path")), ("tool_server_url", self.mei_tool_server_url)):
            if not value:
                raise ValueError(f"trainer.v1.neos.mei.{key} is required when MEI co-evolution is enabled")
        buffer_dir = cfg.get("buffer_dir") or os.path.join(self.config.trainer.default_local_dir, "mei")
        self.mei_buffer = MEIBuffer(buffer_dir, initial_version=str(cfg.get("initial_version", "v0")))
        self.mei_every = int(cfg.get("update_every", 10))
        self.mei_buffer.due(self.mei_every)  # validates K now rather than after the first update
        self.mei_max_skipped = max_skipped_updates(cfg)
        model_path = self.mei_buffer.state.checkpoint or cfg.model_path  # resume from the latest MEI weights
        self.mei_settings = mei_train_settings(self.config, model_path)
        self.mei_group = build_worker_group(self.mei_settings, resource_pool=self._mei_resource_pool())
        from transformers import AutoProcessor

        self.mei_processor = AutoProcessor.from_pretrained(self.mei_settings.model_path)
        self.mei_server_url = self._start_mei_server(cfg, model_path)
        served = asyncio.run(resume_served_version(self.mei_buffer, self.mei_server_url))
        if served is None:  # a fresh run: the MEI server must serve the initial checkpoint as the buffer's version
            served = asyncio.run(served_version(self.mei_server_url))
            if served != self.mei_buffer.state.mei_version:
                raise ValueError(f"the MEI server at {self.mei_server_url} serves {served!r}, the run expects "
                                 f"{self.mei_buffer.state.mei_version!r} (trainer.v1.neos.mei.initial_version)")
        asyncio.run(announce(self.mei_tool_server_url, served))
        log.info("MEI co-evolution on: version %s served and announced, K=%d, pool %s (%s, %d ranks), buffer %s",
                 served, self.mei_every, mei_placement(cfg), self.mei_settings.engine, self.mei_group.world_size,
                 buffer_dir)

    def _start_mei_server(self, cfg: Any, model_path: str) -> str:
        """``serve.enable``: the MEI server on the dedicated pool, started here (its address replaces
        ``server_url``); otherwise ``server_url``, a server started outside the job."""
        from verl_ext.mei.serving import ServeSettings, start_on_pool

        serve = cfg.get("serve")
        settings = ServeSettings.model_validate(OmegaConf.to_container(serve, resolve=True) if serve else {})
        if not settings.enable:
            return str(cfg.server_url)
        if mei_placement(cfg) != "dedicated":
            raise ValueError("trainer.v1.neos.mei.serve.enable=true starts the MEI server on the dedicated MEI pool: "
                             "set trainer.v1.neos.mei.pool=dedicated, or start the server yourself (serve.enable=false)")
        self.mei_server_actor, url = start_on_pool(self._mei_resource_pool(), settings, model_path,
                                                   self.mei_buffer.state.mei_version, str(cfg.server_url))
        log.info("MEI server (%s) started on the MEI pool at %s, serving %s", settings.engine, url, model_path)
        return url

    def _actor_role(self) -> Any:
        from verl.trainer.ppo.utils import Role

        for role in (Role.ActorRolloutRef, Role.ActorRollout, Role.Actor):
            if role in self.resource_pool_manager.mapping:
                return role
        raise RuntimeError(f"no actor role in the resource pool mapping {list(self.resource_pool_manager.mapping)}")

    def _update_actor(self, batch: KVBatchMeta, metrics: dict[str, Any]) -> KVBatchMeta:
        batch = super()._update_actor(batch, metrics)  # type: ignore[misc]
        if self.mei_enabled:
            self._retain_mei_calls(batch, metrics)
            self.mei_buffer.record_policy_update()
            if self.mei_buffer.due(self.mei_every):
                self._update_mei(metrics)
            metrics["mei/version_index"] = float(self.mei_buffer.state.mei_updates)
            metrics["mei/pending_calls"] = float(len(self.mei_buffer.pending().calls))
        return batch

    def _retain_mei_calls(self, batch: KVBatchMeta, metrics: dict[str, Any]) -> None:
        """The paper's rule over every completed trajectory of the round: the selected batch first, then the
        successes the mixed-group sampler did not select (all-success, deferred and carried groups, surplus)."""
        rows, scores = selected_rows(batch)
        results = rollout_results(rows, [score >= SUCCESS_THRESHOLD for score in scores], selected=True)
        # None: verl's own buffer, whose batch is every trajectory of the round
        take = getattr(getattr(self, "replay_buffer", None), "take_unselected_successes", None)
        if take is not None:
            unselected, failures = take()
            results += rollout_results(unselected, [True] * len(unselected), selected=False)
            metrics["mei/selection/unselected_successes"] = float(len(unselected))
            metrics["mei/selection/unselected_failures"] = float(failures)
        expected = self.mei_buffer.state.mei_version
        mix = version_mix(results, expected)
        if mix["mei/round_versions"] > 1 or mix["mei/round_unexpected_version_calls"]:
            log.warning("this rollout round's MEI calls span %d versions, %d calls not under %s (the version "
                        "activated for it)", mix["mei/round_versions"], mix["mei/round_unexpected_version_calls"],
                        expected)
        metrics.update(mix)
        read = MEILog.read(self._mei_config().log_path)  # the tool server appends; a torn last line is skipped
        selection = select_calls(results, read.records)
        added = self.mei_buffer.add(selection.retained, BlobStore(blobs_dir_of(self._mei_config().log_path)))
        metrics["mei/retained_calls"] = float(added)
        for key, count in selection.counts.items():
            metrics[f"mei/selection/{key}"] = float(count)

    def _skip_mei_update(self, metrics: dict[str, Any], end_offset: int, pending: int, unusable: Counter[str]) -> None:
        """A due update without one usable call: counted, warned, its calls dropped; the run fails once
        ``max_skipped_updates`` updates in a row were skipped, as MEI would then never co-evolve."""
        reason = "no_usable_calls" if pending else "no_retained_calls"
        self.mei_buffer.skip_update(end_offset=end_offset)
        skipped = self.mei_buffer.state.skipped_updates
        metrics["mei/update_skipped"] = 1.0
        metrics[f"mei/update_skipped/{reason}"] = 1.0
        metrics["mei/dropped_calls"] = float(pending)
        why = (f"{pending} retained calls, none usable ({', '.join(f'{k} {n}' for k, n in sorted(unusable.items()))})"
               if pending else "no call was retained since the last update")
        log.warning("MEI update skipped (%s): %s; MEI stays at %s (%d skipped in a row)", reason, why,
                    self.mei_buffer.state.mei_version, skipped)
        if self.mei_max_skipped is not None and skipped >= self.mei_max_skipped:
            raise RuntimeError(
                f"MEI co-evolution stalled: {skipped} MEI updates in a row were skipped ({why}). Retained calls come "
                "from valid model-MEI calls in trainer.v1.neos.mei.log_path (the tool server's --mei-log) of the "
                "round's trajectories: check the tool server writes that log with --mei-endpoint, and raise "
                "trainer.v1.neos.mei.train.max_seq_len for too_long calls; set trainer.v1.neos.mei.max_skipped_updates"
                "=null to train on without MEI updates")

    def _update_mei(self, metrics: dict[str, Any]) -> None:
        from verl_ext.mei.server import activate, announce
        from verl_ext.mei.sft import tokenize_calls
        from verl_ext.mei.worker import train_mei

        start = time.perf_counter()
        pending = self.mei_buffer.pending()
        tokenized = tokenize_calls([b.call for b in pending.calls], self.mei_buffer.blobs, self.mei_processor,
                                   max_length=self.mei_settings.max_seq_len)
        for kind, count in tokenized.skipped.items():
            metrics[f"mei/skipped/{kind}"] = float(count)
        if not tokenized.items:
            self._skip_mei_update(metrics, pending.end_offset, len(pending.calls), tokenized.skipped)
            return
        metrics["mei/update_skipped"] = 0.0
        reasons = {b.call.call_id: b.reason for b in pending.calls}
        for reason, count in Counter(reasons[i] for i in tokenized.call_ids).items():
            metrics[f"mei/update/calls_{reason}"] = float(count)  # the update's examples by source
        version = self.mei_buffer.next_version()
        update = train_mei(self.mei_group, tokenized.items, version, out_dir=self.mei_buffer.root / "checkpoints",
                           pad_token_id=self.mei_processor.tokenizer.pad_token_id,
                           global_batch_size=self.mei_settings.global_batch_size,
                           micro_batch_size=self.mei_settings.micro_batch_size_per_gpu,
                           model_parallel_size=self.mei_settings.model_parallel_size)
        served = asyncio.run(activate(self.mei_server_url, update.checkpoint_dir, version))
        asyncio.run(announce(self.mei_tool_server_url, served))
        self.mei_buffer.mark_mei_update(served, end_offset=pending.end_offset, checkpoint=str(update.checkpoint_dir))
        metrics.update(update.metrics)
        metrics["mei/update/version"] = float(self.mei_buffer.state.mei_updates)
        metrics["mei/update/seconds"] = time.perf_counter() - start  # tokenising, training, saving, activating
        log.info("MEI %s trained on %d calls (%s) and now served (loss %.4f, %.1f s)", served, len(tokenized.items),
                 ", ".join(f"{k.rsplit('_', 1)[1]} {int(v)}" for k, v in metrics.items()
                           if k.startswith("mei/update/calls_")), update.metrics["mei/loss"],
                 metrics["mei/update/seconds"])
