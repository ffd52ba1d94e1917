"""The learning curve's data from ``data_gen neos``: ``--sft-answer-swaps`` (copies of each training episode whose
answer is replaced, in every observation and the final turn, by another training answer of the same kind, so that a
policy trained from scratch must read the asked fact off the page: the curve's warm start recalled training answers
instead), ``--answer-kinds`` (one kind of answer: every answer the same fact of its page) and ``rl_expert.parquet``
(the RL split's episodes, to check a warm start on). Real synthesized tasks of the small world; episodes
hand-written so that the last page states the answer."""

import json
from argparse import Namespace

import pandas as pd

from data_gen.neos.cli import main as neos_main
from data_gen.neos.export import answer_swaps, export, of_kinds, splits, swapped_answer
from neos_core.neos_tasks import Outcome
from verl_ext.rollout.record import CallRecord, TrajectoryRecord, TurnRecord


def episode(task, page: str) -> dict:
    """A WebVisit whose observation is ``page``, then the answer."""
    url = task.steps[-1].source_page_url
    call = CallRecord(tool_name="WebVisit", arguments={"url": [url], "goal": f"find {task.answer}"}, ok=True,
                      observation=page)
    turns = [TurnRecord(index=0, span=(0, 0), text="", outcome="call_ok", calls=[call]),
             TurnRecord(index=1, span=(0, 0), text=task.answer, outcome="answer", tools_enabled=False)]
    return TrajectoryRecord(protocol="neos", question=task.question, session_id="s", group_id=task.id,
                            mei_version=None, termination_reason="answer", final_answer=task.answer,
                            turns=turns).model_dump(mode="json")


def stated(task) -> dict:
    return episode(task, f"## {task.steps[-1].source_page_url}\nIts {task.steps[-1].relation_label} is "
                         f"{task.answer}. {task.answer}{task.answer} is not a word of it.")


def test_a_swap_replaces_the_answer_in_observations_calls_and_the_final_turn_and_nothing_else(small_world_tasks):
    from data_gen.neos.export import sft_record

    task = small_world_tasks[0]
    record = sft_record(task, stated(task))
    swapped = swapped_answer(record, task, 'Zed "Z" Town', 1)
    assert swapped["id"] == f"{task.id}~swap1" and "trajectory" not in swapped
    assert swapped["ground_truth"] == {"target": 'Zed "Z" Town', "aliases": []}
    assert swapped["answer_swap"] == {"from": task.answer, "to": 'Zed "Z" Town'}
    page = swapped["messages"][-2]["content"]
    # whole words only: the answer glued to itself is not a mention
    assert page.endswith(f'is Zed "Z" Town. {task.answer}{task.answer} is not a word of it.')
    assert swapped["messages"][-1] == {"role": "assistant", "content": 'Zed "Z" Town'}
    # the call's arguments stay valid JSON text with the new name in them
    call = swapped["messages"][-3]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"])["goal"] == 'find Zed "Z" Town'
    # the system prompt and the question are not touched; the expert's record is unchanged
    assert swapped["messages"][:2] == record["messages"][:2]
    assert record["messages"][-1]["content"] == task.answer


def test_an_episode_whose_observations_never_state_the_answer_is_not_swapped(small_world_tasks):
    from data_gen.neos.export import sft_record

    task = small_world_tasks[0]
    assert swapped_answer(sft_record(task, episode(task, "a page without it")), task, "Zed", 0) is None


