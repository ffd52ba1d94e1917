"""The ``neos`` v1 trainer (``trainer.v1.trainer_mode=neos``): verl's synchronous PPO trainer plus Neos' parts.

- Adaptive mixed-group sampling: ``MixedGroupSamplingMixin`` replaces the replay buffer with Neos' sampler (batches of
  B mixed-outcome groups, surplus cancelled at the policy boundary, failures judged while the rest still run).
- Turn credit: ``TurnCreditAdvantageMixin`` hands each row's judge labels (put beside the trajectory by
  ``NeosAgentLoopManagerTQ`` while the rest of the rollout runs) to the ``neos_turn_credit`` estimator.
- MEI co-evolution: ``MEICoEvolutionMixin`` retains MEI calls after each update and fine-tunes MEI every K updates.
- Diagnostics: the selected batch's tool-call mix, credit-type composition and mixed-group share
  (``verl_ext.trainer.metrics``).
- The policy's vision tower frozen (Neos, Appendix C): verl reads ``actor.freeze_vision_tower`` nowhere, so the
  trainer refuses a config whose engine would not do what that key says (``verl_ext.models.freeze``).
- Everything else is verl's ``PPOTrainerSync``: colocated rollout and training, weights pushed after each step.

verl branches on ``trainer_mode == "sync"`` for its on-policy semantics (no TransferQueue checkpoint, no re-issued
prompts, weights pushed every step). Neos is on-policy (Neos App. B, "policy boundary"), so the trainer runs those
branches under its own registered name.
"""

from __future__ import annotations

import logging

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from verl_ext.advantage.estimator import credit_params_from_config
from verl_ext.advantage.trainer_mixin import TurnCreditAdvantageMixin
from verl_ext.models.freeze import vision_freeze_caveat, vision_freeze_gap
from verl_ext.trainer.mei_coevolution import MEICoEvolutionMixin
from verl_ext.trainer.metrics import batch_metrics, group_metrics
from verl_ext.trainer.mixed_groups import MixedGroupSamplingMixin
from verl_ext.trainer.rows import selected_groups, selected_rows

TRAINER_NAME = "neos"

log = logging.getLogger(__name__)


@register_trainer(TRAINER_NAME)
class NeosTrainer(MixedGroupSamplingMixin, MEICoEvolutionMixin, TurnCreditAdvantageMixin, PPOTrainerSync):
    def __init__(self, config, *args, **kwargs):
        if gap := vision_freeze_gap(config):  # before any worker exists: a silently trained tower is a wrong run
            raise ValueError(gap)
        if caveat := vision_freeze_caveat(config):
            log.warning(caveat)
        super().__init__(config, *args, **kwargs)

    def _build_replay_buffer(self):
        self.trainer_mode = "sync"  # read by verl right after this call and in every later branch: see module doc
        return super()._build_replay_buffer()

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        rows, _ = selected_rows(batch)
        metrics.update(batch_metrics(rows, credit_params_from_config(self.config.algorithm)))
        metrics.update(group_metrics(*selected_groups(batch)))
        return super()._compute_metrics(batch, metrics, timing_raw, global_steps=global_steps, epoch=epoch)
