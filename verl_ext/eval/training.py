"""Training-time analytics: a run's logged metrics to plots with one command (no verl import).

Reads verl's file logger output (``trainer.logger=['console','file']``: one ``{"step": N, "data": {...}}`` JSON
line per step, at ``$VERL_FILE_LOGGER_PATH`` or ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``), or the
event files of its ``tensorboard`` logger (``$TENSORBOARD_DIR``), and draws each metric family that is present over
the training steps:

- ``tool_use.png``: tool calls per trajectory by tool, ``neos_tools/calls_per_trajectory/*`` (Neos Fig. 6);
- ``credit_composition.png``: turn shares of the judged failures by credit type, ``neos_credit/turn_share/*``
  (Neos Fig. 9), stacked;
- ``sampler.png``: ``neos_sampler/*`` (the mixed-group sampler); ``mei.png``: ``mei/*`` (MEI co-evolution);
- ``reward.png``: ``critic/score/mean`` and every ``val-core/*`` accuracy.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from verl_ext.credit.labels import CREDIT_TYPES
from verl_ext.eval.benchmarks import json_lines
from verl_ext.walkthrough.plots import COLOURS, _save, plt

FAMILIES = {
    "tool_use.png": ("neos_tools/calls_per_trajectory/", "tool calls per trajectory (Neos Fig. 6)"),
    "credit_composition.png": ("neos_credit/turn_share/", "credit-type share of judged failures' turns (Neos Fig. 9)"),
    "sampler.png": ("neos_sampler/", "mixed-group sampler"),
    "mei.png": ("mei/", "MEI co-evolution"),
}


def read_metrics(path: Path) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(step, value)] from verl's file logger JSONL (a file, or every ``*.jsonl`` under a directory) or,
    where a directory holds no JSONL, from its TensorBoard event files (verl's ``tensorboard`` logger)."""
    files = sorted(path.rglob("*.jsonl")) if path.is_dir() else [path]
    if not files and path.is_dir() and any(path.rglob("events.out.tfevents.*")):
        return _tensorboard_scalars(path)
    if not files:
        raise ValueError(f"{path}: no *.jsonl metric files (verl's file logger writes <experiment>.jsonl) and no "
                         "TensorBoard event files")
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for file in files:
        for number, row in json_lines(file):
            try:
                step, data = int(row["step"]), dict(row["data"])
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{file}:{number}: not a file-logger line {{\"step\", \"data\"}} ({exc})") from None
            for key, value in data.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    series[key].append((step, float(value)))
    return {k: sorted(v) for k, v in series.items()}


def _tensorboard_scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files under ``path`` (TensorBoard's own reader; verl depends on tensorboard)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for run in sorted({f.parent for f in path.rglob("events.out.tfevents.*")}):
        accumulator = EventAccumulator(str(run), size_guidance={"scalars": 0})  # 0: keep every point
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            series[tag] += [(e.step, float(e.value)) for e in accumulator.Scalars(tag)]
    return {k: sorted(v) for k, v in series.items()}


def training_plots(path: Path, out: Path) -> list[Path]:
    series = read_metrics(path)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, (prefix, title) in FAMILIES.items():
        keys = sorted(k for k in series if k.startswith(prefix))
        if not keys:
            continue
        fig, ax = plt.subplots(figsize=(9, 4))
        if name == "credit_composition.png":
            kinds = [k for k in CREDIT_TYPES if prefix + k in series]
            steps = [s for s, _ in series[prefix + kinds[0]]]
            ax.stackplot(steps, *[[v for _, v in series[prefix + k]] for k in kinds], labels=kinds,
                         colors=[COLOURS[k] for k in kinds])
            ax.set_ylim(0, 1)
        else:
            for key in keys:
                ax.plot(*zip(*series[key]), marker=".", label=key.removeprefix(prefix))
        ax.set_xlabel("training step")
        ax.set_title(title)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
        written.append(_save(fig, out / name))
    rewards = [k for k in series if k == "critic/score/mean" or k.startswith("val-core/")]
    if rewards:
        fig, ax = plt.subplots(figsize=(9, 4))
        for key in sorted(rewards):
            ax.plot(*zip(*series[key]), marker=".", label=key)
        ax.set_xlabel("training step")
        ax.set_title("reward and validation accuracy")
        ax.legend(fontsize=7)
        written.append(_save(fig, out / "reward.png"))
    if not written:
        raise ValueError(f"{path}: none of the plotted metric families is logged "
                         f"({', '.join(p for p, _ in FAMILIES.values())}, critic/score/mean, val-core/*)")
    return written
