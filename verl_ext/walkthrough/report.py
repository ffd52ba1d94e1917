"""The walkthrough's report: ``summary.json`` (every number), ``report.md`` (the same numbers, the figures, what was
real and what was scripted) and a short terminal summary. All three come from :func:`summarise`."""

from __future__ import annotations

import json
from dataclasses import asdict
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from verl_ext.credit.labels import CREDIT_TYPES
from verl_ext.walkthrough.pipeline import Rollout, Walkthrough
from verl_ext.walkthrough.plots import showcase, write_all


def _rollout(r: Rollout) -> dict[str, Any]:
    policy = np.asarray(r.response_mask, dtype=bool)
    adv = r.advantages[policy]
    return {
        "question_id": r.question_id,
        "member": r.member,
        "variant": r.variant,
        "deviation_turn": r.plan.deviation_turn,
        "reward": r.reward,
        "prediction": r.prediction,
        "termination": r.record.termination_reason,
        "turns": len(r.record.turns),
        "tool_calls": r.tool_calls,
        "policy_tokens": int(policy.sum()),
        "mean_logprob": float(np.mean(r.logprobs)) if r.logprobs else None,
        "assessed": r.types is not None,
        "credit_types": r.types,
        "grpo_value": r.grpo_value,
        "advantage_sum": float(adv.sum()),
        "advantage_min": float(adv.min()) if adv.size else 0.0,
        "advantage_max": float(adv.max()) if adv.size else 0.0,
    }


def summarise(w: Walkthrough) -> dict[str, Any]:
    rollouts = w.rollouts
    composition = Counter(kind for r in rollouts for kind in (r.types or ()))
    return {
        "questions": len(w.groups),
        "group_size": max((len(g.rollouts) for g in w.groups), default=0),
        "trajectories": len(rollouts),
        "successes": sum(r.success for r in rollouts),
        "mixed_groups": sum(g.mixed for g in w.groups),
        "assessed_failures": sum(r.types is not None for r in rollouts),
        "credit_composition": {kind: composition[kind] for kind in CREDIT_TYPES},
        "estimator_metrics": w.metrics,
        "credit_params": {**asdict(w.params), "ablation": w.params.ablation.value},
        "groups": [
            {"question_id": g.question_id, "question": g.question, "answer": g.answer, "successes": g.successes,
             "mixed": g.mixed, "rollouts": [_rollout(r) for r in g.rollouts]}
            for g in w.groups
        ],
    }


def _markdown(s: dict[str, Any], figures: dict[str, Path], focus: Rollout | None) -> str:
    lines = [
        "# Neos walkthrough",
        "",
        f"{s['questions']} questions x {s['group_size']} rollouts = {s['trajectories']} trajectories; "
        f"{s['successes']} correct; mixed groups: {s['mixed_groups']}; failures assessed by the credit judge: "
        f"{s['assessed_failures']}.",
        "",
        "**What is real and what is scripted.** The agent loop (`neos_search_agent`, built from verl's registry), the "
        "tool server (HTTP on loopback, the offline world), the model that scores every token (a tiny randomly "
        "initialised Qwen2.5-VL with the real Qwen tokenizer, forward passes over the real context with the images), "
        "the reward manager (`neos_answer_judge`, offline answer matcher), the group assessor with the offline credit "
        "judge, and verl's `compute_advantage` with `neos_turn_credit` are the training path's own parts. The words "
        "of every turn come from a **scripted behaviour policy**: the programmatic expert of `data_gen.neos` replaying "
        "the task's verified calls, with seeded deviations (`wasted_search`, `wrong_entity`, `recovery`). It is not a "
        "trained policy; a random 10M model cannot search.",
        "",
        "## Group outcomes",
        "",
        "| question | answer | rollouts (variant: reward) | mixed |",
        "|---|---|---|---|",
    ]
    for g in s["groups"]:
        cells = ", ".join(f"{r['variant']}: {r['reward']:g}" for r in g["rollouts"])
        lines.append(f"| `{g['question_id'][:8]}` | {g['answer']} | {cells} | {'yes' if g['mixed'] else 'no'} |")
    lines += ["", f"![group outcomes]({figures['group_outcomes'].name})", "", "## Turn credit", "",
              "| credit type | turns |", "|---|---|"]
    lines += [f"| {kind} | {n} |" for kind, n in s["credit_composition"].items()]
    lines += ["", f"![credit composition]({figures['credit_composition'].name})", "",
              "| rollout | variant | reward | turns | GRPO value | token advantage sum | min | max |",
              "|---|---|---|---|---|---|---|---|"]
    for g in s["groups"]:
        for r in g["rollouts"]:
            lines.append(
                f"| `{r['question_id'][:8]}` #{r['member']} | {r['variant']} | {r['reward']:g} | {r['turns']} | "
                f"{r['grpo_value']:.3f} | {r['advantage_sum']:.2f} | {r['advantage_min']:.3f} | "
                f"{r['advantage_max']:.3f} |"
            )
    p = s["credit_params"]
    lines += [
        "",
        "Successes and failures outside mixed groups keep their GRPO value on every token. An assessed failure's "
        f"tokens get Eq. 3 turn weights times b = |A_i|, rescaled by Eq. 7 (M = {p['M']}, eta = {p['eta']}): the sum "
        f"stays negative and every token lies in [-M b, lambda_c b] (lambda_c = {p['lambda_c']}).",
        "",
    ]
    if focus is not None:
        lines += [f"Token-level view of failure `{focus.question_id[:8]}` #{focus.member} ({focus.variant}):", ""]
    lines += [f"![token advantages]({figures['token_advantages'].name})", "",
              "## Turns and tool calls by correctness", "", f"![turn histograms]({figures['turn_histograms'].name})",
              "", "Estimator metrics: " + ", ".join(f"`{k}` = {v:.3f}" for k, v in s["estimator_metrics"].items()), ""]
    return "\n".join(lines)


def terminal_summary(s: dict[str, Any], out: Path) -> str:
    comp = ", ".join(f"{kind} {n}" for kind, n in s["credit_composition"].items() if n)
    lines = [f"walkthrough: {s['questions']} questions x {s['group_size']} rollouts, {s['successes']}/"
             f"{s['trajectories']} correct, mixed groups: {s['mixed_groups']}, failures judged: {s['assessed_failures']}"]
    for g in s["groups"]:
        outcome = " ".join("+" if r["reward"] >= 0.5 else "-" for r in g["rollouts"])
        lines.append(f"  {g['question_id'][:8]} [{outcome}] answer {g['answer']!r}")
    lines.append(f"  credit types: {comp or 'none (no mixed group)'}")
    lines.append(f"  report: {out / 'report.md'}")
    return "\n".join(lines)


def write_report(w: Walkthrough, out: Path) -> dict[str, Any]:
    """Write ``summary.json``, the figures and ``report.md`` into ``out``; returns the summary."""
    out.mkdir(parents=True, exist_ok=True)
    s = summarise(w)
    figures = write_all(w, out)
    (out / "summary.json").write_text(json.dumps(s, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "report.md").write_text(_markdown(s, figures, showcase(w)), encoding="utf-8")
    return s
