"""``python -m verl_ext.mei.warm_start``: its argument checks, the pairs it turns into examples, and ``train_mei``'s
epochs (the worker group is a recording stand-in here: verl's FSDP engine needs a GPU; the real group runs in the
GPU smoke, tests/trainer/test_neos_smoke_on_gpu.py)."""

from __future__ import annotations

import json

import pytest
import torch

from tool_server.mei.log import BlobStore, blobs_dir_of, store_images
from verl_ext.mei import warm_start
from verl_ext.mei.worker import train_mei

from .conftest import mei_record

IMAGE = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "blob:sha256:" + "0" * 64}}]}]


def test_arguments_are_checked_before_anything_loads(tmp_path, tiny_vl_model_dir, capsys):
    with pytest.raises(SystemExit):
        warm_start.parse_args(["--model", str(tiny_vl_model_dir), "--pairs", str(tmp_path / "no.jsonl"),
                               "--out", str(tmp_path)])
    assert "no such file" in capsys.readouterr().err
    pairs = tmp_path / "mei_sft.jsonl"
    pairs.write_text("")
    with pytest.raises(SystemExit):
        warm_start.parse_args(["--model", str(tmp_path), "--pairs", str(pairs), "--out", str(tmp_path)])
    assert "not an HF model directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        warm_start.parse_args(["--model", str(tiny_vl_model_dir), "--pairs", str(pairs), "--out", str(tmp_path),
                               "--epochs", "0"])


def test_pairs_become_examples_and_unusable_ones_are_counted(tmp_path, tiny_vl_processor):
    pairs = tmp_path / "mei_sft.jsonl"
    text_only = mei_record("page", outcome="extractive")
    lost_image = mei_record("lost", outcome="extractive", messages=IMAGE)
    store_images(text_only.messages, BlobStore(blobs_dir_of(pairs)))
    pairs.write_text("".join(json.dumps(r.model_dump(mode="json")) + "\n" for r in (text_only, lost_image)))
    tokenized = warm_start.load_pairs(pairs, tiny_vl_processor, max_length=4096)
    assert tokenized.call_ids == ["page"] and dict(tokenized.skipped) == {"unavailable_input": 1}
    item = tokenized.items[0]
    target = tiny_vl_processor.tokenizer.decode(item["input_ids"][item["loss_mask"] == 1])
    assert target == json.dumps(text_only.output, ensure_ascii=False) + "<|im_end|>"


class TrainOutput:
    """What ``train_batch(...)`` returns through Ray: ``.get()`` gives the worker's TensorDict with its metrics."""

    def __init__(self, loss: float) -> None:
        self.loss = loss

    def get(self):
        from tensordict import TensorDict
        from verl.utils import tensordict_utils as tu

        out = TensorDict({}, batch_size=[])
        tu.assign_non_tensor_data(out, "metrics", {"loss": self.loss})
        return out


class RecordingGroup:
    """Stand-in for the MEI worker group (GPU only): records the schedule and returns a loss per batch."""

    world_size = 1

    def __init__(self) -> None:
        self.total_steps, self.batches, self.saved = None, [], None

    def begin_update(self, total_steps: int) -> None:
        self.total_steps = total_steps

    def train_batch(self, batch):
        self.batches.append(int(batch["input_ids"].size(0)))
        return TrainOutput(1.0 / len(self.batches))

    def save_checkpoint(self, local_path: str) -> None:
        self.saved = local_path


def test_epochs_repeat_the_plan_under_one_schedule(tmp_path):
    items = [{"input_ids": torch.arange(5), "loss_mask": torch.tensor([0, 0, 1, 1, 1]),
              "position_ids": torch.arange(5), "multi_modal_inputs": {}} for _ in range(3)]
    group = RecordingGroup()
    update = train_mei(group, items, "v0", out_dir=tmp_path, pad_token_id=0, global_batch_size=2, epochs=3)
    assert group.batches == [2, 1] * 3 and group.total_steps == 6  # one LR schedule over all epochs
    assert update.metrics["mei/steps"] == 6 and update.metrics["mei/final_loss"] == pytest.approx(1 / 6)
    assert update.metrics["mei/tokens"] == 45 and update.metrics["mei/target_tokens"] == 27
    assert group.saved == str(tmp_path / "v0") and update.checkpoint_dir == tmp_path / "v0" / "huggingface"
    # 3 examples, micro-batches of 2: the step is filled to 4 with a loss-masked copy (verl splits a batch into equal
    # micro-batches); no example is dropped
    group = RecordingGroup()
    update = train_mei(group, items, "v0", out_dir=tmp_path, pad_token_id=0, global_batch_size=4, micro_batch_size=2)
    assert group.batches == [4] and update.metrics["mei/fill_rows"] == 1
    with pytest.raises(ValueError, match="epochs"):
        train_mei(group, items, "v0", out_dir=tmp_path, pad_token_id=0, epochs=0)


