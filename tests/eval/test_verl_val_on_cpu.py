"""``python -m verl_ext.eval verl``: the ``main_ppo`` command it composes (resolved by ``main_ppo --cfg job`` itself,
checked by verl's ``validate_config``, its rows read by verl's own ``RLHFDataset``), and the conversion of a real verl
validation dump into results and a report. The dump is written by verl's own writer (``PPOTrainer._write_generations``,
what ``_validate`` calls with ``trainer.validation_data_dir``) from the ``reward_extra_info`` of our real reward
manager (``load_reward_manager`` + ``run_single``, ``dump_trajectories`` on). A whole ``main_ppo`` run needs a GPU:
``tests/eval/test_verl_val_on_gpu.py``."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict

from verl_ext.eval.__main__ import main
from verl_ext.eval.specs import BenchmarkSpec
from verl_ext.eval.verl_val import VerlValConfig, checkpoint_overrides, evaluate_verl, recipe_facts, run_pin
from verl_ext.rollout.record import EVAL_KEY, RECORD_KEY, TRAJECTORY_JSON, CallRecord, ImageEntry, \
    TrajectoryRecord, TurnRecord

from ..forks import main_ppo_jobs

TOOL_URL = "http://127.0.0.1:9"  # never contacted: the dry run only composes; conversion needs no tools


def _config(out: Path, files: dict[str, Path], checkpoint: Path, **kw) -> VerlValConfig:
    return VerlValConfig(out=out, benches=[BenchmarkSpec("neos", "verl", files["neos"])], recipe="neos",
                         checkpoint=checkpoint, tool_url=TOOL_URL, runs=2, **kw)


def test_the_composed_command_is_a_val_only_run_of_the_recipe(tmp_path, benchmark_files, tiny_vl_model_dir,
                                                              tiny_vl_processor):
    config = _config(tmp_path / "run", benchmark_files, tiny_vl_model_dir,
                     overrides=["trainer.n_gpus_per_node=1", "actor_rollout_ref.rollout.name=hf"])
    command = shlex.split(evaluate_verl(config, dry_run=True)["command"])  # as a shell reads the printed line
    attempt = tmp_path / "run" / "verl" / "attempt-1"
    assert command[:4] == [sys.executable, "-m", "verl.trainer.main_ppo", "+recipe=neos"]
    assert command[-2:] == config.overrides  # the user's keys come last and win
    # main_ppo itself resolves its arguments, in a fork of the process the recipe tests' runs fork from
    job = main_ppo_jobs({"val": (*command[3:], "--cfg", "job", "--resolve")}, tmp_path)["val"]
    trainer, rollout = job["trainer"], job["actor_rollout_ref"]["rollout"]
    assert (trainer["val_only"], trainer["val_before_train"], trainer["resume_mode"]) == (True, True, "disable")
    assert trainer["validation_data_dir"] == str(attempt / "dump") and trainer["logger"] == ["console"]
    assert job["data"]["val_files"] == job["data"]["train_files"] == str(attempt / "val.parquet")
    assert job["actor_rollout_ref"]["model"]["path"] == str(tiny_vl_model_dir.resolve())
    # runs and the paper's sampling (Neos states none for evaluation: its rollout sampling, Table 12)
    val = rollout["val_kwargs"]
    assert (val["n"], val["temperature"], val["top_p"], val["top_k"]) == (2, 1.0, 1.0, -1)
    assert rollout["multi_turn"]["max_assistant_turns"] == 50  # the recipe's (the paper's) turn limit
    assert rollout["custom"]["neos_rollout"]["tool_server_url"] == TOOL_URL
    assert rollout["agent"]["default_agent_loop"] == "neos_search_agent"  # the recipe's own agent loop
    assert rollout["name"] == "hf" and trainer["n_gpus_per_node"] == 1
    reward = job["reward"]["reward_kwargs"]
    assert reward["dump_trajectories"] is True and reward["judge"]["url"] is None  # the harness's judge: the rule
    assert trainer["v1"]["neos"]["mei"]["enable"] is False  # no co-evolution while evaluating

    from verl.utils.config import validate_config

    validate_config(OmegaConf.create(job), use_reference_policy=False, use_critic=False)

    # the rows as verl's validation reads them: its own dataset class on the composed data config
    from verl.trainer.ppo.utils import create_rl_dataset

    data = OmegaConf.create(job["data"])
    dataset = create_rl_dataset(data.val_files, data, tiny_vl_processor.tokenizer, tiny_vl_processor, is_train=False)
    rows = [dataset[i] for i in range(len(dataset))]
    assert [r["extra_info"][EVAL_KEY] for r in rows] == ["neos/t0", "neos/t1"]
    assert {r["agent_name"] for r in rows} == {"neos_search_agent"}
    content = rows[0]["raw_prompt"][-1]["content"]  # the question image in place of its <image> line, then the text
    assert [part["type"] for part in content] == ["image", "text"] and content[0]["image"].size == (320, 240)
    assert content[1]["text"].strip() == "Which country's flag is shown in the image?"
    assert rows[1]["reward_model"]["ground_truth"]["target"] == "Angola"


def test_modalsearcher_sampling_and_what_verl_cannot_apply(tmp_path, tiny_vl_model_dir):
    facts = recipe_facts("modalsearcher", [])
    assert (facts.protocol, facts.max_turns, facts.neos_trainer) == ("modalsearch", 46, False)
    config = VerlValConfig(out=tmp_path, benches=[], recipe="modalsearcher", checkpoint=tiny_vl_model_dir,
                           tool_url=TOOL_URL)
    pin = run_pin(config, facts)
    # ModalSearcher App. C.4, Table 11: temperature 0, top-p 0.8, top-k 20; verl's validation has no presence penalty
    assert pin["sampling"] == {"modalsearch": {"temperature": 0.0, "top_p": 0.8, "top_k": 20}}
    assert pin["sampling_not_applied"] == {"presence_penalty": 1.5} and pin["runs"] == 5  # the default k


def test_checkpoint_kinds(tmp_path, tiny_vl_model_dir):
    step = tmp_path / "ckpt" / "global_step_40"
    (step / "actor" / "huggingface").mkdir(parents=True)
    (step / "actor" / "huggingface" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="holds no weights: pass --base-model"):
        checkpoint_overrides(step, None)
    keys = checkpoint_overrides(step / "actor", tiny_vl_model_dir)  # actor/ or its global_step_N: the same
    assert keys == [f"actor_rollout_ref.model.path={tiny_vl_model_dir.resolve()}", "trainer.resume_mode=resume_path",
                    f"trainer.resume_from_path={step}", "actor_rollout_ref.actor.checkpoint.load_contents=[model]"]
    with pytest.raises(ValueError, match="neither an HF model directory"):
        checkpoint_overrides(tmp_path, None)
    with pytest.raises(ValueError, match="an HF config without weights"):
        checkpoint_overrides(step / "actor" / "huggingface", None)


def _record(answer: str, fetched: bool) -> TrajectoryRecord:
    """A Neos episode as our agent loop records it: a search, optionally an image fetch, the answer."""
    search = CallRecord(tool_name="TextSearch", arguments={"query": ["flag"]}, ok=True, observation="1. Flag ...",
                        latency_s=0.2)
    turns = [TurnRecord(index=0, span=(0, 12), text="<tool_call>...</tool_call>", outcome="call_ok", calls=[search])]
    images = [ImageEntry(ref="img_1", source="question", turn=None, in_context=True)]
    if fetched:
        fetch = CallRecord(tool_name="FetchImage", arguments={"urls": ["u"]}, ok=True, images_added=["img_2"])
        turns.append(TurnRecord(index=1, span=(30, 40), text="<tool_call>...</tool_call>", outcome="call_ok",
                                calls=[fetch]))
        images.append(ImageEntry(ref="img_2", source="FetchImage", turn=1, in_context=True))
    end = turns[-1].span[1]
    turns.append(TurnRecord(index=len(turns), span=(end + 20, end + 23), text=answer, outcome="answer"))
    return TrajectoryRecord(protocol="neos", question="q", session_id=None, group_id="g", mei_version=None,
                            termination_reason="answer", error_class_ended=None, final_answer=answer, images=images,
                            turns=turns)


def _reward(tokenizer, record: TrajectoryRecord, extra_info: dict, ground_truth: dict, dump: bool) -> dict:
    """Our ``neos_answer_judge`` manager on a one-sample DataProto laid out as verl's ``_compute_score`` lays it."""
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    import verl_ext.reward.managers  # noqa: F401  (registers the managers, as the plugin does)

    prompt = tokenizer.encode("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")
    response = tokenizer.encode(record.final_answer + "<|im_end|>")
    ids = torch.tensor([prompt + response])
    batch = TensorDict({"prompts": torch.tensor([prompt]), "responses": torch.tensor([response]),
                        "attention_mask": torch.ones_like(ids), "input_ids": ids}, batch_size=1)
    fields = {"data_source": "neos", "reward_model": {"ground_truth": ground_truth}, "extra_info": extra_info}
    non_tensor = {k: np.array([v]) for k, v in fields.items()}
    non_tensor["tool_extra_fields"] = np.array([{RECORD_KEY: record.model_dump(mode="json")}], dtype=object)
    config = OmegaConf.create({"reward": {"custom_reward_function": {"path": None, "name": "compute_score"},
                                          "reward_manager": {"source": "register", "name": "neos_answer_judge"},
                                          "reward_kwargs": {"judge": {}, "dump_trajectories": dump}}})

    async def score():
        return await load_reward_manager(config, tokenizer).run_single(DataProto(batch=batch,
                                                                                 non_tensor_batch=non_tensor))

    return asyncio.run(score())


