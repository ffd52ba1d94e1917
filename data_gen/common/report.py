"""The statistics report's plots: one bar chart per distribution (hops, modality path types, labels, rejections per
filter, answer types), written as PNG files beside ``stats.json`` with matplotlib's non-interactive backend."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

LONG_LABEL = 24  # characters; a longer category label gets horizontal bars, its label written in full beside them


def bar_charts(charts: Mapping[str, Mapping[str, int]], out: Path, title_prefix: str) -> list[str]:
    """One ``<name>.png`` per chart under ``out``; returns the file names written. Empty charts are skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, counts in charts.items():
        if not counts:
            continue
        labels = [str(k) for k in counts]
        longest = max(len(label) for label in labels)
        if longest > LONG_LABEL:  # skeletons, relation paths: rotated under a column they were cut off; read across
            fig, ax = plt.subplots(figsize=(4.0 + 0.065 * longest, 0.9 + 0.28 * len(labels)))
            bars = ax.barh(labels, list(counts.values()), color="#4C72B0")
            ax.invert_yaxis()  # top to bottom in stats.json's order
            ax.tick_params(axis="y", labelsize=8)
        else:
            fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * len(labels) + 2), 3.2))
            bars = ax.bar(labels, list(counts.values()), color="#4C72B0")
            ax.tick_params(axis="x", labelrotation=45 if len(labels) > 4 else 0, labelsize=8)
        ax.bar_label(bars, fontsize=8)
        (ax.xaxis if longest > LONG_LABEL else ax.yaxis).set_major_locator(MaxNLocator(integer=True))  # counts
        ax.set_title(f"{title_prefix}: {name.replace('_', ' ')}", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / f"{name}.png", dpi=100)
        plt.close(fig)
        written.append(f"{name}.png")
    return written
