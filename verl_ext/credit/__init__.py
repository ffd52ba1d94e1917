"""Reference-guided turn credit (Neos §3.4, App. D): judge labels -> turn weights -> bounded token advantages.

Framework-free (numpy + pydantic, no verl import) so it can be tested and reused outside the trainer. The judges
(``judge``: LLM over HTTP, ``offline_judge``: path heuristic) are imported from their modules.
"""

from verl_ext.credit.batch import batch_token_advantages, run_token_advantages
from verl_ext.credit.labels import CREDIT_KEY, CreditLabels, labels_from_assessment, unassessed
from verl_ext.credit.params import CreditAblation, CreditParams
from verl_ext.credit.rescale import rescale_advantages
from verl_ext.credit.runs import MaskRuns, mask_runs
from verl_ext.credit.schema import SCHEMA_VERSION, CreditAssessment, assessment_to_credit
from verl_ext.credit.weight_table import WeightTable
from verl_ext.credit.weights import JudgeEvent, turn_weights

__all__ = [
    "CREDIT_KEY",
    "SCHEMA_VERSION",
    "CreditAblation",
    "CreditAssessment",
    "CreditLabels",
    "CreditParams",
    "JudgeEvent",
    "MaskRuns",
    "WeightTable",
    "assessment_to_credit",
    "batch_token_advantages",
    "labels_from_assessment",
    "mask_runs",
    "rescale_advantages",
    "run_token_advantages",
    "turn_weights",
    "unassessed",
]
