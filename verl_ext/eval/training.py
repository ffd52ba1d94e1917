"""Training-time analytics: a run's logged metrics to plots with one command (no verl import).

Reads verl's file logger output (``trainer.logger=['console','file']``: one ``{"step": N, "data": {...}}`` JSON
line per step, at ``$VERL_FILE_LOGGER_PATH`` or ``$VERL_FILE_LOGGER_ROOT/<project>/<experiment>.jsonl``), or the
event files of its ``tensorboard`` logger (``$TENSORBOARD_DIR``), or, failing both, the captured output of its
``console`` logger (``step:N - key:value - ...`` lines, Ray's ``(TaskRunner pid=...)`` prefix allowed, in ``*.log``,
``*.out`` or ``*.txt`` files), and draws each metric family that is present over the training steps:

- ``tool_use.png``: tool calls per trajectory by tool, ``neos_tools/calls_per_trajectory/*`` (Neos Fig. 6);
- ``credit_composition.png``: turn shares of the judged failures by credit type, ``neos_credit/turn_share/*``
  (Neos Fig. 9), stacked;
- ``sampler.png``: ``neos_sampler/*`` (the mixed-group sampler); ``mei.png``: ``mei/*`` (MEI co-evolution); one
  panel per metric, since these families mix counts, shares, losses, tokens and seconds;
- ``groups.png``: ``neos_groups/*``, the batch's groups by outcome mix (mixed, all success, all failure);
- ``reward.png``: ``critic/score/mean`` and every ``val-core/*`` accuracy.

Several runs on one figure: :mod:`verl_ext.eval.curves`.

A run directory also holds other JSONL (verl's validation and rollout dumps, ``{step}.jsonl``): in a directory only
files whose first line is a file-logger line are read; a bad line further down such a file is an error.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import defaultdict
from pathlib import Path

from verl_ext.credit.labels import CREDIT_TYPES
from verl_ext.eval.benchmarks import json_lines
from verl_ext.walkthrough.plots import COLOURS, _save, plt

logger = logging.getLogger(__name__)
FAMILIES = {
    "tool_use.png": ("neos_tools/calls_per_trajectory/", "tool calls per trajectory (Neos Fig. 6)"),
    "credit_composition.png": ("neos_credit/turn_share/", "credit-type share of judged failures' turns (Neos Fig. 9)"),
    "sampler.png": ("neos_sampler/", "mixed-group sampler"),
    "mei.png": ("mei/", "MEI co-evolution"),
    "groups.png": ("neos_groups/", "the batch's groups by outcome mix"),
}
PANELLED = frozenset({"sampler.png", "mei.png"})  # metrics of unlike units: a panel each
PANEL_COLUMNS = 3
CONSOLE_SUFFIXES = (".log", ".out", ".txt")  # where a run's captured stdout usually goes
_CONSOLE_LINE = re.compile(r"(?:^|[\s)])step:(\d+) - (.*)$")  # after Ray's "(TaskRunner pid=...)" prefix, if any
_NUMPY_SCALAR = re.compile(r"np\.\w+\((.*)\)")  # numpy 2's repr of a scalar: np.float64(0.5)


def _is_metric_file(path: Path) -> bool:
    """Whether the first non-blank line is ``{"step": N, "data": {...}}`` (verl's file logger), not a dump line."""
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    return False
                return isinstance(row, dict) and "step" in row and isinstance(row.get("data"), dict)
    return False


def read_metrics(path: Path) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(step, value)] from verl's file logger JSONL (a file, or every such ``*.jsonl`` under a directory),
    else the directory's TensorBoard event files, else console output (a file of another suffix, or every
    ``*.log``/``*.out``/``*.txt`` under the directory holding ``step:N - ...`` lines)."""
    if path.is_file():
        return _file_logger([path]) if path.suffix == ".jsonl" else _console([path], path)
    found = sorted(path.rglob("*.jsonl"))
    files = [f for f in found if _is_metric_file(f)]
    if len(files) < len(found):
        logger.info("%s: %d JSONL files that are not file-logger output (e.g. validation dumps) skipped", path,
                    len(found) - len(files))
    if files:
        return _file_logger(files)
    if any(path.rglob("events.out.tfevents.*")):
        return _tensorboard_scalars(path)
    return _console(sorted(f for suffix in CONSOLE_SUFFIXES for f in path.rglob(f"*{suffix}") if f.is_file()), path)


def _console_number(text: str) -> float | None:
    """A number as ``pprint`` writes it (``0.5``, ``3``, ``nan``, ``np.float64(0.5)``); None for ``True`` etc."""
    numpy = _NUMPY_SCALAR.fullmatch(text)
    try:
        return float(numpy.group(1) if numpy else text)
    except ValueError:
        return None


def _file_logger(files: list[Path]) -> dict[str, list[tuple[int, float]]]:
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


def _console(files: list[Path], path: Path) -> dict[str, list[tuple[int, float]]]:
    """The metrics of verl's console logger lines (``concat_dict_to_str``: ``step:N - key:value - ...``, values as
    ``pprint`` writes numbers, ``np.float64(0.5)`` included); other lines are skipped."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for file in files:
        with file.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                match = _CONSOLE_LINE.search(line)
                if not match:
                    continue
                step = int(match.group(1))
                for part in match.group(2).rstrip().split(" - "):
                    key, _, text = part.rpartition(":")
                    value = _console_number(text)
                    if key and value is not None:
                        series[key].append((step, value))
    if not series:
        raise ValueError(f"{path}: no metric JSONL (verl's file logger writes <experiment>.jsonl, lines "
                         '{"step", "data"}), no TensorBoard event files and no console-logger lines '
                         "(step:N - key:value - ...)")
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
        if name in PANELLED:
            written.append(_panels(series, keys, prefix, title, out / name))
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


def _panels(series: dict[str, list[tuple[int, float]]], keys: list[str], prefix: str, title: str, path: Path) -> Path:
    """One small panel per metric, ``PANEL_COLUMNS`` to a row, sharing the step axis."""
    columns = min(PANEL_COLUMNS, len(keys))
    rows = math.ceil(len(keys) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 2.2 * rows + 0.6), sharex=True, squeeze=False)
    for ax, key in zip(axes.flat, keys):
        ax.plot(*zip(*series[key]), marker=".")
        ax.set_title(key.removeprefix(prefix), fontsize=8)
        ax.tick_params(labelsize=7, labelbottom=True)  # also above a hidden panel
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.supxlabel("training step", fontsize=8)
    return _save(fig, path)
