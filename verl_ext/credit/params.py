"""Hyperparameters of reference-guided turn credit (Neos Table 12) and the Table 5 ablation rows."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass


class CreditAblation(str, enum.Enum):
    """Rows of Neos Table 5, each adding one component to the row before it.

    ``OUTCOME_ONLY``     every turn weight is 0, so N = 0 and every token keeps the plain GRPO advantage.
    ``PRODUCTIVE_ONLY``  productive turns get λ_p·c; every other turn keeps the outcome penalty (w = −1, i.e. A_i).
                         Judge events are ignored. (With w = 0 elsewhere N would be 0 and the row would equal GRPO.)
    ``FIRST_ERROR``      Eq. 3 with only the chronologically first critical event penalised; no downstream
                         inheritance, recovery turns are neutral (they still close the branch).
    ``DOWNSTREAM``       + unannotated turns after the active error get the decayed downstream penalty.
    ``CORRECTIVE``       + recovery turns get λ_c·c.
    ``FULL``             + every later critical event (re_derailment, further causal_error) is penalised and
                         restarts propagation: the complete Eq. 3.
    """

    OUTCOME_ONLY = "outcome_only"
    PRODUCTIVE_ONLY = "productive_only"
    FIRST_ERROR = "first_error"
    DOWNSTREAM = "downstream"
    CORRECTIVE = "corrective"
    FULL = "full"

    def includes(self, component: CreditAblation) -> bool:
        """Whether this row contains ``component`` (rows are cumulative in declaration order)."""
        return _ROWS.index(self) >= _ROWS.index(component)


_ROWS = tuple(CreditAblation)


@dataclass(frozen=True)
class CreditParams:
    """Eq. 3 and Eq. 7 constants; defaults are Neos Table 12, ranges are those of Neos Appendix D."""

    kappa_e: float = 0.5  # critical-error floor κ_e ∈ (0, 1]
    kappa_d: float = 0.25  # downstream floor κ_d ∈ (0, 1]
    lambda_d: float = 0.5  # downstream strength λ_d ∈ [0, 1]
    gamma: float = 0.65  # downstream decay γ ∈ (0, 1)
    lambda_c: float = 0.3  # corrective weight λ_c ≥ λ_p
    lambda_p: float = 0.1  # productive weight λ_p ∈ (0, λ_c]
    M: float = 4.0  # negative amplification cap, ≥ 1
    eta: float = 0.02  # negative margin η > 0
    ablation: CreditAblation = CreditAblation.FULL

    def __post_init__(self) -> None:
        for name in ("kappa_e", "kappa_d", "lambda_d", "gamma", "lambda_c", "lambda_p", "M", "eta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"CreditParams.{name} must be a finite number, got {value!r}")
        checks = (
            (0 < self.kappa_e <= 1, "kappa_e must lie in (0, 1]"),
            (0 < self.kappa_d <= 1, "kappa_d must lie in (0, 1]"),
            (0 <= self.lambda_d <= 1, "lambda_d must lie in [0, 1]"),
            (0 < self.gamma < 1, "gamma must lie in (0, 1)"),
            (0 < self.lambda_p <= self.lambda_c, "need 0 < lambda_p <= lambda_c"),
            (self.M >= 1, "M must be >= 1"),
            (self.eta > 0, "eta must be > 0"),
        )
        for ok, message in checks:
            if not ok:
                raise ValueError(f"CreditParams: {message} (got {self})")
        # Accept the plain string a Hydra config carries ("full", "downstream", ...).
        object.__setattr__(self, "ablation", CreditAblation(self.ablation))
