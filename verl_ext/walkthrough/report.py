"""The walkthrough's report: ``summary.json`` (every number), ``report.md`` (the questions with their images, what
was real and what was scripted, the numbers, the figures, what each file holds) and a short terminal summary. All
three come from :func:`summarise`."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from tool_server.mei.log import MEILog
from verl_ext.credit.labels import CREDIT_TYPES
from verl_ext.walkthrough.behaviour import BEHAVIOURS, VARIANTS, WEIGHTS
from verl_ext.walkthrough.pipeline import Group, Rollout, Walkthrough
from verl_ext.walkthrough.plots import showcase, write_all

ESTIMATORS = ("grpo", "neos_turn_credit")
# Rows of the GRPO vs turn-credit table: which trajectories each averages over.
SCOPES = {
    "all trajectories (the batch)": lambda r: True,
    "assessed failures (mixed groups)": lambda r: r.types is not None,
    "successes": lambda r: r.success,
    "failures of homogeneous groups": lambda r: not r.success and r.types is None,
}


MIXED = "a mixed group, so its failures are judged turn by turn."
HOMOGENEOUS = ("a homogeneous group: every rollout has the group's mean reward, so GRPO gives each A_i = 0 and there "
               "is nothing to judge.")


def adv_mass(tokens: np.ndarray) -> tuple[float, float]:
    """(pos_adv_mass, neg_adv_mass) of one trajectory: the sum of its positive token advantages and the sum of the
    magnitudes of its negative ones, over policy tokens."""
    return float(np.maximum(tokens, 0.0).sum()), float(np.maximum(-tokens, 0.0).sum())


def _masses(r: Rollout) -> dict[str, tuple[float, float]]:
    policy = np.asarray(r.response_mask, dtype=bool)
    return {"grpo": adv_mass(r.grpo[policy]), "neos_turn_credit": adv_mass(r.advantages[policy])}


def mass_table(rollouts: Iterable[Rollout]) -> dict[str, dict[str, Any]]:
    """Per scope: the number of trajectories and, per estimator, their mean pos/neg advantage mass."""
    rollouts = list(rollouts)
    table = {}
    for scope, member in SCOPES.items():
        masses = [_masses(r) for r in rollouts if member(r)]
        row: dict[str, Any] = {"trajectories": len(masses)}
        for est in ESTIMATORS:
            pos = [m[est][0] for m in masses]
            neg = [m[est][1] for m in masses]
            row[est] = {"pos_adv_mass": float(np.mean(pos)) if masses else 0.0,
                        "neg_adv_mass": float(np.mean(neg)) if masses else 0.0}
        table[scope] = row
    return table


def _rollout(r: Rollout) -> dict[str, Any]:
    policy = np.asarray(r.response_mask, dtype=bool)
    adv = r.advantages[policy]
    masses = _masses(r)
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
        "mean_logprob": r.mean_logprob,
        "assessed": r.types is not None,
        "credit_types": r.types,
        "grpo_value": r.grpo_value,
        "advantage_sum": float(adv.sum()),
        "advantage_min": float(adv.min()) if adv.size else 0.0,
        "advantage_max": float(adv.max()) if adv.size else 0.0,
        "adv_mass": {est: {"pos": pos, "neg": neg} for est, (pos, neg) in masses.items()},
    }


def _mei(path: Path) -> dict[str, Any]:
    """What the tool server's MEI log holds: calls per tool, per outcome, per MEI version, unreadable lines."""
    if not path.is_file():
        return {"calls": 0, "by_tool": {}, "by_outcome": {}, "versions": [], "skipped_lines": []}
    log = MEILog.read(path)
    return {
        "calls": len(log.records),
        "by_tool": dict(Counter(r.tool for r in log.records).most_common()),
        "by_outcome": dict(Counter(r.outcome for r in log.records).most_common()),
        "versions": sorted({r.mei_version for r in log.records}),
        "skipped_lines": log.skipped_lines,
    }


def _image_name(g: Group, n: int) -> str:
    return f"images/{g.question_id[:8]}_img_{n}.png"


