"""MEI co-evolution (Neos §3.5) inside verl's v1 trainer: retain MEI calls after every policy update, fine-tune MEI
every K updates, and make the MEI server serve the new checkpoint before the next rollout round.

After each actor update the selected batch's trajectories (their ``extra_fields``: the trajectory record with its
MEI call ids, the credit labels of judged failures) are joined to the tool server's MEI log; the selection rule of
``verl_ext.mei.selection`` picks the calls to keep and the crash-safe ``MEIBuffer`` stores them. When K policy
updates have passed and calls are pending, an MEI SFT worker group (verl's ``TrainingWorker``, vision tower frozen)
on the policy's own Ray resource pool trains one epoch from the latest MEI weights, saves an HF checkpoint and the MEI
server loads it (``/admin/load``). That happens in ``_update_actor``, before verl's ``on_step_end`` pushes the
policy weights and the next step's rollout starts, so one rollout round never sees two MEI versions and every MEI call
of a trajectory carries one version.

Config (``trainer.v1.neos.mei``): ``enable``, ``update_every`` (K, paper 10), ``log_path`` (the MEI log the tool
server writes, ``--mei-log``), ``server_url`` (the MEI server, ``python -m verl_ext.mei.server``), ``model_path`` (the
initial MEI checkpoint), ``buffer_dir`` (default ``<trainer.default_local_dir>/mei``), ``train``
(``MEITrainSettings`` fields other than ``model_path``). Resume: the buffer directory holds the MEI version, the
checkpoint it came from and the retained calls not yet trained on; ``init`` makes the MEI server serve that
checkpoint again before the first rollout.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from omegaconf import OmegaConf
from transfer_queue import KVBatchMeta

from tool_server.mei.log import BlobStore, MEILog, blobs_dir_of
from verl_ext.credit.labels import CREDIT_KEY, CreditLabels
from verl_ext.mei.buffer import MEIBuffer
from verl_ext.mei.selection import RolloutResult, select_calls
from verl_ext.rollout.admission import SUCCESS_THRESHOLD
from verl_ext.rollout.record import RECORD_KEY, TrajectoryRecord
from verl_ext.trainer.rows import selected_rows

log = logging.getLogger(__name__)


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

    def init(self) -> None:
        super().init()  # type: ignore[misc]
        cfg = self._mei_config()
        self.mei_enabled = bool(cfg.get("enable", False))
        if not self.mei_enabled:
            return
        if hasattr(self.replay_buffer, "keep_unselected_successes"):  # the mixed-group sampler's buffer
            self.replay_buffer.keep_unselected_successes = True
        from verl_ext.mei.worker import MEITrainSettings, build_worker_group

        for key in ("log_path", "server_url", "model_path"):
            if not cfg.get(key):
                raise ValueError(f"trainer.v1.neos.mei.{key} is required when MEI co-evolution is enabled")
        buffer_dir = cfg.get("buffer_dir") or os.path.join(self.config.trainer.default_local_dir, "mei")
        self.mei_buffer = MEIBuffer(buffer_dir, initial_version=str(cfg.get("initial_version", "v0")))
        self.mei_every = int(cfg.get("update_every", 10))
        self.mei_buffer.due(self.mei_every)  # validates K now rather than after the first update
        train = dict(OmegaConf.to_container(cfg.get("train") or {}, resolve=True))
        model_path = self.mei_buffer.state.checkpoint or cfg.model_path  # resume from the latest MEI weights
        self.mei_settings = MEITrainSettings(model_path=str(model_path), **train)
        # The policy's pool: the MEI SFT workers share its GPUs (Neos runs MEI on its own 8 GPUs; one pool here).
        pool = self.resource_pool_manager.get_resource_pool(self._actor_role())
        self.mei_group = build_worker_group(self.mei_settings, resource_pool=pool)
        from transformers import AutoProcessor

        self.mei_processor = AutoProcessor.from_pretrained(self.mei_settings.model_path)
        served = asyncio.run(resume_served_version(self.mei_buffer, cfg.server_url))
        if served is not None:
            log.info("MEI server now serves the resumed %s (%s)", served, self.mei_buffer.state.checkpoint)
        log.info("MEI co-evolution on: version %s, K=%d, buffer %s", self.mei_buffer.state.mei_version,
                 self.mei_every, buffer_dir)

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
        read = MEILog.read(self._mei_config().log_path)  # the tool server appends; a torn last line is skipped
        selection = select_calls(results, read.records)
        added = self.mei_buffer.add(selection.retained, BlobStore(blobs_dir_of(self._mei_config().log_path)))
        metrics["mei/retained_calls"] = float(added)
        for key, count in selection.counts.items():
            metrics[f"mei/selection/{key}"] = float(count)

    def _update_mei(self, metrics: dict[str, Any]) -> None:
        from verl_ext.mei.server import activate
        from verl_ext.mei.sft import tokenize_calls
        from verl_ext.mei.worker import train_mei

        pending = self.mei_buffer.pending()
        tokenized = tokenize_calls([b.call for b in pending.calls], self.mei_buffer.blobs, self.mei_processor,
                                   max_length=self.mei_settings.max_seq_len)
        for kind, count in tokenized.skipped.items():
            metrics[f"mei/skipped/{kind}"] = float(count)
        if len(tokenized.items) < self.mei_group.world_size * self.mei_settings.micro_batch_size_per_gpu:
            log.warning("MEI update due but only %d usable calls: kept for the next one", len(tokenized.items))
            return
        version = f"v{self.mei_buffer.state.mei_updates + 1}"
        update = train_mei(self.mei_group, tokenized.items, version, out_dir=self.mei_buffer.root / "checkpoints",
                           pad_token_id=self.mei_processor.tokenizer.pad_token_id,
                           global_batch_size=self.mei_settings.global_batch_size,
                           micro_batch_size=self.mei_settings.micro_batch_size_per_gpu)
        served = asyncio.run(activate(self._mei_config().server_url, update.checkpoint_dir, version))
        self.mei_buffer.mark_mei_update(served, end_offset=pending.end_offset, checkpoint=str(update.checkpoint_dir))
        metrics.update(update.metrics)
        log.info("MEI %s trained on %d calls and now served (loss %.4f)", served, len(tokenized.items),
                 update.metrics["mei/loss"])
