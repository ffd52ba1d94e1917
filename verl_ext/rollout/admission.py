"""The contract between mixed-group sampling (the trainer's replay buffer) and the agent-loop worker that runs single
sessions (``verl_ext.rollout.tq_worker``): the row key naming the sessions to run, the TransferQueue partition and
status-tag key, and the success threshold both sides apply to the outcome reward.

Its own module, importing nothing, because the two sides import each other's package through verl's plugin load: a
Ray worker that unpickles ``tq_worker`` first runs ``import verl`` while ``tq_worker`` is half-initialised, the
plugin imports the trainer, and the trainer must not need ``tq_worker`` then.
"""

SESSIONS_KEY = "__session_ids__"
SUCCESS_THRESHOLD = 0.5  # the outcome reward at or above which a trajectory counts as a success (GroupAssessor's)
TRAIN = "train"


def admission_key(uid: str, session: int) -> str:
    """TransferQueue key of a mixed-group session's status tag (its trajectories are ``{uid}_{session}_{i}``)."""
    return f"{uid}-{session}"
