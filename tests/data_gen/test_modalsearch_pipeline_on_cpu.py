"""The ModalSearch pipeline end to end on the small world, through the real tool server: verified questions with
expert trajectories, verl parquet per split (benchmark from the disjoint graph), plots, and a restart after a crash
mid-write that loses nothing and repeats nothing."""

import json
from argparse import Namespace

import pandas as pd

from data_gen.modalsearch.cli import report, run
from verl_ext.rollout.protocols import parse_modalsearch_turn
from verl_ext.rollout.record import TrajectoryRecord


def _args(world, out, limit):
    # attempts: draws per run; today's small world rejects ~95% of draws (the CLI's default is 8000)
    return Namespace(world=world, out=out, limit=limit, seed=0, max_nodes=30, benchmark_nodes=16, seeds=4,
                     text_only=False,
                     attempts=2000, llm_url=None, llm_model="m", ocr=False, teacher_url=None)


def _keys(out):
    return [json.loads(line)["key"] for line in (out / "results.jsonl").read_text().splitlines()]


async def test_run_crash_resume_and_export(small_world, tool_server, tmp_path):
    url = str(tool_server.make_url("")).rstrip("/")
    first = await run(_args(small_world, tmp_path, 4), url)
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert first["graphs"]["benchmark"]["counts"]["text_nodes"] > 0
    # a crash while the last record was being written: its line is torn
    torn = lines[-1][: len(lines[-1]) // 2]
    (tmp_path / "results.jsonl").write_text("\n".join(lines[:-1]) + "\n" + torn)
    await run(_args(small_world, tmp_path, 6), url)
    after = (tmp_path / "results.jsonl").read_text().splitlines()
    assert after[: len(lines) - 1] == lines[:-1]  # nothing lost
    keys = _keys(tmp_path)
    assert len(keys) == len(set(keys)) and json.loads(lines[-1])["key"] in keys  # the torn record redone, once
    stats = report(_args(small_world, tmp_path, 6), {"graphs": {}, "sampler": {}})
    assert stats["verified"] == 6 and sum(stats["splits"].values()) == 6 and stats["splits"]["benchmark"] >= 1
    assert sum(stats["labels"].values()) == 6 and sum(stats["hops"].values()) == 6
    assert all((tmp_path / "plots" / name).is_file() for name in stats["plots"])
    bench = json.loads((tmp_path / "graph_benchmark.json").read_text())["nodes"]
    train = json.loads((tmp_path / "graph_train.json").read_text())["nodes"]
    assert not {n["id"] for n in bench} & {n["id"] for n in train}  # disjoint graphs
    frames = [pd.read_parquet(tmp_path / f"{s}.parquet") for s in ("train", "rl", "benchmark")]
    df = pd.concat([f for f in frames if len(f)])
    assert set(df["agent_name"]) == {"modalsearch_react_agent"} and set(df["data_source"]) == {"modalsearch_synth"}
    for _, r in df.iterrows():
        info = r["extra_info"]
        assert info["label"] in ("input_only", "search_required", "text_only")
        assert r["reward_model"]["ground_truth"]["target"] == info["answer"]
        assert json.loads(info["reasoning_path"])["nodes"] and info["reference_label"] == "success"
        assert r["prompt"][0]["content"].count("<image>") == len(r["images"])
        assert info["answer"].lower() not in r["prompt"][0]["content"].lower()
    sft = pd.read_parquet(tmp_path / "sft.parquet")  # verl's multi-turn SFT layout, the train split
    assert len(sft) == stats["splits"]["train"]
    for _, r in sft.iterrows():
        messages = list(r["messages"])
        assert messages[0]["role"] == "system" and "t2t_search" in messages[0]["content"]
        assert sum(m["content"].count("<image>") for m in messages) == len(r["images"])
    paths = {r["extra_info"]["task_id"]: json.loads(r["extra_info"]["reasoning_path"])["nodes"]
             for _, r in df.iterrows()}
    named = 0
    for line in (tmp_path / "sft.jsonl").read_text().splitlines():
        record = json.loads(line)
        # every assistant turn is one the agent loop's parser accepts (<think>, then a call or the answer), and its
        # reasoning names a path entity only once the question or an earlier observation named it
        names = {n["name"] for n in paths[record["id"]]}
        seen = next(m["content"] for m in record["messages"] if m["role"] == "user")
        for m in record["messages"][2:]:
            if m["role"] == "tool":
                seen += m["content"]
                continue
            parsed = parse_modalsearch_turn(m["content"])
            assert parsed.error is None and (parsed.calls or parsed.answer), m["content"]
            reasoning = m["content"].split("</think>")[0]
            assert reasoning.strip("<think>").strip()
            assert all(n in seen for n in names if n and n in reasoning), (reasoning, names)
            named += any(n and n in reasoning for n in names)
        if record["trajectory"]["turns"] and any(c["images_added"] for t in record["trajectory"]["turns"]
                                                 for c in t["calls"]):
            loaded_at = max(i for i, m in enumerate(record["messages"]) if m["role"] == "tool" and "<image>" in
                            m["content"])
            assert loaded_at < len(record["messages"]) - 1  # the pixels come before the answer
    assert named  # the check above had something to check
    verified = [json.loads(line) for line in after if json.loads(line)["status"] == "verified"]
    record = TrajectoryRecord.model_validate(verified[0]["trajectory"])
    assert record.protocol == "modalsearch" and record.final_answer == verified[0]["task"]["answer"]
    tools = {c.tool_name for t in record.turns for c in t.calls}
    assert tools <= {"t2t_search", "t2i_search", "i2i_search", "read_url"}


def test_a_directory_that_is_not_a_world_is_a_clear_error(tmp_path, capsys):
    from data_gen.modalsearch.cli import main

    assert main(_args(tmp_path, tmp_path / "out", 1)) == 2
    assert "is not a world" in capsys.readouterr().err and not (tmp_path / "out").exists()