def summarise(w: Walkthrough, mei_log: Path | None = None) -> dict[str, Any]:
    rollouts = w.rollouts
    composition = Counter(kind for r in rollouts for kind in (r.types or ()))
    logprobs = [r.mean_logprob for r in rollouts if r.mean_logprob is not None]
    return {
        "questions": len(w.groups),
        "group_size": max((len(g.rollouts) for g in w.groups), default=0),
        "trajectories": len(rollouts),
        "successes": sum(r.success for r in rollouts),
        "mixed_groups": sum(g.mixed for g in w.groups),
        "assessed_failures": sum(r.types is not None for r in rollouts),
        "credit_composition": {kind: composition[kind] for kind in CREDIT_TYPES},
        "adv_mass": mass_table(rollouts),
        "estimator_metrics": w.metrics,
        "credit_params": {**asdict(w.params), "ablation": w.params.ablation.value},
        "vocab_size": w.vocab_size,
        "mean_logprob": float(np.mean(logprobs)) if logprobs else None,
        "mei_log": _mei(mei_log) if mei_log is not None else None,
        "groups": [
            {"question_id": g.question_id, "question": g.question, "answer": g.answer,
             "images": [_image_name(g, n) for n in range(1, len(g.images) + 1)], "successes": g.successes,
             "mixed": g.mixed, "rollouts": [_rollout(r) for r in g.rollouts]}
            for g in w.groups
        ],
    }


def _intro(s: dict[str, Any]) -> list[str]:
    behaviours = [f"| `{v}` | {BEHAVIOURS[v]} | {'correct' if v in ('expert', 'wasted_search') else 'wrong'} | "
                  f"{w:.0%} |" for v, w in zip(VARIANTS, WEIGHTS)]
    return [
        "# Neos walkthrough",
        "",
        f"{s['questions']} questions x {s['group_size']} rollouts = {s['trajectories']} trajectories; "
        f"{s['successes']} correct; mixed groups: {s['mixed_groups']}; failures assessed by the credit judge: "
        f"{s['assessed_failures']}.",
        "",
        "One RL step of Neos (Neos: Learning to Interleave Search and Visual Reasoning, Sec. 3.4) on CPU: each "
        "question gets a group of rollouts, each rollout an outcome reward, each failure of a group that also holds a "
        "success gets per-turn labels from the credit judge, and the labels turn GRPO's single advantage per "
        "trajectory into per-token advantages.",
        "",
        "**What is real and what is scripted.** The agent loop (`neos_search_agent`, built from verl's registry), the "
        "tool server (HTTP on loopback, the offline world), the model that scores every token (a tiny randomly "
        "initialised Qwen2.5-VL with the real Qwen tokenizer, forward passes over the real context with the images), "
        "the reward manager (`neos_answer_judge`, offline answer matcher), the group assessor with the offline credit "
        "judge (it compares each failure with the task's verified path), and verl's `compute_advantage` with "
        "`neos_turn_credit` are the training path's own parts. The words of every turn come from a **scripted "
        "behaviour policy**: a random 10M model cannot search, so it only scores the words. The script replays the "
        "task's verified calls (the programmatic expert of `data_gen.neos`) with seeded deviations; each rollout "
        "draws one of these behaviours:",
        "",
        "| behaviour | what it writes | answer | drawn for |",
        "|---|---|---|---|",
        *behaviours,
        "",
        "k (how many expert calls come before the deviation) is drawn per rollout. The judge typically labels a "
        "`wrong_entity` rollout's detour `causal_error` and what follows `downstream`, and a `recovery` rollout's "
        "return to the path `recovery` and its wrong answer after it `re_derailment`.",
        "",
    ]


def _questions(s: dict[str, Any]) -> list[str]:
    lines = ["## The questions", "",
             "Each question shows its entry image(s) to the policy as `img_1`, `img_2`, ...; two questions can "
             "share their text and differ only in their images.", ""]
    for n, g in enumerate(s["groups"], start=1):
        images = " ".join(f'<img src="{path}" alt="img_{i}" height="90">' for i, path in enumerate(g["images"], 1))
        lines += [f"### Q{n} `{g['question_id'][:8]}`", "", f"> {g['question']}", "", images, "",
                  f"Answer: **{g['answer']}**. {g['successes']} of {len(g['rollouts'])} rollouts correct: "
                  f"{MIXED if g['mixed'] else HOMOGENEOUS}",
                  "", "| rollout | behaviour | deviates at turn | answered | reward |", "|---|---|---|---|---|"]
        for r in g["rollouts"]:
            turn = "-" if r["deviation_turn"] is None else str(r["deviation_turn"])
            lines.append(f"| #{r['member']} | `{r['variant']}` | {turn} | {r['prediction']} | {r['reward']:g} |")
        lines.append("")
    return lines


