"""``bench/curve_free_run.py``: episodes as RL runs them (``neos_curve`` composed as ``main_ppo`` composes it, verl's
``RLHFDataset`` on rows written by ``data_gen neos``' export of real small-world tasks, the agent loop, a real tool
server, the ``neos_answer_judge`` reward manager) give the step metrics RL logs. The policy's words are scripted
(the generate client's ``forced``) so the expected figures can be counted by hand; the tiny model scores them."""

from __future__ import annotations

import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pandas as pd
import pytest

from data_gen.neos.export import export

from .verified import solved

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import curve_free_run as free_run  # noqa: E402

MALFORMED = '<tool_call>\n{"name": "TextSearch", "arguments": {"query": \n</tool_call>'


@pytest.fixture(scope="module")
def data(small_world_tasks, small_world, tmp_path_factory):
    """The export's train split as the curve's ``rl.parquet``: rows of the layout RL reads."""
    root = tmp_path_factory.mktemp("free-run")
    export([solved(t) for t in small_world_tasks], small_world, root)
    shutil.copy(root / "train.parquet", root / "rl.parquet")
    return root


def test_step_metrics_of_scripted_episodes(data, small_world, tiny_vl_model, tiny_vl_processor):
    rows = pd.read_parquet(data / "rl.parquet")
    questions = [info["question"] for info in rows["extra_info"][:2]]
    targets = [gt["ground_truth"]["target"] for gt in rows["reward_model"][:2]]
    seen: dict[int, list[str]] = defaultdict(list)
    turns: Counter[str] = Counter()

    def forced(call) -> str:
        """Question 0: its first episode answers right, its second writes a malformed call, then a wrong answer.
        Question 1: both episodes answer right at once."""
        prompt = tiny_vl_processor.tokenizer.decode(call.prompt_ids)
        q = next(i for i, question in enumerate(questions) if question in prompt)
        if call.request_id not in seen[q]:
            seen[q].append(call.request_id)
        member = seen[q].index(call.request_id)
        turns[call.request_id] += 1
        if q == 0 and member == 1:
            return MALFORMED if turns[call.request_id] == 1 else "Atlantis"
        return targets[q]

    result = free_run.check(tiny_vl_model, tiny_vl_processor, data=data, world=small_world, questions=2,
                            group_size=2, forced=forced)
    m = result["metrics"]
    assert len(result["episodes"]) == 4 and result["sampling"]["temperature"] == 1.0  # the recipe's
    assert m["critic/score/mean"] == pytest.approx(0.75)
    assert (m["neos_groups/mixed_share"], m["neos_groups/all_success_share"]) == (0.5, 0.5)
    assert m["neos_rollout/termination_share/answer"] == 1.0
    assert m["neos_rollout/turn_errors_per_trajectory/malformed_call"] == pytest.approx(0.25)
    # 5 turns: three answers right at once, one malformed call and a wrong answer
    assert m["neos_rollout/turn_outcome_share/answer"] == pytest.approx(4 / 5)
    wrong = [e for e in result["episodes"] if e["reward"] < 0.5]
    assert [(e["question"], e["prediction"]) for e in wrong] == [(0, "Atlantis")]
    assert [t["error_type"] for t in wrong[0]["turns"]] == ["malformed_call", None]


def test_too_few_rows_is_one_line(data, small_world, tiny_vl_model, tiny_vl_processor):
    rows = len(pd.read_parquet(data / "rl.parquet"))
    with pytest.raises(ValueError, match=f"--questions {rows + 1}: .*rl.parquet holds {rows} rows"):
        free_run.check(tiny_vl_model, tiny_vl_processor, data=data, world=small_world, questions=rows + 1)


@pytest.mark.parametrize(("overrides", "validate", "want"), [
    ((), False, {"temperature": 1.0, "top_p": 1.0, "top_k": -1}),  # neos_curve's rollout
    (("actor_rollout_ref.rollout.val_kwargs.temperature=0.7", "actor_rollout_ref.rollout.val_kwargs.top_p=0.9"),
     True, {"temperature": 0.7, "top_p": 0.9, "top_k": -1}),
    (("actor_rollout_ref.rollout.val_kwargs.do_sample=false",), True, {"temperature": 0, "top_p": 1.0, "top_k": -1}),
])
def test_sampling_is_verls_for_training_and_for_validation(overrides, validate, want, monkeypatch):
    from verl_ext.eval.verl_val import compose_recipe

    monkeypatch.setenv("NEOS_CURVE_DATA", "/data")
    monkeypatch.setenv("NEOS_CURVE_POLICY", "/policy")
    config = compose_recipe("neos_curve", list(overrides))
    got = free_run.sampling(config, None, validate)
    assert {k: got[k] for k in want} == want and got["repetition_penalty"] == 1.0
    assert free_run.sampling(config, 0.5, validate)["temperature"] == 0.5  # --temperature wins
