"""Training-time analytics from verl's file logger output: one command turns the metrics JSONL into plots."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from verl_ext.eval.__main__ import main
from verl_ext.eval.training import read_metrics, training_plots


def _log(path, steps: int) -> None:
    """Lines as verl's ``FileLogger.log`` writes them: {"step": N, "data": {...}}."""
    with path.open("w") as fh:
        for step in range(1, steps + 1):
            data = {"critic/score/mean": 0.1 * step, "neos_tools/calls_per_trajectory/TextSearch": 3.0 - 0.2 * step,
                    "neos_tools/calls_per_trajectory/FetchImage": 0.5 * step, "neos_sampler/admitted": 40 + step,
                    "neos_credit/turn_share/productive": 0.5, "neos_credit/turn_share/causal_error": 0.2,
                    "neos_credit/turn_share/re_derailment": 0.0, "neos_credit/turn_share/downstream": 0.2,
                    "neos_credit/turn_share/recovery": 0.05, "neos_credit/turn_share/neutral": 0.05,
                    "timing_s/gen": 12.5, "note": "text values are skipped"}
            fh.write(json.dumps({"step": step, "data": data}) + "\n")


def test_one_command_makes_the_plots(tmp_path, capsys) -> None:
    run = tmp_path / "logs" / "neos"
    run.mkdir(parents=True)
    _log(run / "exp1.jsonl", 4)
    # the run directory also holds verl's validation dump (trainer.validation_data_dir): lines of another shape
    (run / "val").mkdir()
    (run / "val" / "4.jsonl").write_text(json.dumps({"input": "q", "output": "a", "gts": "a", "score": 1.0,
                                                     "step": 4}) + "\n")
    assert main(["training", str(tmp_path / "logs"), "--out", str(tmp_path / "plots")]) == 0
    names = {p.split("/")[-1] for p in capsys.readouterr().out.split()}
    assert names == {"tool_use.png", "credit_composition.png", "sampler.png", "reward.png"}  # no mei/* logged
    with Image.open(tmp_path / "plots" / "credit_composition.png") as im:
        assert im.width > 500
    series = read_metrics(run / "exp1.jsonl")
    assert series["neos_tools/calls_per_trajectory/FetchImage"] == [(1, 0.5), (2, 1.0), (3, 1.5), (4, 2.0)]
    assert "note" not in series


def test_mei_and_sampler_metrics_get_a_panel_each(tmp_path, monkeypatch) -> None:
    """MEI's loss (about 1) and its tokens (thousands) on one axis would show the loss as a flat line at 0."""
    from verl_ext.eval import training

    panels = {}

    def save(fig, path):
        panels[path.name] = sorted(ax.get_title() for ax in fig.axes if ax.get_visible())
        return original(fig, path)

    original = training._save
    monkeypatch.setattr(training, "_save", save)
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps({"step": s, "data": {"mei/loss": 1.0 / s, "mei/tokens": 4000.0 * s,
                                                             "mei/seconds": 30.0, "mei/update/version": float(s),
                                                             "neos_sampler/carried": 2.0,
                                                             "neos_sampler/selected_success_share": 0.5}}) + "\n"
                            for s in (1, 2, 3)))
    training_plots(path, tmp_path / "plots")
    assert panels["mei.png"] == ["loss", "seconds", "tokens", "update/version"]
    assert panels["sampler.png"] == ["carried", "selected_success_share"]


def test_console_logger_output_reads_the_same(tmp_path) -> None:
    """A run with only verl's console logger: its captured stdout, lines written by verl's own ``concat_dict_to_str``
    behind Ray's actor prefix, numpy scalars among the values, other output around them."""
    import numpy as np
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    lines = ["Creating file logger at nowhere", "(TaskRunner pid=4242) Training Progress: 50%"]
    for step in (1, 2):
        data = {"neos_tools/calls_per_trajectory/FetchImage": np.float64(0.5 * step), "mei/steps": step,
                "neos_credit/turn_share/productive": 0.25, "val-core/neos/acc/mean@5": -0.0, "flag": True}
        lines.append(f"(TaskRunner pid=4242) {concat_dict_to_str(data, step=step)}")
    assert "np.float64(0.5)" in lines[2]  # numpy 2 writes its scalars so
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "main_ppo.log").write_text("\n".join(lines) + "\n")
    series = read_metrics(tmp_path / "run")
    assert series["neos_tools/calls_per_trajectory/FetchImage"] == [(1, 0.5), (2, 1.0)]
    assert series["mei/steps"] == [(1, 1.0), (2, 2.0)] and series["val-core/neos/acc/mean@5"] == [(1, 0.0), (2, 0.0)]
    assert "flag" not in series and read_metrics(tmp_path / "run" / "main_ppo.log") == series
    written = training_plots(tmp_path / "run", tmp_path / "plots")
    assert sorted(p.name for p in written) == ["credit_composition.png", "mei.png", "reward.png", "tool_use.png"]
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.log").write_text("no metrics here\n")
    with pytest.raises(ValueError, match="no console-logger lines"):
        read_metrics(tmp_path / "empty")


