"""Per-update diagnostics of the selected batch that verl does not log (Neos Figs. 6 and 9): the tool-call mix, what
the policy's turns drew (format and call errors, how episodes ended) and the credit-type composition of the judged
failures' turns. verl already logs the rest of Neos App. B's list (Fig. 8): the batch reward
(``critic/score/mean``), the dual-clipped share (``actor/pg_clipfrac_lower``), grad norm, rollout and update time
(``timing_s/gen``, ``timing_s/update_actor``). And the trajectories lost to a raising agent loop
(``neos_rollout/failed_sessions``), which verl only logs."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from verl_ext.credit.labels import CREDIT_KEY, CREDIT_TYPES, CreditLabels
from verl_ext.credit.params import CreditParams
from verl_ext.rollout.admission import SUCCESS_THRESHOLD
from verl_ext.rollout.record import RECORD_KEY

log = logging.getLogger(__name__)
FAILED_SESSIONS = "neos_rollout/failed_sessions"
FAILED_SESSION_SHARE = "neos_rollout/failed_session_share"
# Above this share of a batch's trajectories lost to a raising agent loop, a warning is logged: a few are infra noise,
# more than one in twenty means a broken tool server, processor or reward and a batch that trains on what is left.
DEFAULT_FAILED_SESSION_WARN_SHARE = 0.05


def failed_session_warn_share(config: Any) -> float:
    """``trainer.v1.neos.failed_session_warn_share`` (default 0.05), in [0, 1]."""
    neos = config.trainer.v1.get("neos") or {}
    value = float(neos.get("failed_session_warn_share", DEFAULT_FAILED_SESSION_WARN_SHARE))
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"trainer.v1.neos.failed_session_warn_share must be in [0, 1], got {value}")
    return value


def failed_session_metrics(failed: int, started: int, warn_share: float) -> dict[str, float]:
    """``neos_rollout/failed_sessions`` (trajectories whose agent loop raised, so they have no rows) and their share
    of the ``started`` ones; a warning when the share exceeds ``warn_share``."""
    share = failed / started if started else 0.0
    if share > warn_share:
        log.warning(
            "%d of %d trajectories (%.1f%%) ended with an agent-loop error and are missing from the batch (over the "
            "%.1f%% of trainer.v1.neos.failed_session_warn_share): see the rollout workers' logs",
            failed, started, 100 * share, 100 * warn_share,
        )
    return {FAILED_SESSIONS: float(failed), FAILED_SESSION_SHARE: share}


def sessions_present(keys: Iterable[str], tags: Iterable[dict[str, Any]]) -> int:
    """Distinct trajectories among TransferQueue keys ``{uid}_{session}_{output}`` (padding rows skipped; no tags:
    none is padding)."""
    keys = list(keys)
    tags = list(tags) or [{}] * len(keys)
    return len({key.rsplit("_", 1)[0] for key, tag in zip(keys, tags, strict=True) if not tag.get("is_padding")})


def batch_metrics(rows: Sequence[dict[str, Any] | None], params: CreditParams) -> dict[str, float]:
    """``neos_tools/calls_per_trajectory/<tool>`` and ``neos_rollout/turn_errors_per_trajectory/<error type>`` (the
    format or call errors the policy's turns drew: what says why a run made no tool call) over rows with a trajectory
    record, ``neos_rollout/termination_share/<reason>`` over the same, ``neos_rollout/turn_outcome_share/<outcome>``
    over their turns (``call_ok`` + ``call_error``: the share of turns that were well-formed calls, what a warm start
    is judged by), ``neos_credit/turn_share/<type>`` over the
    turns of assessed failures and ``neos_reward/judge_fallback_share`` over the answers sent to the LLM answer judge
    (each absent when there are none)."""
    calls: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    endings: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    types: Counter[str] = Counter()
    trajectories = llm_judged = judge_fallbacks = 0
    for extra in rows:
        extra = extra or {}
        reward_info = extra.get("reward_extra_info") or {}
        if reward_info.get("judge") in ("llm", "rule_fallback"):  # answers the LLM answer judge was asked about
            llm_judged += 1
            judge_fallbacks += reward_info["judge"] == "rule_fallback"
        record = extra.get(RECORD_KEY)
        if record is not None:
            trajectories += 1
            calls.update(call["tool_name"] for turn in record["turns"] for call in turn["calls"])
            errors.update(turn["error_type"] for turn in record["turns"] if turn.get("error_type"))
            endings[record["termination_reason"]] += 1
            outcomes.update(turn["outcome"] for turn in record["turns"])
        labels = extra.get(CREDIT_KEY)
        if labels is not None:
            labels = CreditLabels.model_validate(labels)
            if labels.assessed:
                types.update(labels.turn_types(params))
    out = {f"neos_tools/calls_per_trajectory/{tool}": n / trajectories for tool, n in calls.items()}
    out.update({f"neos_rollout/turn_errors_per_trajectory/{kind}": n / trajectories for kind, n in errors.items()})
    out.update({f"neos_rollout/termination_share/{reason}": n / trajectories for reason, n in endings.items()})
    turns = sum(outcomes.values())
    out.update({f"neos_rollout/turn_outcome_share/{outcome}": n / turns for outcome, n in outcomes.items()})
    if llm_judged:  # the answer judge's rule fallbacks (each process also warns: verl_ext.reward.judge)
        out["neos_reward/judge_fallback_share"] = judge_fallbacks / llm_judged
    total = sum(types.values())
    if total:
        out.update({f"neos_credit/turn_share/{kind}": types[kind] / total for kind in CREDIT_TYPES})
    return out


def group_metrics(groups: Sequence[str], scores: Sequence[float]) -> dict[str, float]:
    """``neos_groups/{mixed,all_success,all_failure}_share``: the batch's groups (rows of one uid) by outcome mix.
    Only a mixed group gives GRPO a non-zero advantage (and turn credit a success to judge failures against), so its
    share says how much of a batch trains; the sampler's own ``neos_sampler/*`` count only when it is on."""
    outcomes: dict[str, set[bool]] = {}
    for group, score in zip(groups, scores, strict=True):
        outcomes.setdefault(group, set()).add(score >= SUCCESS_THRESHOLD)
    if not outcomes:
        return {}
    n = len(outcomes)
    return {"neos_groups/mixed_share": sum(len(o) == 2 for o in outcomes.values()) / n,
            "neos_groups/all_success_share": sum(o == {True} for o in outcomes.values()) / n,
            "neos_groups/all_failure_share": sum(o == {False} for o in outcomes.values()) / n}
