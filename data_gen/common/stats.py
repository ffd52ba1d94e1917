"""Rejection rates per filter and throughput per stage, the figures both pipelines' ``stats.json`` report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


# No answer above 3% of a run (under --limit), and never more than this many tasks on one answer: a seed's
# structures are variations of each other, and a run that repeats its answers teaches a policy its answer prior.
MAX_ANSWER_SHARE = 0.03
MAX_TASKS_PER_ANSWER = 3


def answer_cap(limit: int | None) -> int:
    """Verified tasks allowed per answer: 3% of ``--limit`` (at least one), at most ``MAX_TASKS_PER_ANSWER``."""
    if limit is None:
        return MAX_TASKS_PER_ANSWER
    return max(1, min(MAX_TASKS_PER_ANSWER, int(MAX_ANSWER_SHARE * limit)))


def answer_type_cap(limit: int | None, share: float, minimum: int = 1) -> int | None:
    """Verified tasks allowed per answer type (city, river, ...): ``share`` of ``--limit``, at least ``minimum``;
    None (no cap) without a limit, where no share of the run is known. Each pipeline sets its share: the world holds
    far more of some kinds than of others, and a run of capitals teaches one question form, however many distinct
    capitals it names."""
    return None if limit is None else max(minimum, int(share * limit))


# The filters the caps below reject by, in both pipelines' ``filters`` of ``stats.json``.
SHARE_FILTERS = ("answer_share", "answer_type_share")


@dataclass
class Shares:
    """Verified tasks per answer and per answer type, against their caps (``type_cap`` None: no cap). Both pipelines
    check a task here before its probes or expert run: a task over its share is not worth a tool-server episode."""

    cap: int
    type_cap: int | None
    per_answer: Counter[str] = field(default_factory=Counter)
    per_type: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of_run(cls, limit: int | None, type_share: float, min_type_cap: int = 1) -> Shares:
        """The caps of a run under ``--limit`` (``answer_cap``, ``answer_type_cap``)."""
        return cls(answer_cap(limit), answer_type_cap(limit, type_share, min_type_cap))

    def count(self, answer: str, kind: str) -> None:
        """One more verified task answering ``answer``, of type ``kind``."""
        self.per_answer[answer] += 1
        self.per_type[kind] += 1

    def full(self) -> frozenset[str]:
        """The answer types at their cap: one more task of any of them would be over its share."""
        if self.type_cap is None:
            return frozenset()
        return frozenset(k for k, n in self.per_type.items() if n >= self.type_cap)

    def over(self, answer: str, kind: str, shown: str | None = None) -> tuple[str, str] | None:
        """``(filter, detail)`` when one more task answering ``answer`` (written ``shown`` in the detail) would put
        it or its type ``kind`` over its share of the run, else None. The answer's cap is checked first."""
        if self.per_answer[answer] >= self.cap:
            return "answer_share", f"{self.cap} verified tasks already answer {shown or answer}"
        if self.type_cap is not None and self.per_type[kind] >= self.type_cap:
            return "answer_type_share", f"{self.type_cap} verified tasks already answer a {kind}"
        return None


def filter_rates(judged: Sequence[Any], filters: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per filter, in pipeline order: how many entered it, how many it rejected, and the rate (rejected /
    entering). ``judged`` are records with ``status`` and ``filter`` (infrastructure errors already left out)."""
    rejected = Counter(o.filter for o in judged if o.status == "rejected")
    entering, out = len(judged), {}
    for name in filters:
        out[name] = {"entering": entering, "rejected": rejected[name],
                     "rate": round(rejected[name] / entering, 4) if entering else 0.0}
        entering -= rejected[name]
    return out


def stage_rates(timed: Sequence[Any], counted: Sequence[Any], stages: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per stage: the records of ``counted`` that went through it, the wall seconds all of ``timed`` spent in it
    (``seconds[stage]``), and questions per minute."""
    out = {}
    for stage in stages:
        spent = sum(o.seconds.get(stage, 0.0) for o in timed)
        n = sum(1 for o in counted if stage in o.seconds)
        out[stage] = {"questions": n, "seconds": round(spent, 2),
                      "per_minute": round(60 * n / spent, 1) if spent else None}
    return out


def diversity(answers: Sequence[str], answer_types: Sequence[str], relations: Sequence[str],
              skeletons: Sequence[str]) -> dict[str, Any]:
    """What a researcher checks before training on a run: how many distinct answers and how concentrated (the
    largest share of one answer), the same for answer types, relation types and question skeletons (counts, most
    common first; ``skeletons`` capped at 20, their distinct count given in full)."""
    counts = Counter(answers)
    types = Counter(answer_types)
    n = len(answers)
    return {
        "tasks": n,
        "distinct_answers": len(counts),
        "max_answer_share": round(max(counts.values()) / n, 4) if n else 0.0,
        "top_answers": dict(counts.most_common(5)),
        "distinct_answer_types": len(types),
        "max_answer_type_share": round(max(types.values()) / n, 4) if n else 0.0,
        "answer_types": dict(types.most_common()),
        "distinct_relations": len(set(relations)),
        "relations": dict(Counter(relations).most_common()),
        "distinct_skeletons": len(set(skeletons)),
        "skeletons": dict(Counter(skeletons).most_common(20)),
    }
