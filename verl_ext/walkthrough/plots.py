"""The walkthrough's four figures (matplotlib, Agg backend: files only, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from verl_ext.credit.labels import CREDIT_TYPES  # noqa: E402
from verl_ext.walkthrough.pipeline import Rollout, Walkthrough  # noqa: E402

COLOURS = {
    "productive": "#4c9a2a",
    "causal_error": "#c0392b",
    "re_derailment": "#8e44ad",
    "downstream": "#e59866",
    "recovery": "#2e86c1",
    "neutral": "#bdbdbd",
}
SUCCESS, FAILURE = "#58a55c", "#d9534f"


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def group_outcomes(w: Walkthrough, path: Path) -> Path:
    """One row per question, one cell per rollout: green succeeded, red failed; the cell names the script variant."""
    size = max(len(g.rollouts) for g in w.groups)
    fig, ax = plt.subplots(figsize=(2.2 * size + 2.5, 0.75 * len(w.groups) + 1.4))
    for y, group in enumerate(w.groups):
        for x, r in enumerate(group.rollouts):
            ax.add_patch(plt.Rectangle((x, y), 0.95, 0.9, color=SUCCESS if r.success else FAILURE))
            ax.text(x + 0.47, y + 0.45, f"{r.variant}\nreward {r.reward:g}", ha="center", va="center", fontsize=8,
                    color="white")
    ax.set_xlim(0, size)
    ax.set_ylim(len(w.groups), 0)
    ax.set_yticks([y + 0.45 for y in range(len(w.groups))])
    ax.set_yticklabels([f"Q{n} {g.question_id[:8]} ({'mixed' if g.mixed else 'homogeneous'})"
                        for n, g in enumerate(w.groups, start=1)])
    ax.set_xticks([x + 0.47 for x in range(size)])
    ax.set_xticklabels([f"rollout {x}" for x in range(size)])
    ax.tick_params(length=0)
    ax.set_title("Per-question group outcomes (only mixed groups get turn credit)")
    return _save(fig, path)


def credit_composition(w: Walkthrough, path: Path) -> Path:
    """Left: each assessed failure's turns in order, coloured by credit type. Right: turn counts per type."""
    failures = [r for r in w.rollouts if r.types]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 1.0 + 0.5 * max(3, len(failures))),
                                      gridspec_kw={"width_ratios": [3, 1.3]})
    for y, r in enumerate(failures):
        for t, kind in enumerate(r.types):
            left.add_patch(plt.Rectangle((t, y), 0.95, 0.8, color=COLOURS[kind]))
    width = max((len(r.types) for r in failures), default=1)
    left.set_xlim(0, width)
    left.set_ylim(max(1, len(failures)), 0)
    left.set_yticks([y + 0.4 for y in range(len(failures))])
    number = {g.question_id: n for n, g in enumerate(w.groups, start=1)}
    left.set_yticklabels([f"Q{number[r.question_id]} #{r.member} {r.variant}" for r in failures], fontsize=8)
    left.set_xlabel("assistant turn")
    left.set_title("Judge labels per turn of each assessed failure")
    counts = [sum(kind == c for r in failures for kind in r.types) for c in CREDIT_TYPES]
    right.barh(list(CREDIT_TYPES), counts, color=[COLOURS[c] for c in CREDIT_TYPES])
    right.invert_yaxis()
    right.set_xlabel("turns")
    right.set_title("Credit-type composition")
    for y, n in enumerate(counts):
        right.text(n, y, f" {n}", va="center", fontsize=8)
    left.legend(handles=[Patch(color=COLOURS[c], label=c) for c in CREDIT_TYPES], loc="upper center",
                bbox_to_anchor=(0.5, -0.18 if failures else -0.3), ncol=len(CREDIT_TYPES), fontsize=8, frameon=False)
    return _save(fig, path)


def showcase(w: Walkthrough) -> Rollout | None:
    """The assessed failure with the most distinct credit types (ties: the longer one), for the token plot."""
    failures = [r for r in w.rollouts if r.types]
    return max(failures, key=lambda r: (len(set(r.types)), len(r.types)), default=None)


