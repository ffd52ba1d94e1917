"""The walkthrough end to end on 2 questions x G = 4: real tasks solved by the programmatic expert, the scripted
behaviour policy through verl's agent loop and a real tool server, the reward manager, the group judge and verl's
``compute_advantage``; then the report. Expected advantages are recomputed independently from the labels with the
framework-free per-token function (``rescale_advantages``), not with the run-based path the estimator uses."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from data_gen.neos.agents import ProgrammaticExpert
from data_gen.neos.store import ResultLog
from data_gen.neos.synth import Synthesizer
from neos_core.neos_tasks import Outcome
from neos_core.world.sources import default_cache_dir
from neos_core.world.store import World
from tool_server.launch import served
from verl_ext.credit import rescale_advantages
from verl_ext.tools.client import ToolServerClient
from verl_ext.walkthrough.__main__ import main as walkthrough_main
from verl_ext.walkthrough.__main__ import walkthrough
from verl_ext.walkthrough.behaviour import (
    BEHAVIOURS,
    Call,
    Distractor,
    ScriptedBehaviourPolicy,
    draw_plans,
    make_plan,
)
from verl_ext.walkthrough.pipeline import group_plans
from verl_ext.walkthrough.questions import load_questions
from verl_ext.walkthrough.report import adv_mass
from verl_ext.walkthrough.rollouts import RolloutSettings

QUESTIONS, G = 2, 4


async def _verified_tasks(url: str, world: World, out, n: int) -> None:
    """The first ``n`` synthesised tasks the expert solves, written as ``python -m data_gen neos`` writes them
    (the probes are skipped: they only reject tasks, and the walkthrough reads verified ones)."""
    synth = Synthesizer(world, seed=0)
    log = ResultLog(out / "results.jsonl")
    found = 0
    async with ToolServerClient(url) as client:
        expert = ProgrammaticExpert(client)
        for seed_entity in synth.seeds():
            for cand in synth.synthesize(seed_entity).candidates:
                if cand.task is None:
                    continue
                solved, record, _ = await expert.solve(cand.task)
                if solved:
                    log.append(Outcome(key=cand.key, status="verified", task=cand.task,
                                       trajectory=record.model_dump(mode="json")))
                    found += 1
                if found == n:
                    log.close()
                    return
    raise AssertionError(f"the small world yields fewer than {n} verified tasks")


def _mixed_with_wrong_entity(plans) -> bool:
    return any(p.variant == "wrong_entity" for p in plans) and any(p.expected_success for p in plans)


@pytest.fixture(scope="module")
def run(small_world, tiny_vl_model, tiny_vl_processor, tmp_path_factory):
    """Tasks from a first tool server, then the CLI's own ``walkthrough`` (its own server) with short observations
    (fewer tokens to score on CPU)."""
    tmp = tmp_path_factory.mktemp("walkthrough")
    world = World.load(small_world)
    cache = default_cache_dir() / "tool-server"  # the session world's image features (tests/conftest.py)
    with served(small_world, "--cache-dir", str(cache), "--no-ocr", "--mei-log", str(tmp / "mei.jsonl")) as url:
        asyncio.run(_verified_tasks(url, world, tmp, QUESTIONS))
    questions = load_questions(tmp, world, QUESTIONS)
    # The first seed whose draw puts a wrong_entity failure beside a success (the plans are pure: no rollout needed).
    seed = next(s for s in range(1000) if any(_mixed_with_wrong_entity(group_plans(q, G, s)) for q in questions))
    settings = RolloutSettings(max_tool_response_length=400)
    result, summary = walkthrough(small_world, questions, tmp / "report", tiny_vl_model, tiny_vl_processor,
                                  group_size=G, seed=seed, cache_dir=cache, settings=settings)
    return result, summary, tmp / "report"


def test_groups_hold_the_scripted_outcomes_and_at_least_one_is_mixed(run):
    result, _, _ = run
    assert len(result.groups) == QUESTIONS and all(len(g.rollouts) == G for g in result.groups)
    assert any(g.mixed for g in result.groups)
    for r in result.rollouts:
        # The reward manager's verdict is the script's design: expert paths and wasted searches answer right.
        assert r.success == r.plan.expected_success, (r.variant, r.prediction)
        assert r.record.termination_reason == "answer" and r.prediction == r.record.final_answer
        assert r.reward in (0.0, 1.0)
        # One real log-prob per response token; the scripted tokens are unlikely under a random model.
        assert len(r.logprobs) == len(r.response_mask)
        policy = [lp for lp, m in zip(r.logprobs, r.response_mask) if m]
        assert np.isfinite(policy).all() and max(policy) < 0


def test_only_failures_of_mixed_groups_are_judged(run):
    result, _, _ = run
    for g in result.groups:
        for r in g.rollouts:
            assert (r.labels is not None) == (g.mixed and not r.success)
            if r.labels is not None:
                assert r.labels.assessed and r.labels.judge == "offline_path"
                assert len(r.types) == len(r.record.turns) == r.labels.num_turns


def test_a_wrong_entity_failure_is_blamed_once_and_nothing_after_its_detour_earns_credit(run):
    """The offline judge blames the first off-path turn after the last productive one: the search for the wrong
    entity, or an earlier expert call that names no path item (a FetchImage, say); all that follows is downstream."""
    result, _, _ = run
    wrong = [r for r in result.rollouts if r.variant == "wrong_entity" and r.types]
    assert wrong, "the fixture's seed puts a wrong_entity failure in a mixed group, so it must be judged"
    for r in wrong:
        k = r.plan.deviation_turn  # its search for the wrong entity; then its visit and its answer
        why = f"deviation at turn {k}, labels {r.types}"
        assert r.types.count("causal_error") == 1 and r.types.index("causal_error") <= k, why
        assert r.types[k + 1 :] == ["downstream"] * (len(r.types) - k - 1), why
        assert "productive" in r.types[:k], why


def test_token_advantages_follow_eq7_on_failures_and_grpo_elsewhere(run):
    result, _, _ = run
    params = result.params
    for r in result.rollouts:
        mask = np.asarray(r.response_mask, dtype=bool)
        np.testing.assert_array_equal(r.advantages[~mask], 0.0)  # observations carry no advantage
        a = r.grpo_value
        np.testing.assert_allclose(r.grpo[mask], a)
        if r.types is None:  # successes and unjudged failures keep the GRPO value on every token
            np.testing.assert_array_equal(r.advantages[mask], r.grpo[mask])
            continue
        b = -a
        tokens = r.advantages[mask]
        assert b > 0 and tokens.sum() < 0
        assert tokens.min() >= -params.M * b - 1e-5 and tokens.max() <= params.lambda_c * b + 1e-5
        weights = r.labels.weights(params)
        raw = [b * weights[t.index] for t in r.record.turns for _ in range(t.span[1] - t.span[0])]
        np.testing.assert_allclose(tokens, rescale_advantages(raw, a, params), rtol=1e-5, atol=1e-6)


def test_the_report_carries_the_returned_numbers_and_valid_plots(run):
    result, summary, out = run
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["trajectories"] == QUESTIONS * G
    assert summary["successes"] == sum(r.success for r in result.rollouts)
    assert summary["mixed_groups"] == sum(g.mixed for g in result.groups)
    assert summary["assessed_failures"] == sum(r.types is not None for r in result.rollouts)
    assert sum(summary["credit_composition"].values()) == sum(len(r.types or ()) for r in result.rollouts)
    rows = [row for g in summary["groups"] for row in g["rollouts"]]
    for row, r in zip(rows, result.rollouts):
        mask = np.asarray(r.response_mask, dtype=bool)
        assert row["advantage_sum"] == pytest.approx(float(r.advantages[mask].sum()))
        assert (row["variant"], row["reward"], row["turns"]) == (r.variant, r.reward, len(r.record.turns))
    report = (out / "report.md").read_text()
    assert f"{summary['successes']} correct; mixed groups: {summary['mixed_groups']};" in report
    assert "scripted behaviour policy" in report
    assert all(f"| `{variant}` | {text} |" in report for variant, text in BEHAVIOURS.items())
    assert "recovery followed by a re-derailment" in report
    for name in ("group_outcomes", "credit_composition", "token_advantages", "tool_calls"):
        assert f"]({name}.png)" in report
        _assert_png(out / f"{name}.png", min_width=400)
    for g, row in zip(result.groups, summary["groups"]):
        assert f"> {g.question}" in report
        assert len(row["images"]) == len(g.images) >= 1
        for path, image in zip(row["images"], g.images):
            assert f'<img src="{path}"' in report
            _assert_png(out / path, min_width=1)
            with Image.open(out / path) as saved:
                assert saved.size == image.size
    assert "`mei.jsonl`: the tool server's MEI log" in report


def _assert_png(path, min_width: int) -> None:
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width >= min_width
        image.verify()


def test_mean_logprob_is_over_policy_tokens_and_near_uniform_for_a_random_model(run):
    """Observation tokens carry 0.0 placeholders in the rollout's log-probs; averaged in, they would pull the mean
    of a random model (about -ln V per token) towards 0."""
    result, summary, _ = run
    rows = [row for g in summary["groups"] for row in g["rollouts"]]
    uniform = -np.log(result.vocab_size)
    assert summary["vocab_size"] == result.vocab_size > 150_000
    for row, r in zip(rows, result.rollouts):
        policy = [lp for lp, m in zip(r.logprobs, r.response_mask) if m]
        observations = [lp for lp, m in zip(r.logprobs, r.response_mask) if not m]
        assert row["mean_logprob"] == pytest.approx(np.mean(policy))
        assert abs(row["mean_logprob"] - uniform) < 0.5, (row["mean_logprob"], uniform)
        assert observations and set(observations) == {0.0}  # every rollout saw tool results


def test_adv_mass_sums_positive_and_negative_token_advantages():
    assert adv_mass(np.array([0.5, -1.0, 0.0, -0.25, 2.0])) == (2.5, 1.25)
    assert adv_mass(np.array([])) == (0.0, 0.0)


def test_the_grpo_vs_turn_credit_table_matches_the_estimator_and_the_grpo_values(run):
    result, summary, out = run
    table = summary["adv_mass"]
    batch = table["all trajectories (the batch)"]
    assert batch["trajectories"] == len(result.rollouts)
    for key in ("pos_adv_mass", "neg_adv_mass"):  # the estimator logs the same batch means
        assert batch["neos_turn_credit"][key] == pytest.approx(result.metrics[f"neos_credit/{key}"], rel=1e-5)
    failures = [r for r in result.rollouts if r.types is not None]
    row = table["assessed failures (mixed groups)"]
    assert row["trajectories"] == len(failures) > 0
    # GRPO gives each of those tokens A_i < 0: its negative mass is |A_i| times its policy tokens.
    expected = np.mean([-r.grpo_value * sum(r.response_mask) for r in failures])
    assert row["grpo"] == {"pos_adv_mass": 0.0, "neg_adv_mass": pytest.approx(expected, rel=1e-5)}
    assert 0 < row["neos_turn_credit"]["neg_adv_mass"] < row["grpo"]["neg_adv_mass"]
    for scope in ("successes", "failures of homogeneous groups"):  # turn credit leaves them alone
        assert table[scope]["grpo"] == table[scope]["neos_turn_credit"]
    report = (out / "report.md").read_text()
    assert "**pos_adv_mass** is the sum of its positive per-token advantages" in report
    grpo_neg = row["grpo"]["neg_adv_mass"]
    assert f"| assessed failures (mixed groups) | {len(failures)} | 0.00 | {grpo_neg:.2f} |" in report


def test_plans_script_each_variant_as_documented():
    calls = [Call("ReverseImageSearch", {"image_token": ["img_1"]}), Call("TextSearch", {"query": ["Belarus"]}),
             Call("WebVisit", {"url": ["u/Belarus"], "goal": "capital"})]
    wrong = Distractor("Dili", "u/Dili")
    plans = {v: make_plan(v, calls, "Minsk", ["Poland", "Belarus"], wrong, random.Random(1))
             for v in ("expert", "wasted_search", "wrong_entity", "recovery")}
    k = plans["wrong_entity"].deviation_turn
    assert [p.answer for p in plans.values()] == ["Minsk", "Minsk", "Dili", "Dili"]
    assert plans["expert"].turns == (*(c.text() for c in calls), plans["expert"].turns[-1])
    assert len(plans["wasted_search"].turns) == len(calls) + 2
    assert plans["wrong_entity"].turns[:k] == tuple(c.text() for c in calls[:k])
    assert '"Dili"' in plans["wrong_entity"].turns[k] and '"u/Dili"' in plans["wrong_entity"].turns[k + 1]
    back = plans["recovery"].turns[plans["recovery"].deviation_turn + 2]
    assert "Belarus" in back or "Poland" in back  # returns to a call that names a path item
    assert draw_plans(G, "s", calls, "Minsk", ["Belarus"], wrong) == draw_plans(G, "s", calls, "Minsk", ["Belarus"],
                                                                              wrong)

    policy = ScriptedBehaviourPolicy()
    policy.bind("r1", plans["expert"])
    texts = [policy(type("C", (), {"request_id": "r1"})) for _ in range(5)]
    assert texts == [*plans["expert"].turns, None]
    assert policy(type("C", (), {"request_id": "unbound"})) is None
    with pytest.raises(ValueError, match="already bound"):
        policy.bind("r1", plans["recovery"])


def test_the_cli_rejects_bad_arguments_with_exit_2_and_writes_nothing(small_world, tmp_path, capsys):
    def error(*argv: str, tasks=tmp_path) -> str:
        out = tmp_path / "out"
        argv = ["--tasks", str(tasks), "--out", str(out), *argv]
        try:
            code = walkthrough_main(argv)
        except SystemExit as exit_:  # argparse's own errors
            code = exit_.code
        assert code == 2 and not out.exists(), argv
        return capsys.readouterr().err

    message = error("--world", str(tmp_path))
    assert f"error: --world: {tmp_path} is not a built world" in message
    assert "argument --group-size: must be >= 2, got 1" in error("--world", str(small_world), "--group-size", "1")
    assert "argument --groups: expected a whole number >= 1, got 'x'" in error("--world", str(small_world),
                                                                              "--groups", "x")
    assert "results.jsonl does not exist: run `python -m data_gen neos" in error("--world", str(small_world))

    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "results.jsonl").write_text('{"key": "a", "status": "verif\n')
    message = error("--world", str(small_world), tasks=cut)
    assert message.startswith(f"python -m verl_ext.walkthrough: error: --tasks: {cut / 'results.jsonl'}:1: not a "
                              "valid result record (Invalid JSON")
    assert message.endswith("delete that line and rerun to redo its work\n") and message.count("\n") == 1

    (tmp_path / "a_file").touch()
    out_is_file = ["--world", str(small_world), "--tasks", str(tmp_path), "--out", str(tmp_path / "a_file")]
    assert walkthrough_main(out_is_file) == 2
    assert capsys.readouterr().err.endswith(f"error: --out: {tmp_path / 'a_file'} is a file, not a directory\n")


def test_fewer_tasks_than_groups_and_a_torn_last_line_are_said_not_silent(run, small_world, tmp_path, caplog):
    """The task run's log (2 verified tasks) with a torn third line, asked for 4 groups: both are warned about."""
    log = tmp_path / "results.jsonl"
    log.write_bytes((run[2].parent / "results.jsonl").read_bytes() + b'{"key": "c", "status": "verif')
    questions = load_questions(tmp_path, World.load(small_world), 4)
    assert len(questions) == QUESTIONS
    assert [r.getMessage() for r in caplog.records] == [
        f"{log}:3: a line cut mid-write (a crash while writing) is skipped",
        f"{log} holds 2 verified tasks, fewer than the 4 asked for (--groups); using those 2",
    ]


