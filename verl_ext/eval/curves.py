"""Several training runs on one figure: learning curves by group (no verl import).

``python -m verl_ext.eval training RUN RUN ...`` with more than one run draws ``curves.png``: a panel per tracked
metric (held-out success ``val-core/*``, the batch reward ``critic/score/mean``, the mixed-group share
``neos_groups/mixed_share``, each credit type's share of the judged failures' turns ``neos_credit/turn_share/*``, the
MEI version ``mei/version_index``), each run a thin line in its group's colour and each group's mean over its runs a
thick one. A run's group is its parent directory's name: ``bench/learning_curve.py`` writes
``OUT/<estimator>/seed<S>/``, so the groups are the estimators. ``curves.json`` holds the means (step, mean, runs).

A run resumed after a cut (``metrics-1.jsonl``, ``metrics-2.jsonl``, ...) logs some steps twice (its validation
before training, the steps after its last checkpoint): the later attempt's value wins.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

from verl_ext.eval.training import _file_logger, _is_metric_file, read_metrics
from verl_ext.walkthrough.plots import _save, plt

TRACKED = ("val-core/", "critic/score/mean", "neos_groups/mixed_share", "neos_credit/turn_share/",
           "mei/version_index")
PANEL_COLUMNS = 3

Series = dict[str, list[tuple[int, float]]]


def _natural(path: Path) -> list:
    """``metrics-10`` after ``metrics-9``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def run_series(path: Path) -> Series:
    """A run's metrics: its directory's file-logger JSONL, attempts in order with the later one winning a step both
    logged; a single file, or a directory with none (TensorBoard, console output), as ``read_metrics`` reads it."""
    files = sorted((f for f in path.glob("*.jsonl") if _is_metric_file(f)), key=_natural) if path.is_dir() else []
    if not files:
        return read_metrics(path)
    merged: dict[str, dict[int, float]] = defaultdict(dict)
    for file in files:
        for key, points in _file_logger([file]).items():
            merged[key].update(points)
    return {key: sorted(points.items()) for key, points in merged.items()}


def group_means(runs: dict[str, Series]) -> dict[str, list[tuple[int, float, int]]]:
    """metric -> [(step, mean over the runs that logged it, how many did)]."""
    by_step: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for series in runs.values():
        for key, points in series.items():
            for step, value in points:
                by_step[key][step].append(value)
    return {key: [(step, sum(v) / len(v), len(v)) for step, v in sorted(steps.items())]
            for key, steps in by_step.items()}


def overlay_plots(paths: list[Path], out: Path) -> list[Path]:
    """``curves.png`` and ``curves.json`` for the runs at ``paths``, grouped by their parent directory's name."""
    runs: dict[str, dict[str, Series]] = defaultdict(dict)
    for path in paths:
        runs[path.resolve().parent.name][path.name] = run_series(path)
    means = {group: group_means(members) for group, members in runs.items()}
    logged = {key for members in runs.values() for series in members.values() for key in series}
    keys = [k for prefix in TRACKED for k in sorted(logged) if k == prefix or (prefix.endswith("/")
                                                                               and k.startswith(prefix))]
    if not keys:
        raise ValueError(f"{', '.join(map(str, paths))}: none of the tracked metrics is logged "
                         f"({', '.join(TRACKED)})")
    out.mkdir(parents=True, exist_ok=True)
    columns = min(PANEL_COLUMNS, len(keys))
    rows = -(-len(keys) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 2.8 * rows + 0.8), squeeze=False)
    colours = {group: f"C{i}" for i, group in enumerate(sorted(runs))}
    for ax, key in zip(axes.flat, keys):
        for group, members in sorted(runs.items()):
            for series in members.values():
                if key in series:
                    ax.plot(*zip(*series[key]), color=colours[group], alpha=0.3, linewidth=0.8)
            if key in means[group]:
                steps, values, _ = zip(*means[group][key])
                ax.plot(steps, values, color=colours[group], linewidth=2, marker=".",
                        label=f"{group} (mean of {len(members)})")
        ax.set_title(key, fontsize=8)
        ax.set_xlabel("training step", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("learning curves: each run (thin) and its group's mean (thick)")
    summary = out / "curves.json"
    summary.write_text(json.dumps({"runs": {g: sorted(m) for g, m in sorted(runs.items())},
                                   "means": {g: {k: means[g][k] for k in keys if k in means[g]}
                                             for g in sorted(runs)}}, indent=1) + "\n")
    return [_save(fig, out / "curves.png"), summary]


def first_and_last(summary: Path) -> list[str]:
    """One line per group and held-out metric: its mean at the first and the last step logged, e.g. for the docs."""
    data = json.loads(summary.read_text())
    return [f"{group}: {key} {points[0][1]:.3f} (step {points[0][0]}) -> {points[-1][1]:.3f} (step {points[-1][0]}),"
            f" {len(data['runs'][group])} runs"
            for group, metrics in data["means"].items() for key, points in metrics.items()
            if key.startswith("val-core/")]