def test_swaps_draw_other_training_answers_of_the_same_kind_deterministically(small_world_tasks):
    outcomes = [Outcome(key=t.id, status="verified", task=t, trajectory=stated(t)) for t in small_world_tasks]
    rows, counts = answer_swaps(outcomes, 3, seed=0)
    kinds = {t.answer: t.answer_type for t in small_world_tasks}
    by_id = {t.id: t for t in small_world_tasks}
    assert counts["written"] == len(rows) and counts["skipped_not_in_observations"] == 0
    # a kind with one training answer has no substitute: each of its copies is counted, not written
    lonely = [t for t in small_world_tasks if sum(k == t.answer_type for k in kinds.values()) == 1]
    assert counts["skipped_no_substitute"] == 3 * len(lonely)
    assert counts["written"] == 3 * (len(small_world_tasks) - len(lonely)) > 0
    for r in rows:
        task = by_id[r["id"].split("~")[0]]
        new = r["answer_swap"]["to"]
        assert new != task.answer and kinds[new] == task.answer_type  # another training answer, same kind
        assert new not in json.dumps(sft_messages(task), ensure_ascii=False)  # not already in the episode
    assert answer_swaps(outcomes, 3, seed=0)[0] == rows
    assert answer_swaps(outcomes, 3, seed=1)[0] != rows


def sft_messages(task):
    from data_gen.neos.export import sft_record

    return sft_record(task, stated(task))["messages"]


def test_export_appends_the_swaps_of_training_episodes_only(small_world_tasks, small_world, tmp_path):
    outcomes = [Outcome(key=t.id, status="verified", task=t, trajectory=stated(t)) for t in small_world_tasks]
    sizes, swaps = export(outcomes, small_world, tmp_path, answer_swap_copies=2, seed=0)
    split = splits(small_world_tasks)
    train = {t.id for t in small_world_tasks if split[t.id] == "train"}
    held = {t.answer for t in small_world_tasks if split[t.id] != "train"}
    sft = pd.read_parquet(tmp_path / "sft.parquet")
    assert len(sft) == sizes["train"] + swaps["written"] and swaps["written"] > 0
    bases = {i.split("~")[0] for i in sft["id"]}
    assert bases == train
    # no RL or benchmark answer becomes a training answer
    assert not {m[-1]["content"] for m in sft["messages"]} & held
    assert export(outcomes, small_world, tmp_path)[1] == {}  # no copies, no counts


def test_export_writes_the_rl_splits_expert_episodes_for_checks_not_training(small_world_tasks, small_world, tmp_path):
    outcomes = [Outcome(key=t.id, status="verified", task=t, trajectory=stated(t)) for t in small_world_tasks]
    sizes, _ = export(outcomes, small_world, tmp_path)
    split = splits(small_world_tasks)
    checks = pd.read_parquet(tmp_path / "rl_expert.parquet")
    assert sizes["rl"] > 0 and sorted(checks["id"]) == sorted(t.id for t in small_world_tasks if split[t.id] == "rl")
    assert not set(checks["id"]) & set(pd.read_parquet(tmp_path / "sft.parquet")["id"])
    rl_answers = {t.answer for t in small_world_tasks if split[t.id] == "rl"}
    assert {m[-1]["content"] for m in checks["messages"]} == rl_answers


def test_answer_kinds_keep_the_verified_tasks_of_those_kinds_and_every_rejection(small_world_tasks):
    kind = small_world_tasks[0].answer_type
    outcomes = [Outcome(key=t.id, status="verified", task=t, trajectory=stated(t)) for t in small_world_tasks]
    outcomes.append(Outcome(key="x", status="rejected", filter="text_only_search"))
    kept = of_kinds(outcomes, [kind])
    assert [o.task.id for o in kept if o.task] == [t.id for t in small_world_tasks if t.answer_type == kind]
    assert kept[-1].key == "x"  # rejections stay counted


def test_an_answer_kind_no_entity_has_is_refused_before_anything_runs(small_world, tmp_path, capsys):
    out = tmp_path / "out"
    args = Namespace(world=small_world, out=out, seed=0, limit=1, answer_kinds=["city", "planet"])
    assert neos_main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m data_gen neos: error: --answer-kinds: planet: no entity of the world is of "
                          "that kind (kinds: ") and "city" in err
    assert not out.exists()