def _write_dump(attempt: Path, tokenizer, sessions: dict[tuple[str, int], TrajectoryRecord]) -> None:
    """What ``_validate`` hands verl's writer for these sessions: one line per session, ``uid`` verl's key."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    rows = {r["extra_info"][EVAL_KEY]: r for r in pd.read_parquet(attempt / "val.parquet").to_dict("records")}
    outs, infos = [], {}
    for (key, run), record in sessions.items():
        row = rows[key]
        truth = row["reward_model"]["ground_truth"]
        truth = {"target": truth["target"], "aliases": list(truth["aliases"])}
        out = _reward(tokenizer, record, row["extra_info"], truth, dump=True)
        outs.append((f"{key.replace('/', '-')}-uuid_{run}_0", out))
    for name in outs[0][1]["reward_extra_info"]:
        infos[name] = [o["reward_extra_info"][name] for _, o in outs]
    PPOTrainer._write_generations(
        inputs=["prompt"] * len(outs), outputs=[r.final_answer for r in sessions.values()],
        gts=[rows[k]["reward_model"]["ground_truth"] for k, _ in sessions], scores=[o["reward_score"] for _, o in outs],
        reward_extra_infos_dict={**infos, "reward": [o["reward_score"] for _, o in outs], "uid": [u for u, _ in outs]},
        dump_path=str(attempt / "dump"), global_steps=0)


def test_a_verl_dump_becomes_judged_results_and_a_report(tmp_path, benchmark_files, tiny_vl_model_dir,
                                                          tiny_vl_processor, capsys):
    tokenizer = tiny_vl_processor.tokenizer
    out = tmp_path / "run"
    config = _config(out, benchmark_files, tiny_vl_model_dir)
    evaluate_verl(config, dry_run=True)
    first = out / "verl" / "attempt-1"
    # t0 (Aruba): right in run 0, wrong in run 1; t1 (Angola): right in run 0, run 1 missing (verl dropped it)
    _write_dump(first, tokenizer, {("neos/t0", 0): _record("Aruba", fetched=True),
                                   ("neos/t0", 1): _record("Brazil", fetched=False),
                                   ("neos/t1", 0): _record("Angola", fetched=True)})
    line = json.loads((first / "dump" / "0.jsonl").read_text().splitlines()[0])
    assert line["neos_eval_key"] == "neos/t0" and line["acc"] == 1.0 and line["uid"].endswith("_0_0")

    again = evaluate_verl(config, dry_run=True)  # converts attempt 1, prepares attempt 2 for what is missing
    assert (again["ran_now"], again["ok"], again["errors"]) == (4, 3, 1)
    second = out / "verl" / "attempt-2"
    assert [r["extra_info"][EVAL_KEY] for r in pd.read_parquet(second / "val.parquet").to_dict("records")] == \
        ["neos/t1"]
    _write_dump(second, tokenizer, {("neos/t1", 0): _record("Angola", fetched=False),
                                    ("neos/t1", 1): _record("Angola", fetched=False)})
    code = main(["verl", "--bench", f"neos=verl:{benchmark_files['neos']}", "--out", str(out), "--recipe", "neos",
                 "--checkpoint", str(tiny_vl_model_dir), "--tool-server", TOOL_URL, "--runs", "2"])
    assert code == 0  # nothing left to launch: attempt 2 converted, the report written

    latest = {}
    for x in map(json.loads, (out / "results.jsonl").read_text().splitlines()):
        latest[x["key"]] = x
    assert {k: (v["status"], v["correct"]) for k, v in latest.items()} == {
        "neos/t0/0": ("ok", True), "neos/t0/1": ("ok", False), "neos/t1/0": ("ok", True), "neos/t1/1": ("ok", True)}
    assert len(latest["neos/t1/0"]["trajectory"]["turns"]) == 3  # attempt 1's run 0 was kept, not redone
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert summary["accuracy"]["neos"]["per_run"] == [1.0, 0.5] and summary["accuracy"]["neos"]["pass_at_k"] == 1.0
    assert summary["judge"]["by_source"] == {"rule": 4}
    behaviour = summary["behaviour"]
    assert behaviour["tool_calls"]["by_tool"] == {"TextSearch": 4, "FetchImage": 2}
    assert behaviour["per_turn"]["completion_tokens"]["n"] == 10 and behaviour["per_turn"]["policy_latency_s"]["n"] == 0
    pin = json.loads((out / "run.json").read_text())
    assert pin["endpoints"]["policy"] == "verl validation (main_ppo +recipe=neos)"
    # the viewer: each trajectory's question image from the rows; the fetched image's pixels are not in the dump
    viewer = (out / "report" / "viewer.html").read_text()
    question_file = latest["neos/t0/0"]["image_files"]["img_1"]
    assert (out / "images" / question_file).is_file() and question_file in viewer
    assert "img_2 (no pixels kept)" in viewer

    # a validation dump of a training run (dump_trajectories on) is a trajectory export for `report --trajectories`
    assert main(["report", "--trajectories", str(first / "dump" / "0.jsonl"), "--out", str(tmp_path / "train-val"),
                 "--no-embeddings"]) == 0
    exported = json.loads((tmp_path / "train-val" / "summary.json").read_text())["behaviour"]
    assert exported["trajectories"] == 3 and exported["tool_calls"]["by_tool"] == {"TextSearch": 3, "FetchImage": 2}

    # a dump of a recipe whose reward manager did not dump trajectories: one line naming file, line and field
    bad = out / "verl" / "attempt-3" / "dump"
    bad.mkdir(parents=True)
    (bad / "0.jsonl").write_text(json.dumps({"input": "p", "output": "o", "score": 0.0, "uid": "u_0_0"}) + "\n")
    with pytest.raises(SystemExit) as exit_:
        main(["verl", "--bench", f"neos=verl:{benchmark_files['neos']}", "--out", str(out), "--recipe", "neos",
              "--checkpoint", str(tiny_vl_model_dir), "--tool-server", TOOL_URL, "--runs", "2"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and f"{bad / '0.jsonl'}:1: field 'neos_eval_key': missing" in err


def test_the_dump_fields_are_off_by_default(tiny_vl_processor):
    out = _reward(tiny_vl_processor.tokenizer, _record("Aruba", False), {EVAL_KEY: "neos/t0"},
                  {"target": "Aruba", "aliases": []}, dump=False)
    assert out["reward_score"] == 1.0 and TRAJECTORY_JSON not in out["reward_extra_info"]


def test_usage_errors(tmp_path, benchmark_files, tiny_vl_model_dir, capsys):
    base = ["verl", "--out", str(tmp_path / "o"), "--recipe", "neos", "--checkpoint", str(tiny_vl_model_dir)]
    cases = [
        ([*base, "--bench", f"neos=verl:{benchmark_files['neos']}", "--world", str(tmp_path), "--dry-run"],
         "--dry-run needs --tool-server"),
        ([*base, "--bench", f"ms=generic:{benchmark_files['ms']}", "--tool-server", TOOL_URL],
         "runs the neos protocol"),
        ([*base, "--bench", f"neos=verl:{benchmark_files['neos']}", "--tool-server", TOOL_URL, "/a/model"],
         "unrecognized arguments: /a/model"),  # only KEY=VALUE (or ~KEY) words are main_ppo overrides
        (["verl", "--out", "o", "--recipe", "neos", "--checkpoint", str(tmp_path), "--tool-server", TOOL_URL,
          "--bench", f"neos=verl:{benchmark_files['neos']}"], "neither an HF model directory"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err.strip()
        assert exit_.value.code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "o").exists()  # nothing written before the input was checked