def _mass_section(s: dict[str, Any]) -> list[str]:
    lines = [
        "## GRPO vs turn credit",
        "",
        "Both estimators run on the same batch (verl's `compute_advantage` with `grpo` and with `neos_turn_credit`). "
        "For one trajectory, **pos_adv_mass** is the sum of its positive per-token advantages and **neg_adv_mass** "
        "the sum of the magnitudes of its negative ones, over policy tokens (observation tokens carry no advantage). "
        "Each cell is the mean over the trajectories of its row. Every token's advantage scales the gradient of its "
        "log-prob in the policy loss, so the masses say how hard a trajectory's tokens are pushed up and down. The "
        "batch row under turn credit is what the estimator logs as `neos_credit/pos_adv_mass` and "
        "`neos_credit/neg_adv_mass`.",
        "",
        "| trajectories | n | GRPO pos_adv_mass | GRPO neg_adv_mass | turn credit pos_adv_mass | "
        "turn credit neg_adv_mass |",
        "|---|---|---|---|---|---|",
    ]
    for scope, row in s["adv_mass"].items():
        g, t = row["grpo"], row["neos_turn_credit"]
        lines.append(f"| {scope} | {row['trajectories']} | {g['pos_adv_mass']:.2f} | {g['neg_adv_mass']:.2f} | "
                     f"{t['pos_adv_mass']:.2f} | {t['neg_adv_mass']:.2f} |")
    failures = s["adv_mass"]["assessed failures (mixed groups)"]
    if failures["trajectories"]:
        g, t = failures["grpo"], failures["neos_turn_credit"]
        share = t["neg_adv_mass"] / g["neg_adv_mass"] if g["neg_adv_mass"] else 0.0
        lines += ["", f"Only assessed failures differ: GRPO pushes every token of such a trajectory down "
                  f"(neg_adv_mass {g['neg_adv_mass']:.1f} per trajectory); turn credit keeps each one's sum negative "
                  f"but pushes down only the turns the judge blamed and their consequences (neg_adv_mass "
                  f"{t['neg_adv_mass']:.1f}, {share:.0%} of GRPO's) and gives its productive and recovery turns a "
                  f"small positive advantage (pos_adv_mass {t['pos_adv_mass']:.1f})."]
    return lines + [""]


def _credit_section(s: dict[str, Any], figures: dict[str, Path], focus: Rollout | None) -> list[str]:
    p = s["credit_params"]
    lines = ["## Turn credit", "", f"![credit composition]({figures['credit_composition'].name})", "",
             "| credit type | turns |", "|---|---|"]
    lines += [f"| {kind} | {n} |" for kind, n in s["credit_composition"].items()]
    lines += [
        "",
        "Successes and failures outside mixed groups keep their GRPO value A_i on every token. An assessed "
        "failure's tokens get its turn's weight (Neos Sec. 3.4, Eq. 3) times b = |A_i|, rescaled (Eq. 7, "
        f"M = {p['M']}, eta = {p['eta']}) so that the sum stays negative and every token lies in [-M b, lambda_c b] "
        f"(lambda_c = {p['lambda_c']}).",
        "",
    ]
    if focus is not None:
        lines += [f"Token-level view of failure `{focus.question_id[:8]}` #{focus.member} ({focus.variant}): the black "
                  "line is what turn credit gives each policy token, the dashed line what GRPO gives all of them.", ""]
    return lines + [f"![token advantages]({figures['token_advantages'].name})", ""]


