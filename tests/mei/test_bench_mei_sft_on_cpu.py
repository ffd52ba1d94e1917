"""``bench/bench_mei_sft.py``'s baseline side on CPU: the synthetic MEI calls written as verl's multi-turn SFT parquet
are read by verl's own ``MultiTurnSFTDataset`` into the same images and (nearly) the same tokens as our
``tokenize``; verl's SFT config carries our settings; and the timing of verl's steps is what it says. Neither
trainer runs here (their engines need a GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
from verl.utils import tensordict_utils as tu

REPO = Path(__file__).resolve().parents[2]
IMAGE_PAD = 151655


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_mei_sft", REPO / "bench" / "bench_mei_sft.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verls_dataset_reads_the_same_calls_with_the_same_images_and_target(bench, tiny_vl_processor, tmp_path):
    from omegaconf import OmegaConf
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    from verl_ext.mei.sft import tokenize

    examples = bench.synthetic_examples(3)
    rows = bench.verl_sft_rows(examples)
    assert [len(r["images"]) for r in rows] == [2, 2, 2]  # query and one candidate
    assert [m["role"] for m in rows[0]["messages"]] == ["system", "user", "assistant"]
    assert rows[0]["messages"][1]["content"].count("<image>") == 2
    assert rows[0]["messages"][2]["content"] == examples[0].target
    parquet = tmp_path / "sft.parquet"
    pd.DataFrame(rows).to_parquet(parquet)
    config = OmegaConf.create({"pad_mode": "no_padding", "max_length": 32768, "truncation": "error",
                               "image_key": "images"})
    dataset = MultiTurnSFTDataset(str(parquet), tiny_vl_processor.tokenizer, config, processor=tiny_vl_processor)
    assert len(dataset) == 3
    for k, example in enumerate(examples):
        theirs, ours = dataset[k], tokenize(example, tiny_vl_processor)
        # the same two images, so the same placeholders: 56x56 -> 4 visual tokens, 84x56 -> 6
        assert int((theirs["input_ids"] == IMAGE_PAD).sum()) == int((ours["input_ids"] == IMAGE_PAD).sum()) == 10
        assert theirs["multi_modal_inputs"]["image_grid_thw"].tolist() == \
            ours["multi_modal_inputs"]["image_grid_thw"].tolist()
        target = tiny_vl_processor.tokenizer(example.target, add_special_tokens=False)["input_ids"]
        trained = theirs["input_ids"][theirs["loss_mask"].bool()].tolist()
        assert trained[: len(target)] == target  # verl trains on the same assistant turn


def test_verls_sft_config_carries_the_benchs_settings(bench):
    args = bench.parser().parse_args(["--model", "/models/m", "--updates", "3", "--batch", "16", "--micro", "4",
                                      "--offload", "optimizer"])
    config = bench.verl_sft_config(args, Path("/data/x.parquet"), Path("/ckpt"))
    assert config.engine.optimizer_offload and not config.engine.param_offload
    every = bench.parser().parse_args(["--model", "/m", "--offload", "all"])
    every = bench.verl_sft_config(every, Path("/x"), Path("/c"))
    assert every.engine.param_offload and every.engine.optimizer_offload
    assert (config.data.train_batch_size, config.data.micro_batch_size_per_gpu, config.data.use_dynamic_bsz) == (
        16, 4, False)
    assert config.trainer.total_epochs == 3 and config.trainer.device == "cuda"
    assert (config.engine.strategy, config.engine.model_dtype) == ("fsdp2", "fp32")
    assert config.model.override_config.attn_implementation == "sdpa" and not config.model.use_remove_padding
    assert (config.optim.lr, config.optim.weight_decay, list(config.optim.betas)) == (1e-6, 0.1, [0.9, 0.95])


def test_steady_rate_times_the_steps_after_the_warm_up_from_its_end(bench):
    steps = [(10.0, 1_000, 0.1), (12.0, 2_000, 0.2), (13.0, 3_000, 0.4), (15.0, 1_000, None)]
    rate, mfu = bench.steady_rate(steps, first=1)
    assert rate == pytest.approx(6_000 / 5.0)  # steps 2..4: 6,000 tokens from t=10 to t=15
    assert mfu == pytest.approx(0.3)  # the steps that report one
    with pytest.raises(ValueError, match="nothing after"):
        bench.steady_rate(steps[:1], first=1)


def test_timed_steps_record_each_steps_tokens_and_mfu_and_pass_everything_else_through(bench):
    import torch

    class Group:
        world_size = 1

        def train_batch(self, data):
            result = tu.get_tensordict({}, non_tensor_dict={"metrics": {"loss": 1.0, "mfu": 0.5}})
            return type("Ref", (), {"get": lambda _self: result})()

    timed = bench.TimedSteps(Group())
    ids = torch.nested.as_nested_tensor([torch.ones(5, dtype=torch.long), torch.ones(7, dtype=torch.long)],
                                        layout=torch.jagged)
    metrics = tu.get(timed.train_batch(tu.get_tensordict({"input_ids": ids})).get(), "metrics")
    assert metrics["mfu"] == 0.5 and timed.world_size == 1
    assert [(tokens, mfu) for _, tokens, mfu in timed.steps] == [(12, 0.5)]