def test_bad_metric_lines_name_file_and_line(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    _log(path, 2)
    path.write_text(path.read_text() + '{"data": {}}\n')
    with pytest.raises(ValueError, match=rf"^{path}:3: not a file-logger line"):
        read_metrics(path)
    (tmp_path / "other.jsonl").write_text(json.dumps({"step": 1, "data": {"actor/lr": 1e-6}}) + "\n")
    with pytest.raises(ValueError, match="none of the plotted metric families"):
        training_plots(tmp_path / "other.jsonl", tmp_path / "out")


def test_tensorboard_event_files_read_the_same(tmp_path) -> None:
    """verl's tensorboard logger writes through torch's SummaryWriter: the same series come back."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb" / "neos" / "exp1"))
    for step in (1, 2, 3):
        writer.add_scalar("neos_tools/calls_per_trajectory/FetchImage", 0.5 * step, step)
        writer.add_scalar("neos_credit/turn_share/productive", 0.25, step)
    writer.close()
    series = read_metrics(tmp_path / "tb")
    assert series["neos_tools/calls_per_trajectory/FetchImage"] == [(1, 0.5), (2, 1.0), (3, 1.5)]
    written = training_plots(tmp_path / "tb", tmp_path / "plots")
    assert sorted(p.name for p in written) == ["credit_composition.png", "tool_use.png"]


def _curve(path, values: dict[int, float], extra: dict | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"step": s, "data": {"val-core/neos/acc/mean@2": v, **(extra or {})}}) + "\n"
                            for s, v in values.items()))


def test_several_runs_overlay_grouped_by_estimator_with_each_groups_mean(tmp_path, capsys) -> None:
    # bench/learning_curve.py's layout: OUT/<estimator>/seed<S>/metrics-<attempt>.jsonl. grpo/seed2 was cut after
    # step 5 and resumed: its second attempt logs step 5 again (0.3, not the first attempt's 0.9) and step 10.
    out = tmp_path / "curve"
    _curve(out / "neos_turn_credit" / "seed1" / "metrics-1.jsonl", {0: 0.2, 5: 0.3, 10: 0.5},
           {"neos_groups/mixed_share": 0.5, "mei/version_index": 1.0})
    _curve(out / "neos_turn_credit" / "seed2" / "metrics-1.jsonl", {0: 0.2, 5: 0.4, 10: 0.6})
    _curve(out / "grpo" / "seed1" / "metrics-1.jsonl", {0: 0.2, 5: 0.2, 10: 0.3})
    _curve(out / "grpo" / "seed2" / "metrics-1.jsonl", {0: 0.2, 5: 0.9})
    _curve(out / "grpo" / "seed2" / "metrics-2.jsonl", {5: 0.3, 10: 0.4})
    (out / "grpo" / "seed2" / "mei").mkdir()
    (out / "grpo" / "seed2" / "mei" / "mei.jsonl").write_text('{"call_id": "x"}\n')  # the tool server's MEI log
    runs = sorted(str(p) for p in out.glob("*/seed*"))
    assert main(["training", *runs, "--out", str(tmp_path / "plots")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [p.rsplit("/", 1)[-1] for p in printed[:2]] == ["curves.png", "curves.json"]
    summary = json.loads((tmp_path / "plots" / "curves.json").read_text())
    assert summary["runs"] == {"grpo": ["seed1", "seed2"], "neos_turn_credit": ["seed1", "seed2"]}
    def rounded(points):  # [step, mean, runs]
        return [[s, round(v, 9), n] for s, v, n in points]

    grpo = summary["means"]["grpo"]["val-core/neos/acc/mean@2"]
    assert rounded(grpo) == [[0, 0.2, 2], [5, 0.25, 2], [10, 0.35, 2]]
    ours = summary["means"]["neos_turn_credit"]
    assert rounded(ours["val-core/neos/acc/mean@2"]) == [[0, 0.2, 2], [5, 0.35, 2], [10, 0.55, 2]]
    assert rounded(ours["neos_groups/mixed_share"]) == [[0, 0.5, 1], [5, 0.5, 1], [10, 0.5, 1]]
    assert "neos_groups/mixed_share" not in summary["means"]["grpo"]  # not logged there: no made-up zero
    assert "grpo: val-core/neos/acc/mean@2 0.200 (step 0) -> 0.350 (step 10), 2 runs" in printed
    with Image.open(tmp_path / "plots" / "curves.png") as im:
        assert im.width > 800  # three panels: success, mixed share, MEI version


def test_overlay_of_runs_without_tracked_metrics_is_one_line(tmp_path, capsys) -> None:
    for seed in (1, 2):
        (tmp_path / "grpo" / f"seed{seed}").mkdir(parents=True)
        (tmp_path / "grpo" / f"seed{seed}" / "m.jsonl").write_text('{"step": 1, "data": {"timing_s/gen": 3.0}}\n')
    with pytest.raises(SystemExit) as exit_:
        main(["training", str(tmp_path / "grpo" / "seed1"), str(tmp_path / "grpo" / "seed2"), "--out",
              str(tmp_path / "plots")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none of the tracked metrics is logged" in err