def _rollout_table(s: dict[str, Any]) -> list[str]:
    vocab = s["vocab_size"]
    lines = [
        "## Every rollout",
        "",
        "| rollout | behaviour | reward | turns | policy tokens | mean log-prob | GRPO value | token advantage sum "
        "| min | max |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in s["groups"]:
        for r in g["rollouts"]:
            lp = "-" if r["mean_logprob"] is None else f"{r['mean_logprob']:.2f}"
            lines.append(
                f"| `{r['question_id'][:8]}` #{r['member']} | {r['variant']} | {r['reward']:g} | {r['turns']} | "
                f"{r['policy_tokens']} | {lp} | {r['grpo_value']:.3f} | {r['advantage_sum']:.2f} | "
                f"{r['advantage_min']:.3f} | {r['advantage_max']:.3f} |"
            )
    lines += ["", f"Mean log-prob: the log-probability the model gives the scripted tokens, averaged over policy "
              f"tokens only (observations are the tool's words, not the policy's). A randomly initialised model is "
              f"close to uniform over its {vocab:,}-token vocabulary, so expect about -ln {vocab:,} = "
              f"{-math.log(vocab):.2f}; a trained policy reads far closer to 0 on its own samples.", ""]
    return lines


def _files(s: dict[str, Any], figures: dict[str, Path]) -> list[str]:
    mei = s["mei_log"]
    lines = ["## Tool calls by correctness", "", f"![tool calls]({figures['tool_calls'].name})", "",
             "Each scripted turn makes one tool call and the last one answers, so a trajectory's turns are its calls "
             "plus one.", "", "## Files in this directory", "",
             "- `report.md`: this page; `summary.json`: every number on it (per rollout: behaviour, reward, labels, "
             "advantages, masses, mean log-prob).",
             "- `group_outcomes.png`, `credit_composition.png`, `token_advantages.png`, `tool_calls.png`: the figures;"
             " `images/`: the questions' entry images."]
    if mei is not None:
        tools = ", ".join(f"{tool} {n}" for tool, n in mei["by_tool"].items())
        outcomes = ", ".join(f"`{o}` {n}" for o, n in mei["by_outcome"].items())
        made = (f"This run made {mei['calls']} MEI calls ({tools}; outcomes: {outcomes})." if mei["calls"] else
                "This run made none.")
        lines.append(
            "- `mei.jsonl`: the tool server's MEI log, one record per call of the Multimodal Evidence Interface (the "
            "small model inside WebVisit, ImageSearch and ReverseImageSearch that turns a page or a set of image "
            "results into goal-conditioned evidence; Neos Sec. 3.2). A record holds the session and turn it served, "
            "the goal, hashes of what it read and the evidence it returned; the co-evolution loop (Neos Sec. 3.5) "
            f"selects MEI training data from such a log. {made} No MEI model is configured here, so the extractive "
            "stand-in answers. A call whose result is already in the tool server's result "
            "cache (`TASKS/tool_server_cache`, filled by the task run and by earlier walkthrough runs) is answered "
            "from the cache and makes no MEI call: the expert's own calls are rarely logged, the deviations' calls "
            "only the first time.")
    return lines + [""]


def _markdown(s: dict[str, Any], figures: dict[str, Path], focus: Rollout | None) -> str:
    lines = _intro(s) + _questions(s)
    lines += ["## Group outcomes", "", f"![group outcomes]({figures['group_outcomes'].name})", ""]
    lines += _mass_section(s) + _credit_section(s, figures, focus) + _rollout_table(s) + _files(s, figures)
    lines += ["Estimator metrics: " + ", ".join(f"`{k}` = {v:.3f}" for k, v in s["estimator_metrics"].items()), ""]
    return "\n".join(lines)


def terminal_summary(s: dict[str, Any], out: Path) -> str:
    comp = ", ".join(f"{kind} {n}" for kind, n in s["credit_composition"].items() if n)
    lines = [f"walkthrough: {s['questions']} questions x {s['group_size']} rollouts, {s['successes']}/"
             f"{s['trajectories']} correct, mixed groups: {s['mixed_groups']}, "
             f"failures judged: {s['assessed_failures']}"]
    for g in s["groups"]:
        outcome = " ".join("+" if r["reward"] >= 0.5 else "-" for r in g["rollouts"])
        lines.append(f"  {g['question_id'][:8]} [{outcome}] answer {g['answer']!r}")
    lines.append(f"  credit types: {comp or 'none (no mixed group)'}")
    failures = s["adv_mass"]["assessed failures (mixed groups)"]
    if failures["trajectories"]:
        lines.append(f"  neg_adv_mass per assessed failure: GRPO {failures['grpo']['neg_adv_mass']:.1f}, "
                     f"turn credit {failures['neos_turn_credit']['neg_adv_mass']:.1f}")
    lines.append(f"  report: {out / 'report.md'}")
    return "\n".join(lines)


def write_report(w: Walkthrough, out: Path) -> dict[str, Any]:
    """Write ``summary.json``, the figures, the entry images and ``report.md`` into ``out`` (the MEI log the tool
    server wrote there, ``mei.jsonl``, is summarised); returns the summary."""
    (out / "images").mkdir(parents=True, exist_ok=True)
    s = summarise(w, out / "mei.jsonl")
    for g in w.groups:
        for n, image in enumerate(g.images, start=1):
            image.save(out / _image_name(g, n))
    figures = write_all(w, out)
    (out / "summary.json").write_text(json.dumps(s, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "report.md").write_text(_markdown(s, figures, showcase(w)), encoding="utf-8")
    return s