def token_advantages(w: Walkthrough, path: Path) -> Path:
    """One failure's per-token advantage under turn credit against the single value GRPO gives all its tokens.

    The y-range covers the tokens, A_i and the upper bound lambda_c*b; the lower bound -M*b (usually far below every
    token, which the rescaling keeps well above it) is drawn only when it falls inside, else named in the legend."""
    r = showcase(w)
    fig, ax = plt.subplots(figsize=(12, 4.6))
    if r is None:
        ax.text(0.5, 0.5, "no mixed group, so no assessed failure to show", ha="center", va="center")
        ax.set_axis_off()
        return _save(fig, path)
    mask = np.asarray(r.response_mask, dtype=bool)
    credited = r.advantages[mask]  # policy tokens only: observations carry no advantage and are cut out
    b = abs(r.grpo_value)
    lower, upper = -w.params.M * b, w.params.lambda_c * b
    start = 0
    for turn, kind in zip(r.record.turns, r.types):
        length = turn.span[1] - turn.span[0]
        ax.axvspan(start - 0.5, start + length - 0.5, color=COLOURS[kind], alpha=0.3, lw=0)
        ax.axvline(start - 0.5, color="white", lw=1.5)  # turn boundary
        start += length
    ax.step(np.arange(credited.size), credited, where="mid", color="black", lw=1.4, label="neos_turn_credit")
    ax.axhline(r.grpo_value, color="#555555", ls="--", lw=1, label=f"GRPO: A_i = {r.grpo_value:.3f} on every token")
    ax.axhline(upper, color=COLOURS["recovery"], ls=":", lw=1.5, label=f"upper bound λ_c·b = {upper:.3f}")
    ax.axhline(0, color="#999999", lw=0.5)
    low = min(float(credited.min()), r.grpo_value, 0.0)
    high = max(float(credited.max()), upper, 0.0)
    pad = 0.12 * (high - low)
    if lower >= low - pad:
        ax.axhline(lower, color=COLOURS["causal_error"], ls=":", lw=1.5, label=f"lower bound -M·b = {lower:.3f}")
        low = lower
    else:
        ax.plot([], [], " ", label=f"lower bound -M·b = {lower:.3f} (below the plotted range)")
    ax.set_ylim(low - pad, high + pad)
    ax.set_xlim(-0.5, credited.size - 0.5)
    ax.set_xlabel("policy token of the trajectory (tool observations removed; shading: the turn's credit type)")
    ax.set_ylabel("advantage")
    ax.set_title(f"Token advantages of failure {r.question_id[:8]} #{r.member} ({r.variant}): "
                 f"token sum {float(credited.sum()):.2f} (GRPO: {r.grpo_value * credited.size:.2f})")
    handles = ax.get_legend_handles_labels()[0] + [Patch(color=COLOURS[c], alpha=0.4, label=c)
                                                    for c in CREDIT_TYPES if c in r.types]
    ax.legend(handles=handles, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False)
    return _save(fig, path)


def _histogram(ax, label: str, values: dict[bool, list[int]]) -> None:
    """Integer counts per trajectory (``label``), correct and incorrect side by side, one bin per value."""
    every = [v for vs in values.values() for v in vs]
    bins = np.arange(min(every, default=0), max(every, default=0) + 2) - 0.5
    ax.hist([values[True], values[False]], bins=bins, color=[SUCCESS, FAILURE],
            label=[f"correct ({len(values[True])})", f"incorrect ({len(values[False])})"])
    ax.set_xlabel(f"{label} per trajectory")
    ax.set_ylabel("trajectories")
    ax.legend(fontsize=8)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.yaxis.get_major_locator().set_params(integer=True)


def tool_calls(w: Walkthrough, path: Path) -> Path:
    """Left: tool calls per trajectory by correctness (each scripted turn makes one call and the last one answers,
    so the turn count is this plus one). Right: the mean calls of each tool per trajectory, by correctness."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    _histogram(left, "tool calls", {ok: [r.tool_calls for r in w.rollouts if r.success == ok] for ok in (True, False)})
    left.set_title("How many calls they made")
    tools = sorted({c.tool_name for r in w.rollouts for t in r.record.turns for c in t.calls})
    y = np.arange(len(tools))
    for ok, shift, colour, label in ((True, -0.2, SUCCESS, "correct"), (False, 0.2, FAILURE, "incorrect")):
        group = [r for r in w.rollouts if r.success == ok]
        calls = [sum(c.tool_name == tool for r in group for t in r.record.turns for c in t.calls) for tool in tools]
        right.barh(y + shift, np.asarray(calls) / max(1, len(group)), height=0.4, color=colour,
                   label=f"{label} trajectories")
    right.set_yticks(y)
    right.set_yticklabels(tools)
    right.invert_yaxis()
    right.set_xlabel("calls per trajectory (mean)")
    right.legend(fontsize=8)
    right.set_title("Which tools they called")
    return _save(fig, path)


def histograms_by_correctness(panels: dict[str, dict[bool, list[int]]], path: Path, title: str) -> Path:
    """One histogram per panel of integer counts per trajectory, correct and incorrect side by side (also the
    evaluation report's, ``verl_ext.eval.report``)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.6), squeeze=False)
    for ax, (label, values) in zip(axes[0], panels.items()):
        _histogram(ax, label, values)
    fig.suptitle(title)
    return _save(fig, path)


def write_all(w: Walkthrough, out: Path) -> dict[str, Path]:
    """Every figure into ``out``; name -> file."""
    return {
        "group_outcomes": group_outcomes(w, out / "group_outcomes.png"),
        "credit_composition": credit_composition(w, out / "credit_composition.png"),
        "token_advantages": token_advantages(w, out / "token_advantages.png"),
        "tool_calls": tool_calls(w, out / "tool_calls.png"),
    }