def test_a_long_run_reports_about_twenty_progress_lines(tmp_path):
    """120 steps (3 examples, one a step, 40 epochs): a plan line, a line every 6 steps with the mean loss of its 6
    steps (the stand-in's loss at step k is 1/k), and a summary; the metrics agree with the lines."""
    items = [{"input_ids": torch.arange(5), "loss_mask": torch.tensor([0, 0, 1, 1, 1]),
              "position_ids": torch.arange(5), "multi_modal_inputs": {}} for _ in range(3)]
    lines: list[str] = []
    update = train_mei(RecordingGroup(), items, "v0", out_dir=tmp_path, pad_token_id=0, global_batch_size=1,
                       epochs=40, emit=lines.append)
    assert lines[0].startswith("MEI v0 SFT: 120 steps (3 an epoch x 40) over 3 examples, global batch 1, micro-batch 1")
    steps = [line for line in lines if " step " in line]
    assert [s.split(" step ")[1].split(" (")[0] for s in steps] == [f"{k}/120" for k in range(6, 121, 6)]
    assert steps[0].startswith("MEI v0 SFT step 6/120 (epoch 2/40): loss 0.4083 (mean of 6 steps)")  # 2.45 / 6
    assert steps[-1].startswith("MEI v0 SFT step 120/120 (epoch 40/40)") and "ETA 0:00:00" in steps[-1]
    assert len(lines) == 22 and lines[-1].startswith("MEI v0 SFT done: 120/120 steps in ")
    assert f"{update.metrics['mei/final_loss']:.4f} last" in lines[-1] and update.metrics["mei/tokens"] == 600


def test_extra_rounds_train_until_the_check_passes(tmp_path, tiny_vl_model_dir, monkeypatch, capsys):
    """The warm start's loop: round 1's checkpoint fails the check (1/4 usable), round 2's passes (4/4); it stops
    there although a third round was allowed, and warm_start.json keeps both rounds. Ray, verl's SFT group (GPU
    only) and the greedy check are recording stand-ins; test_check_on_cpu.py runs the real check."""
    import ray

    from verl_ext.mei import check, worker

    pairs = tmp_path / "mei_sft.jsonl"
    record = mei_record("page", outcome="extractive")
    pairs.write_text(json.dumps(record.model_dump(mode="json")) + "\n")
    group = RecordingGroup()
    monkeypatch.setattr(ray, "init", lambda **_: None)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(worker, "build_worker_group", lambda settings: group)
    verdicts = iter([["valid", "invalid", "invalid", "invalid"], ["valid"] * 4])
    checked = []

    def scripted_check(model_dir, pairs_path, *, calls, device, max_tokens):
        checked.append((model_dir, calls, max_tokens))
        return check.CheckReport([check.Answer(str(i), "web_visit", v, "stop", 5, "{}")
                                  for i, v in enumerate(next(verdicts))])

    monkeypatch.setattr(check, "check_checkpoint", scripted_check)
    out = tmp_path / "mei"
    code = warm_start.main(["--model", str(tiny_vl_model_dir), "--pairs", str(pairs), "--out", str(out),
                            "--epochs", "2", "--global-batch-size", "1", "--check-calls", "4",
                            "--check-max-new-tokens", "768", "--extra-rounds", "2", "--strict-check"])
    printed = capsys.readouterr().out
    assert code == 0 and group.batches == [1, 1] * 2  # two rounds of 2 epochs over the one pair
    assert checked == [(out.resolve() / "v0" / "huggingface", 4, 768)] * 2
    assert "MEI v0 SFT step 2/2 (epoch 2/2)" in printed and "MEI v0 SFT done: 2/2 steps" in printed  # on stdout
    assert "round 1: valid answers 1/4" in printed and "round 2: valid answers 4/4" in printed
    meta = json.loads((out / "v0" / "warm_start.json").read_text())
    assert meta["check"]["valid_answers"] == 4 and meta["check"]["share"] == 1.0
    assert meta["epochs_trained"] == 4 and [r["check"]["valid_answers"] for r in meta["rounds"]] == [1, 4]
    assert meta["args"]["extra_rounds"] == 2 and meta["checkpoint"] == str(out.resolve() / "v0" / "huggingface")
