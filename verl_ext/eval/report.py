"""The evaluation report: ``summary.json``, ``report.md``, plots and the trajectory viewer (``viewer.html``).

Accuracy per benchmark and overall (mean over runs ± 95% CI, pass@1, pass@k), the judge (pinned model, prompt
digest, version; how many verdicts each path decided; rule fallbacks by reason; the agreement of two passes), the
infrastructure errors, and the behaviour analyses of ``behaviour.py``. Plots use the walkthrough's figure helpers.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verl_ext.eval.behaviour import TrajectorySample, analyse
from verl_ext.eval.judging import fallback_reason
from verl_ext.eval.run import EvalRecord, read_results
from verl_ext.eval.stats import by_benchmark
from verl_ext.eval.viewer import ViewerEpisode, write_viewer
from verl_ext.reward.judge import JudgeConfig, Verdict
from verl_ext.rollout.record import TrajectoryRecord
from verl_ext.walkthrough.plots import FAILURE, SUCCESS, _save, histograms_by_correctness, plt

logger = logging.getLogger(__name__)
# Rule fallbacks above this share of LLM-judged verdicts are flagged: the answer judge's own threshold, the one
# training warns at (JudgeConfig.max_fallback_share), so one setting governs the event wherever it is counted.
MAX_JUDGE_FALLBACK_SHARE = JudgeConfig().max_fallback_share


def _embedder(enabled: bool):
    if not enabled:
        return None
    from verl_ext.eval.embed import minilm

    return minilm


def judge_summary(records: Sequence[EvalRecord], max_fallback_share: float = MAX_JUDGE_FALLBACK_SHARE
                  ) -> dict[str, Any]:
    """Verdicts by path, rule fallbacks by reason and their share of LLM-judged responses, flagged (and logged)
    above ``max_fallback_share``; the agreement of two judge passes."""
    verdicts = [Verdict(**r.verdict) for r in records if r.verdict]
    sources = Counter(v.source for v in verdicts)
    reasons = Counter(fallback_reason(v) for v in verdicts if v.source == "rule_fallback")
    asked = sources["llm"] + sources["rule_fallback"]
    rate = sources["rule_fallback"] / asked if asked else 0.0
    if rate > max_fallback_share:
        logger.warning("the rule matcher decided %d of %d LLM-judged responses (%.0f%% > max_fallback_share %.0f%%; "
                       "judge failures by reason: %s)", sources["rule_fallback"], asked, 100 * rate,
                       100 * max_fallback_share, dict(reasons))
    pairs = [(r.verdict["correct"], r.verdict_pass2["correct"]) for r in records
             if r.verdict and r.verdict_pass2 and r.verdict["source"] == r.verdict_pass2["source"] == "llm"]
    return {
        "by_source": dict(sources), "fallbacks_by_reason": dict(reasons),
        "fallback_rate": rate, "max_fallback_share": max_fallback_share,
        "repeatability": {"pairs": len(pairs), "agreement": sum(a == b for a, b in pairs) / len(pairs)}
        if pairs else None,
    }


def summarize(records: Sequence[EvalRecord], pin: dict[str, Any], embeddings: bool,
              max_fallback_share: float = MAX_JUDGE_FALLBACK_SHARE) -> dict[str, Any]:
    ok = [r for r in records if r.status == "ok"]
    errors = Counter(r.error.split(":", 1)[0] for r in records if r.status == "error")
    k = pin.get("runs", max((r.run for r in records), default=0) + 1)
    accuracy = by_benchmark(((r.benchmark, r.item_id, r.run, bool(r.correct)) for r in ok), k)
    episodes = [TrajectorySample(TrajectoryRecord.model_validate(r.trajectory), r.correct, r.turn_stats)
                for r in ok if r.trajectory]
    return {
        "pin": pin,
        "episodes": {"ok": len(ok), "errors": sum(errors.values()), "errors_by_type": dict(errors)},
        "accuracy": {name: a.as_dict() for name, a in accuracy.items()},
        "judge": judge_summary(ok, max_fallback_share),
        "behaviour": analyse(episodes, _embedder(embeddings)),
    }


def _pct(x: float | None) -> str:
    return "–" if x is None or x != x else f"{100 * x:.1f}"


def accuracy_plot(summary: dict[str, Any], path: Path) -> Path:
    names = list(summary["accuracy"])
    means = [100 * summary["accuracy"][n]["mean"] for n in names]
    cis = [100 * (summary["accuracy"][n]["ci95"] or 0.0) for n in names]
    fig, ax = plt.subplots(figsize=(1.6 * len(names) + 2, 3.6))
    ax.bar(names, means, yerr=cis, capsize=4, color=[SUCCESS if n != "overall" else "#2e86c1" for n in names])
    for x, m in enumerate(means):
        ax.text(x, m, f" {m:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("accuracy (%), mean over runs ± 95% CI")
    ax.set_ylim(0, 105)
    ax.set_title("Accuracy per benchmark")
    return _save(fig, path)


def tool_plot(behaviour: dict[str, Any], path: Path) -> Path:
    """Neos Fig. 4 style: share of all tool calls per tool."""
    share = behaviour["tool_calls"]["share"]
    fig, ax = plt.subplots(figsize=(7, 0.45 * max(3, len(share)) + 1.2))
    ax.barh(list(share), [100 * v for v in share.values()], color="#2e86c1")
    ax.invert_yaxis()
    ax.set_xlabel("share of tool calls (%)")
    ax.set_title(f"Tool-call distribution ({behaviour['tool_calls']['total']} calls, "
                 f"{behaviour['tool_calls']['per_trajectory']:.2f} per trajectory)")
    return _save(fig, path)


def error_plot(behaviour: dict[str, Any], path: Path) -> Path:
    errors = behaviour["errors_by_class"]
    fig, ax = plt.subplots(figsize=(7, 0.45 * max(3, len(errors)) + 1.2))
    if errors:
        ax.barh(list(errors), list(errors.values()),
                color=[FAILURE if k.startswith("agent") else "#8e44ad" for k in errors])
        ax.invert_yaxis()
    else:
        ax.text(0.5, 0.5, "no error turns", ha="center", va="center")
    ax.set_xlabel("turns")
    ax.set_title("Error turns by class/type (agent: the policy's; tool: infrastructure)")
    return _save(fig, path)


def plots(summary: dict[str, Any], episodes: Sequence[tuple[TrajectoryRecord, bool | None]], out: Path) -> dict:
    b = summary["behaviour"]
    panels = {label: {ok: [value(rec) for rec, c in episodes if c is ok] for ok in (True, False)}
              for label, value in (("assistant turns", lambda r: len(r.turns)),
                                   ("tool calls", lambda r: sum(len(t.calls) for t in r.turns)))}
    made = {"tools": tool_plot(b, out / "tool_calls.png"),
            "turns": histograms_by_correctness(panels, out / "turns_by_correctness.png",
                                               "Turns and tool calls by correctness (Neos Fig. 5)"),
            "errors": error_plot(b, out / "errors.png")}
    if summary.get("accuracy"):
        made["accuracy"] = accuracy_plot(summary, out / "accuracy.png")
    return made


def markdown(summary: dict[str, Any], figures: dict[str, Path]) -> str:
    pin, b = summary["pin"], summary["behaviour"]
    lines = ["# Evaluation report", ""]
    if "policy" in pin:
        ends = pin.get("endpoints", {})
        lines += [f"Policy `{pin['policy']['model']}` at `{ends.get('policy')}`; {pin['runs']} runs per item; "
                  f"judge: {_judge_line(pin['judge'], ends.get('judge'))}.", ""]
    if summary.get("accuracy"):
        k = next(iter(summary["accuracy"].values()))["k"]
        lines += ["## Accuracy", "", f"| benchmark | items | runs | accuracy (%) ± 95% CI | pass@1 | pass@{k} |",
                  "|---|---|---|---|---|---|"]
        for name, a in summary["accuracy"].items():
            ci = f" ± {_pct(a['ci95'])}" if a["ci95"] is not None else " (one run: no CI)"
            lines.append(f"| {name} | {a['items']} | {a['runs']} | {_pct(a['mean'])}{ci} | {_pct(a['pass_at_1'])} "
                         f"| {_pct(a['pass_at_k'])} |")
        lines += ["", "CI: `mean ± t(0.975, k−1) · s / √k` over the k per-run accuracies (ModalSearcher App. D.2).",
                  f"![accuracy]({figures['accuracy'].name})", ""]
        e = summary["episodes"]
        lines += [f"Episodes judged: {e['ok']}; infrastructure errors (not scored, redone by a rerun): {e['errors']}"
                  + (f" {e['errors_by_type']}" if e["errors"] else "") + ".", ""]
    if "judge" in summary:
        j = summary["judge"]
        asked = j["by_source"].get("llm", 0) + j["by_source"].get("rule_fallback", 0)
        fallbacks = (f"Rule fallbacks: {_pct(j['fallback_rate'])}% of LLM-judged responses, by reason "
                     f"{j['fallbacks_by_reason'] or '{}'}." if asked else "No LLM judge asked: no fallbacks.")
        lines += ["## Judge", "", f"Verdicts by path: {j['by_source']}. {fallbacks}"]
        if j["fallback_rate"] > j["max_fallback_share"]:
            lines.append(f"**Warning:** more than {_pct(j['max_fallback_share'])}% of verdicts fell back to the "
                         "rule matcher (the judge's max_fallback_share): check the judge endpoint.")
        rep = j["repeatability"]
        if rep:
            repeat = f"{_pct(rep['agreement'])}% agreement of two judge passes over {rep['pairs']} responses."
        elif not asked:
            repeat = "not applicable (the rule matcher is deterministic; pass --judge-url for an LLM judge)."
        else:
            repeat = "not measured (run with --judge-passes 2)."
        lines += [f"Repeatability: {repeat}", ""]
    lines += ["## Behaviour", "", f"{b['trajectories']} trajectories.", "",
              f"- Tool calls: {b['tool_calls']['total']} ({b['tool_calls']['per_trajectory']:.2f} per trajectory)"
              + "".join(f"{', ' if i else ': '}{k} {v}" for i, (k, v) in enumerate(b["tool_calls"]["by_tool"].items())),
              f"- Truncated at the turn limit: {_pct(b['truncation_rate'])}%; endings {b['termination']}",
              f"- t2i invocation rate: {_pct(b['t2i_rate'])}% of trajectories",
              f"- Repeated searches: {_repeated(b['repeated_searches'])}",
              f"- Error turns: {b['errors_by_class'] or 'none'}"]
    per_turn = b["per_turn"]
    lines += ["", "| per turn | n | mean | median | p90 |", "|---|---|---|---|---|"]
    for name, d in per_turn.items():
        lines.append(f"| {name} | {d['n']} | {_num(d['mean'])} | {_num(d['median'])} | {_num(d['p90'])} |")
    lines += ["", f"![tool calls]({figures['tools'].name})", f"![turns]({figures['turns'].name})",
              f"![errors]({figures['errors'].name})", "", "Trajectories: open [viewer.html](viewer.html).", ""]
    return "\n".join(lines)


def _judge_line(pin: dict[str, Any], url: str | None) -> str:
    if pin["kind"] == "rule":
        return f"rule matcher (offline), {pin['version']}"
    return f"LLM `{pin['model']}` at `{url}`, prompt sha256 {pin['prompt_sha256']}, {pin['version']}"


def _repeated(r: dict[str, Any]) -> str:
    if "skipped" in r:
        return f"skipped ({r['skipped']})"
    return (f"{r['per_trajectory']:.2f} per trajectory ({r['total']} pairs; cosine > 0.9 of all-MiniLM-L6-v2 "
            "embeddings and > 2 of 5 shared results)")


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def _write(out: Path, summary: dict[str, Any], episodes: list[ViewerEpisode], images_root: Path | None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    figures = plots(summary, [(e.record, e.correct) for e in episodes], out)
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2, default=str))
    _atomic_write(out / "report.md", markdown(summary, figures))
    viewer = write_viewer(episodes, out / "viewer.html", images_root)
    return {"report": out / "report.md", "viewer": viewer, "summary": out / "summary.json", **figures}


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_report(run_dir: Path, out: Path, *, embeddings: bool = True,
                 max_fallback_share: float = MAX_JUDGE_FALLBACK_SHARE) -> dict[str, Path]:
    records = read_results(run_dir)
    pin = json.loads((run_dir / "run.json").read_text()) if (run_dir / "run.json").exists() else {}
    summary = summarize(records, pin, embeddings, max_fallback_share)
    done = sorted((r for r in records if r.status == "ok" and r.trajectory),
                  key=lambda r: (r.benchmark, r.item_id, r.run))  # the log is in finishing order
    return _write(out, summary, [ViewerEpisode.from_eval(r) for r in done], run_dir / "images")


def write_trajectory_report(path: Path, out: Path, *, embeddings: bool = True) -> dict[str, Path]:
    """Behaviour and viewer of trajectories exported during training (no accuracy table: no runs per item)."""
    episodes = list(ViewerEpisode.from_export(path))
    behaviour = analyse([TrajectorySample(e.record, e.correct) for e in episodes], _embedder(embeddings))
    return _write(out, {"pin": {}, "behaviour": behaviour}, episodes, None)
