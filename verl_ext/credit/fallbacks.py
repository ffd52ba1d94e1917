"""Failures that train on plain GRPO instead of turn credit, counted per reason, and the warning when they are many.

Turn credit degrades silently: a judge that times out, answers garbage or runs out of output budget leaves its
failure ``assessed=False`` and the estimator gives it the plain outcome advantage A_i, so training goes on as GRPO
(Neos Table 5's outcome-only row) without a visible error. Every such failure is counted here by reason, and a share
above ``max_fallback_share`` (``algorithm.neos_credit.max_fallback_share``) yields one warning per step. No verl import.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

METRIC_PREFIX = "neos_credit/"
MAX_FALLBACK_SHARE_KEY = "max_fallback_share"
# One failure in ten trained as GRPO. A judge at temperature 0 with repairs falls back on a few per cent at most; at
# the paper's batch (64 groups x 8 rollouts, some 250 failures judged per step) binomial noise around such a rate is
# about one point, so 10% is a real fault (a too small output budget or an overloaded judge sends it towards 100%),
# while still low enough to flag a partial outage before the run has trained for long on Table 5's outcome-only row.
DEFAULT_MAX_FALLBACK_SHARE = 0.1

# Reasons the estimator itself adds to the judges' own (``CreditJudge``: invalid, truncated, bad_body, timeout, http,
# error; ``OfflinePathJudge``: no_task_path).
UNJUDGED = "unjudged"  # a failure of a mixed group that reached the estimator with no labels at all
LABEL_TURNS = "label_turns"  # labelled for another number of turns than its response_mask has
LABEL_RULES = "label_rules"  # labels that break an input rule of Eq. 3
POSITIVE_ADVANTAGE = "positive_advantage"  # labelled, but its outcome advantage is > 0: not a failure
_KEY = re.compile(r"[^a-z0-9_]+")


@dataclass
class FallbackCount:
    """Failures meant for turn credit in one batch (``judged``) and, by reason, those that fell back to GRPO."""

    judged: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, reasons: Iterable[str]) -> None:
        self.reasons.update(_KEY.sub("_", r.lower()).strip("_") or "unknown" for r in reasons)

    @property
    def fallbacks(self) -> int:
        return sum(self.reasons.values())

    def share(self) -> float:
        return self.fallbacks / self.judged if self.judged else 0.0

    def metrics(self) -> dict[str, float]:
        """``neos_credit/judged_failures``, ``neos_credit/fallback_share`` (of the judged failures) and
        ``neos_credit/fallback/<reason>`` (each reason's share; they sum to the fallback share)."""
        out = {f"{METRIC_PREFIX}judged_failures": float(self.judged), f"{METRIC_PREFIX}fallback_share": self.share()}
        for reason, n in sorted(self.reasons.items()):
            out[f"{METRIC_PREFIX}fallback/{reason}"] = n / self.judged if self.judged else 0.0
        return out

    def warning(self, max_share: float) -> str | None:
        """The warning to log when the fallback share exceeds ``max_share``, else None."""
        if self.share() <= max_share:
            return None
        top = ", ".join(f"{r} {n}" for r, n in self.reasons.most_common())
        return (
            f"turn credit fell back to plain GRPO for {self.fallbacks} of {self.judged} judged failures "
            f"({self.share():.0%} > algorithm.neos_credit.{MAX_FALLBACK_SHARE_KEY} = {max_share:.0%}); reasons: {top}. "
            "Check the credit judge (endpoint, timeout_s, max_tokens) and the neos_credit/fallback/* metrics"
        )


def max_fallback_share(value: object) -> float:
    """The configured threshold (None: :data:`DEFAULT_MAX_FALLBACK_SHARE`), checked to lie in [0, 1]."""
    if value is None:
        return DEFAULT_MAX_FALLBACK_SHARE
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"algorithm.neos_credit.{MAX_FALLBACK_SHARE_KEY} must be a number in [0, 1], got {value!r}")
    return float(value)
