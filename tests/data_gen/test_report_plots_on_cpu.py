"""The statistics plots beside ``stats.json``: a chart of long category labels (question skeletons) is drawn with
horizontal bars and its labels in full; under rotated columns they were cut off and matplotlib warned that the
layout could not fit them."""

from __future__ import annotations

import warnings

from PIL import Image

from data_gen.common.report import bar_charts

SKELETONS = {  # a 12-task Neos run's skeleton counts (stats.json, diversity.skeletons)
    "path: shares border with* > capital of": 3,
    "path: shares border with* > official language": 2,
    "path: shares border with* > part of": 2,
    "path: part of > part of* > capital of": 1,
    "path: part of > part of* > country of citizenship": 1,
    "path: shares border with* > country of citizenship": 1,
    "path: shares border with* > currency": 1,
    "convergent: part of > part of* > shares border with* > official language": 1,
}


def test_long_labels_get_horizontal_bars_that_fit_and_short_ones_columns(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Tight layout not applied": the labels did not fit
        written = bar_charts({"skeletons": SKELETONS, "hops": {"2": 7, "3": 5}, "empty": {}}, tmp_path, "Neos")
    assert written == ["skeletons.png", "hops.png"]
    # 100 dpi; horizontal: 4 + 0.065 x 72 characters wide, 0.9 + 0.28 x 8 bars high; columns: at least 4 x 3.2
    assert Image.open(tmp_path / "skeletons.png").size == (868, 314)
    assert Image.open(tmp_path / "hops.png").size == (400, 320)


def test_neos_filters_and_seed_level_counts_are_charted_apart(tmp_path):
    # A 60-task run: 25,387 identifiability rejections (per DAG) beside 432 entry-image ablations (per candidate);
    # in one chart (before 2026-12-06) the evidence rules' bars were under 2% of its width.
    from data_gen.neos.cli import plot_data, plots

    stats = {"hops": {"2": 40}, "modality_path_types": {"I-T": 60}, "labels": {"search_required": 60},
             "filters": {"entry_image_ablation": {"entering": 828, "rejected": 432, "rate": 0.52},
                         "checkpoint_ablation": {"entering": 396, "rejected": 110, "rate": 0.28}},
             "seed_level": {"identifiability:multiple_endpoints": 25387, "no_structure": 1256},
             "answer_types": {"city": 60}, "diversity": {"relations": {"P36": 60}, "skeletons": {"p: P36": 60},
                                                         "top_answers": {"Minsk": 1}}}
    charts = plot_data(stats)
    assert charts["rejections_per_filter"] == {"entry_image_ablation": 432, "checkpoint_ablation": 110}
    assert charts["seed_level_rejections"] == {"identifiability:multiple_endpoints": 25387, "no_structure": 1256}
    assert {"rejections_per_filter.png", "seed_level_rejections.png"} <= set(plots(stats, tmp_path))
