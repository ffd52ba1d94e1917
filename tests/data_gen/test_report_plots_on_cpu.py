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