def test_help_is_clean_and_imports_no_torch_transformers_or_verl():
    """``--help`` answers before the heavy imports: nothing on stderr (no warnings), the description first."""
    probe = ("import runpy, sys\n"
             "sys.argv = ['walkthrough', '--help']\n"
             "try:\n    runpy.run_module('verl_ext.walkthrough', run_name='__main__')\n"
             "except SystemExit as e:\n    assert e.code == 0\n"
             "print([m for m in ('torch', 'transformers', 'verl', 'matplotlib') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert done.stderr == "" and lines[-1] == "[]"
    assert lines[0].startswith("usage: python -m verl_ext.walkthrough")
    assert "One Neos RL step on CPU" in done.stdout and "``" not in done.stdout


def test_a_distractor_page_names_no_path_item():
    """Terbium's page says it was found in Sweden: on a path through Sweden a judge reading the visit would take it
    for progress, so only gold (its page naming no path item) is a distractor; the answer itself never is."""
    from types import SimpleNamespace

    from neos_core.world.model import Entity, Page
    from verl_ext.walkthrough.questions import pick_distractor

    entities = {e.id: e for e in (Entity("element:y", "Yttrium", "element", page_id="Y"),
                                  Entity("element:tb", "Terbium", "element", page_id="Tb"),
                                  Entity("element:au", "Gold", "element", page_id="Au"))}
    pages = {p.id: p for p in (Page("Y", "u/Y", "Yttrium", "Found in Finland.", "mendeleev"),
                               Page("Tb", "u/Tb", "Terbium", "Discovered in Sweden.", "mendeleev"),
                               Page("Au", "u/Au", "Gold", "Known since antiquity.", "mendeleev"))}
    world = SimpleNamespace(entities=entities, pages=pages)
    task = SimpleNamespace(answer_entity="element:y", answer="Yttrium", aliases=[],
                           evidence=lambda: ["Norway", "Sweden", "Finland"])
    assert {pick_distractor(world, task, random.Random(s)).name for s in range(20)} == {"Gold"}
