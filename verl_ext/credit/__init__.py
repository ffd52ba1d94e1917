"""Reference-guided turn credit (Neos §3.4, App. D): judge labels -> turn weights -> bounded token advantages.

Framework-free (numpy + pydantic, no verl import) so it can be tested and reused outside the trainer.
"""

from verl_ext.credit.batch import batch_token_advantages
from verl_ext.credit.params import CreditAblation, CreditParams
from verl_ext.credit.rescale import rescale_advantages
from verl_ext.credit.schema import SCHEMA_VERSION, CreditAssessment, assessment_to_credit
from verl_ext.credit.weights import JudgeEvent, turn_weights

__all__ = [
    "SCHEMA_VERSION",
    "CreditAblation",
    "CreditAssessment",
    "CreditParams",
    "JudgeEvent",
    "assessment_to_credit",
    "batch_token_advantages",
    "rescale_advantages",
    "turn_weights",
]
