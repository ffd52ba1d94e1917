"""The Neos cold-start SFT export read by verl's own ``MultiTurnSFTDataset`` (through the JSON-tools subclass) with
the tiny Qwen2.5-VL processor: targets are exactly the assistant turns, images line up with their placeholders, and
tool calls decode back to the JSON the policy writes. The episode is hand-written over a real synthesized task.
The same row trains in ``bench/curve_sft_plain.py``, the learning curve's warm start."""

import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from data_gen.common.export import image_file
from data_gen.common.sft import SFTRecord, sft_parquet_from_jsonl
from data_gen.neos.export import row as rl_row
from data_gen.neos.export import sft_record
from data_gen.neos.synth import Synthesizer
from neos_core.world.store import World
from tool_server.protocol import tool_schemas
from verl_ext.rollout.prompts import system_prompt
from verl_ext.rollout.record import CallRecord, TrajectoryRecord, TurnRecord

REPO = Path(__file__).resolve().parents[2]
GOAL = "Whose flag is this? (São Tomé or not)"  # non-ASCII: must reach the template verbatim, as the policy writes it


@pytest.fixture(scope="module")
def task(small_world):
    """The first task with one entry image and a checkpoint, both national flags (320x240: the placeholder counts
    below are computed for that size; locator maps are 512x384)."""
    synth = Synthesizer(World.load(small_world), seed=0)

    def flag(image_id):
        return synth.world.images[image_id].source == "flag-icons"

    for seed_entity in synth.seeds():
        for cand in synth.synthesize(seed_entity).candidates:
            t = cand.task
            first = next((s for s in t.steps if s.checkpoint), None) if t else None
            if first and len(t.entry_images) == 1 and flag(t.entry_images[0].image_id) \
                    and flag(first.checkpoint_image_id):
                return t
    raise AssertionError("the small world yields no task from a flag with a flag checkpoint")


def _episode(task, *, crop: bool = False) -> dict:
    """ReverseImageSearch on img_1, FetchImage of the checkpoint image (img_2), then the answer."""
    url = next(s.checkpoint_image_url for s in task.steps if s.checkpoint)
    fetch = ("CropImage", {"crop_config": {"img_1": [0, 0, 500, 500]}}) if crop else ("FetchImage", {"urls": [url]})
    calls = [
        CallRecord(tool_name="ReverseImageSearch", arguments={"image_token": ["img_1"], "goal": GOAL}, ok=True,
                   observation="1. [visual_match] a national flag"),
        CallRecord(tool_name=fetch[0], arguments=fetch[1], ok=True, observation=f"{url}: loaded as img_2",
                   images_added=["img_2"]),
    ]
    turns = [TurnRecord(index=i, span=(0, 0), text="", outcome="call_ok", calls=[c]) for i, c in enumerate(calls)]
    turns.append(TurnRecord(index=2, span=(0, 0), text=task.answer, outcome="answer", tools_enabled=False))
    record = TrajectoryRecord(protocol="neos", question=task.question, session_id="s", group_id=task.id,
                              mei_version=None, termination_reason="answer", final_answer=task.answer, turns=turns)
    return record.model_dump(mode="json")


@pytest.fixture(scope="module")
def exported(task, small_world, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft")
    (out / "sft.jsonl").write_text(json.dumps(sft_record(task, _episode(task)), ensure_ascii=False) + "\n")
    assert sft_parquet_from_jsonl(out / "sft.jsonl", small_world, out / "sft.parquet") == 1
    return out / "sft.parquet"


@pytest.fixture(scope="module")
def item(exported, tiny_vl_processor):
    from verl_ext.data.sft_dataset import JsonToolsMultiTurnSFTDataset

    config = OmegaConf.create({"max_length": 8192, "pad_mode": "no_padding", "truncation": "error"})
    dataset = JsonToolsMultiTurnSFTDataset(str(exported), tiny_vl_processor.tokenizer, config,
                                           processor=tiny_vl_processor)
    assert len(dataset) == 1 and dataset.tools == [tool_schemas("neos")]
    return dataset[0]  # verl's sanity check already compared per-turn tokens with the whole conversation's


def test_parquet_row_has_the_agent_loops_system_prompt_native_tools_and_image_bytes(exported, task, small_world):
    row = pd.read_parquet(exported).iloc[0]
    assert json.loads(row["tools"]) == tool_schemas("neos")
    messages = list(row["messages"])
    assert messages[0]["content"] == system_prompt("neos", tool_schemas("neos"))
    assert messages[1] == {"role": "user", "content": "<image>\n" + task.question, "tool_calls": None}
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert messages[5]["content"].startswith("img_2:<image>")
    checkpoint = next(s.checkpoint_image_id for s in task.steps if s.checkpoint)
    expected = [image_file(small_world, i).read_bytes() for i in (task.entry_images[0].image_id, checkpoint)]
    assert [im["bytes"] for im in row["images"]] == expected


def test_loss_mask_is_one_exactly_on_the_assistant_turns(item, task, tiny_vl_processor, plain_sft):
    tok = tiny_vl_processor.tokenizer
    ids, mask = item["input_ids"], item["loss_mask"]
    url = next(s.checkpoint_image_url for s in task.steps if s.checkpoint)
    expected = [
        '<tool_call>\n{"name": "ReverseImageSearch", "arguments": {"image_token": ["img_1"], "goal": "' + GOAL
        + '"}}\n</tool_call><|im_end|>\n',
        '<tool_call>\n{"name": "FetchImage", "arguments": {"urls": ["' + url + '"]}}\n</tool_call><|im_end|>\n',
        task.answer + "<|im_end|>\n",
    ]
    runs = plain_sft.turn_spans(mask)  # the maximal runs of targets
    assert [tok.decode(ids[a:b]) for a, b in runs] == expected
    header = tok.encode("<|im_start|>assistant\n")
    assert all(ids[a - len(header):a].tolist() == header for a, _ in runs)  # the generation prompt is not a target
    context = tok.decode(ids[mask == 0])
    assert context.startswith("<|im_start|>system\n" + system_prompt("neos", []))
    assert task.question in context and '"arguments": {' not in context
    assert context.count("<tool_response>") == 2 and "1. [visual_match] a national flag" in context


def test_image_placeholders_match_the_images(item, task, small_world, tiny_vl_processor):
    tok = tiny_vl_processor.tokenizer
    ids, grid = item["input_ids"], item["multi_modal_inputs"]["image_grid_thw"]
    assert grid.shape == (2, 3) and (ids == tok.convert_tokens_to_ids("<|vision_start|>")).sum() == 2
    # each image is 320x240; the processor's 64-token cap (max 50,176 pixels) resizes it to 224x196 pixels: a grid
    # of 1 x 14 x 16 patches of 14 px, merged 2x2 into 56 tokens
    checkpoint = next(s.checkpoint_image_id for s in task.steps if s.checkpoint)
    for image_id in (task.entry_images[0].image_id, checkpoint):
        with Image.open(image_file(small_world, image_id)) as im:
            assert im.size == (320, 240)
    assert grid.tolist() == [[1, 14, 16], [1, 14, 16]]
    assert (ids == tok.convert_tokens_to_ids("<|image_pad|>")).sum() == 2 * 56
    assert item["multi_modal_inputs"]["pixel_values"].shape[0] == 2 * 14 * 16
    assert item["position_ids"].shape == (4, len(ids))  # text positions + Qwen-VL's 3-D rope index


def test_tool_calls_decode_back_to_the_calls(item, task, tiny_vl_processor):
    text = tiny_vl_processor.tokenizer.decode(item["input_ids"][item["loss_mask"] == 1])
    calls = [json.loads(body) for body in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text)]
    url = next(s.checkpoint_image_url for s in task.steps if s.checkpoint)
    assert calls == [{"name": "ReverseImageSearch", "arguments": {"image_token": ["img_1"], "goal": GOAL}},
                     {"name": "FetchImage", "arguments": {"urls": [url]}}]


def test_bad_records_fail_with_a_clear_error(task, small_world, tmp_path):
    with pytest.raises(ValueError, match="CropImage images cannot be exported"):
        sft_record(task, _episode(task, crop=True))
    record = sft_record(task, _episode(task))
    with pytest.raises(ValueError, match="2 <image> placeholders, 1 image URLs"):
        SFTRecord.model_validate({**record, "images": record["images"][:1]})
    (tmp_path / "sft.jsonl").write_text(json.dumps(record) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"sft.jsonl:2: not an SFT record"):
        sft_parquet_from_jsonl(tmp_path / "sft.jsonl", small_world, tmp_path / "sft.parquet")


def test_schemas_as_parquet_structs_would_reach_the_template_altered(tmp_path):
    """Why ``tools`` is JSON text: read back as verl reads it, a struct column pads every schema with the other tools'
    parameters as nulls (TextSearch gains ``url: None``)."""
    from verl.utils.py_functional import convert_nested_value_to_list_recursive

    pd.DataFrame([{"tools": tool_schemas("neos")}]).to_parquet(tmp_path / "structs.parquet")
    column = pd.read_parquet(tmp_path / "structs.parquet", dtype_backend="pyarrow")["tools"]
    text_search = column.apply(convert_nested_value_to_list_recursive).tolist()[0][0]
    assert text_search["function"]["parameters"]["properties"]["url"] is None
    assert text_search != tool_schemas("neos")[0]


def test_a_protocol_that_lists_its_tools_in_the_system_prompt_loads_in_verl(small_world, tiny_vl_processor, tmp_path):
    # ModalSearch's records have no tools (its system prompt lists them): the column was written as nulls, which
    # verl reads as pandas NA and hands to the chat template as ``tools``: "'NAType' object is not iterable" on the
    # first row of a 60-question run's sft.parquet (2026-12-06). Without any record's tools there is no column.
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    from verl_ext.data.sft_dataset import JsonToolsMultiTurnSFTDataset

    world = World.load(small_world)
    image = next(i for i in world.images.values() if i.source == "flag-icons")
    messages = [{"role": "system", "content": system_prompt("modalsearch", tool_schemas("modalsearch"))},
                {"role": "user", "content": "<image>\nWhich currency is used in the country depicted in this image?"},
                {"role": "assistant", "content": "<think>I search.</think>\n<tool_call>{\"name\": \"i2i_search\", "
                                                 "\"arguments\": {\"image\": \"img_1\"}}</tool_call>"},
                {"role": "tool", "content": "1. a flag"},
                {"role": "assistant", "content": "<think>The page states it.</think>\n<answer>euro</answer>"}]
    record = {"id": "ms", "messages": messages, "images": [image.url], "image_ids": [image.id]}
    (tmp_path / "sft.jsonl").write_text(json.dumps(record) + "\n")
    assert sft_parquet_from_jsonl(tmp_path / "sft.jsonl", small_world, tmp_path / "sft.parquet") == 1
    assert "tools" not in pd.read_parquet(tmp_path / "sft.parquet").columns
    config = OmegaConf.create({"max_length": 8192, "pad_mode": "no_padding", "truncation": "error"})
    for cls in (JsonToolsMultiTurnSFTDataset, MultiTurnSFTDataset):
        dataset = cls(str(tmp_path / "sft.parquet"), tiny_vl_processor.tokenizer, config, processor=tiny_vl_processor)
        item = dataset[0]
        trained = tiny_vl_processor.tokenizer.decode(item["input_ids"][item["loss_mask"] == 1])
        assert "<answer>euro</answer>" in trained and "a flag" not in trained


@pytest.fixture(scope="module")
def plain_sft():
    """``bench/curve_sft_plain.py``, the learning curve's warm start, imported as the bench scripts run."""
    sys.path.insert(0, str(REPO / "bench"))
    import curve_sft_plain

    return curve_sft_plain


def test_plain_sft_loss_is_the_masked_cross_entropy_of_the_full_logits_at_verls_positions(
    plain_sft, exported, tiny_vl_processor, tiny_vl_model_dir
):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_vl_model_dir, dtype=torch.float32)
    pad = tiny_vl_processor.tokenizer.pad_token_id
    image_pad = tiny_vl_processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    (row,) = plain_sft.load_rows(exported, tiny_vl_processor)
    ids = row.input_ids
    # verl's positions are the model's own M-RoPE index (text, then temporal/height/width), not 1-D
    mrope, _ = model.model.get_rope_index(ids[None], image_grid_thw=row.image_grid_thw,
                                          mm_token_type_ids=(ids[None] == image_pad).int())
    assert row.position_ids.shape == (4, len(ids)) and torch.equal(row.position_ids[1:], mrope[:, 0])
    assert not torch.equal(row.position_ids[1], torch.arange(len(ids)))
    vision = {"pixel_values": row.pixel_values, "image_grid_thw": row.image_grid_thw}
    full = model(input_ids=ids[None], position_ids=row.position_ids[:, None], **vision).logits[0]
    # written out the usual way: every position's logits, the next token as label, -100 where it is not a target
    labels = torch.where(row.loss_mask, ids, torch.full_like(ids, -100))[1:]
    expected = torch.nn.functional.cross_entropy(full[:-1], labels, ignore_index=-100, reduction="sum")
    assert torch.allclose(plain_sft.masked_ce_sum(model, [row], "cpu", pad), expected, rtol=1e-5)
    one_d = model(input_ids=ids[None], **vision).logits[0]  # transformers' fallback without positions
    assert not torch.allclose(one_d, full, atol=1e-3)
    assert int(row.loss_mask.sum()) == int((labels != -100).sum()) > 0  # the first token is never a target
    # two rows of different lengths padded into one forward: the sum of their own losses
    cut = int(row.loss_mask.nonzero()[-1]) - 3  # the answer's last tokens dropped: a shorter row, same images
    short = plain_sft.Row(row.input_ids[:cut], row.loss_mask[:cut], row.pixel_values, row.image_grid_thw,
                          row.position_ids[..., :cut])
    alone = plain_sft.masked_ce_sum(model, [short], "cpu", pad) + expected
    assert torch.allclose(plain_sft.masked_ce_sum(model, [short, row], "cpu", pad), alone, rtol=1e-4)


def test_plain_sft_check_samples_at_verls_positions(plain_sft, exported, tiny_vl_processor, tiny_vl_model_dir):
    """The check's first generated token is scored with the M-RoPE positions training and the rollout use."""
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_vl_model_dir, dtype=torch.float32).eval()
    tok = tiny_vl_processor.tokenizer
    (row,) = plain_sft.load_rows(exported, tiny_vl_processor)
    start, _ = plain_sft.turn_spans(row.loss_mask)[1]  # after the question image
    prefix, pixels, grid = plain_sft.turn_prompt(row, start, tok.convert_tokens_to_ids("<|vision_start|>"))
    out = plain_sft.generate_turn(model, tok, prefix, pixels, grid, "cpu", do_sample=False, max_new_tokens=1,
                                  output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        forward = model(input_ids=prefix[None], position_ids=row.position_ids[:, None, :start], pixel_values=pixels,
                        image_grid_thw=grid).logits[0, -1]
    assert torch.allclose(out.logits[0][0], forward, atol=1e-4)


def test_plain_sft_turn_prompts_end_at_each_assistant_header_with_the_images_before_it(plain_sft, exported,
                                                                                      tiny_vl_processor):
    tok = tiny_vl_processor.tokenizer
    (row,) = plain_sft.load_rows(exported, tiny_vl_processor)
    spans = plain_sft.turn_spans(row.loss_mask)
    assert len(spans) == 3  # ReverseImageSearch, FetchImage, the answer
    grids = []
    for start, _ in spans:
        prefix, pixels, grid = plain_sft.turn_prompt(row, start, tok.convert_tokens_to_ids("<|vision_start|>"))
        assert tok.decode(prefix).endswith("<|im_start|>assistant\n")
        grids.append(grid.tolist())
        assert pixels.shape[0] == 14 * 16 * len(grid)
    assert grids == [[[1, 14, 16]], [[1, 14, 16]], [[1, 14, 16], [1, 14, 16]]]  # img_2 arrives with FetchImage
    kinds = [plain_sft.turn_kind(tok.decode(row.input_ids[a:b])) for a, b in spans]
    assert kinds == [("call", "ReverseImageSearch"), ("call", "FetchImage"), ("answer", None)]
    assert plain_sft.turn_kind('<tool_call>{"name": "TextSearch", "arguments": {"query": ') == ("malformed_call", None)


def test_plain_sft_lr_schedule_warms_up_decays_to_the_floor_and_resumes_where_it_was(plain_sft):
    def lrs(start: int, steps: int) -> list[float]:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
        sched = plain_sft.lr_schedule(opt, warmup=4, total=104, start=start)
        seen = []
        for _ in range(steps):
            seen.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return seen

    # peak 2.0: warmup 0, 0.5, 1.0, 1.5, then cosine over the 100 steps after it, to a tenth of the peak at 104
    assert lrs(0, 5) == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0])
    assert lrs(54, 1) == pytest.approx([2.0 * 0.55])  # halfway: (1 + 0.1) / 2 of the peak
    assert lrs(104, 1) == pytest.approx([0.2])  # the floor at the last step
    assert lrs(0, 60)[54:] == pytest.approx(lrs(54, 6))  # a resumed run continues the same schedule


def test_plain_sft_trains_saves_resumes_and_checks_its_turns(plain_sft, exported, tiny_vl_model_dir, tmp_path,
                                                                capsys):
    from safetensors.torch import load_file

    out = tmp_path / "sft"
    common = ["--model", str(tiny_vl_model_dir), "--data", str(exported.parent), "--out", str(out), "--batch", "1",
              "--device", "cpu", "--workers", "0", "--lr", "1e-2", "--warmup", "0", "--holdout", "0"]
    assert plain_sft.main([*common, "--steps", "2", "--save-every", "2", "--check", "1",
                           "--check-temperature", "1.0", "0.5", "--check-max-new-tokens", "24"]) == 0
    assert plain_sft.newest_checkpoint(out) == 2
    check = json.loads((out / "check.json").read_text())
    assert check["model"] == str(out / "step_2" / "huggingface")  # the trained weights, not the start
    reports = check["reports"]
    assert [r["temperature"] for r in reports] == [1.0, 0.5]
    assert all(r["rows"] == 1 and r["turns"] == sum(r["outcomes"].values()) == 3 for r in reports)
    assert all(list(r["expert_kind_share_by_turn"]) == ["0", "1", "2"] for r in reports)
    assert "check at T=0.5 (training rows): " in capsys.readouterr().out
    start = load_file(tiny_vl_model_dir / "model.safetensors")
    trained = load_file(out / "step_2" / "huggingface" / "model.safetensors")
    assert {t.dtype for t in trained.values()} == {torch.bfloat16}  # --save-dtype's default
    assert json.loads((out / "step_2" / "huggingface" / "config.json").read_text())["dtype"] == "bfloat16"
    assert any(not torch.equal(trained[k].float(), start[k].float()) for k in start)
    # resumed: only step 3 runs, from step 2's weights
    assert plain_sft.main([*common, "--steps", "3", "--save-every", "1", "--check", "0", "--resume"]) == 0
    assert plain_sft.newest_checkpoint(out) == 3 and not (out / "step_1").exists()
    logged = [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert logged == [1, 2, 3]  # each run's first and last step (and every fifth)
    assert not reports[0]["held_out"]  # nothing held out: the check samples a training row


def test_plain_sft_with_its_defaults_holds_rows_out_for_its_loss_and_check(plain_sft, exported, tiny_vl_model_dir,
                                                                             tmp_path, capsys):
    # the shipped defaults (16 rows held out, batches of 16, 4 rows a forward, warmup, lr, check of 8 rows): 18 rows
    data = tmp_path / "data"
    data.mkdir()
    one = pd.read_parquet(exported)
    pd.concat([one.assign(id=f"row{i}") for i in range(18)], ignore_index=True).to_parquet(data / "sft.parquet")
    out = tmp_path / "sft"
    common = ["--model", str(tiny_vl_model_dir), "--data", str(data), "--out", str(out), "--device", "cpu",
              "--workers", "0", "--check-max-new-tokens", "8"]
    assert plain_sft.main([*common, "--steps", "1"]) == 0
    (line,) = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert line["step"] == 1 and "heldout_loss" in line  # the last step is always evaluated
    (report,) = json.loads((out / "check.json").read_text())["reports"]
    assert report["held_out"] and report["rows"] == 8 and report["turns"] == 24  # --check 8 of the 16 held out
    assert report["answer_rows"] == 16 and 0 <= report["answer_right_share"] <= 1  # --check-answers 32: all 16
    assert report["check_rows"] == "held-out"  # no rl_expert.parquet in this export
    assert "check at T=1.0 (held-out rows)" in capsys.readouterr().out
    # a saved checkpoint checked alone, on the same held-out rows (while a warm start would train on)
    step = out / "step_1" / "huggingface"
    assert plain_sft.main(["--model", str(step), "--data", str(data), "--out", str(tmp_path / "alone"), "--device",
                           "cpu", "--workers", "0", "--check-max-new-tokens", "8", "--check-only",
                           "--check-answers", "2"]) == 0
    alone = json.loads((tmp_path / "alone" / "check.json").read_text())
    assert alone["model"] == str(step) and alone["reports"][0]["held_out"] and alone["reports"][0]["rows"] == 8
    assert not (tmp_path / "alone" / "log.jsonl").exists()  # nothing trained
    # the checks on other episodes (the export's rl_expert.parquet by default, where it has one)
    assert plain_sft.main(["--model", str(step), "--data", str(data), "--out", str(tmp_path / "rl"), "--device",
                           "cpu", "--workers", "0", "--check-only", "--check", "0", "--check-answers", "3",
                           "--check-data", str(exported)]) == 0
    (rl,) = json.loads((tmp_path / "rl" / "check.json").read_text())["reports"]
    assert rl["check_rows"] == "sft.parquet" and rl["answer_rows"] == 1 and "turns" not in rl
    assert rl["temperature"] == 1.0
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # checkpoints renamed into place, no leftovers
    with pytest.raises(SystemExit) as exit_info:
        plain_sft.main([*common, "--steps", "1", "--holdout", "18"])
    assert exit_info.value.code == 2
    assert "--holdout: 18 of 18 episodes leaves none to train on" in capsys.readouterr().err


def test_plain_sft_holds_out_whole_episodes_with_their_answer_swapped_copies(plain_sft):
    rows = [plain_sft.Row(None, None, None, None, None, name) for name in
            ["a", "a~swap0", "b", "a~swap1", "c", "b~swap0", "d"]]
    train, held = plain_sft.hold_out(rows, 2)
    assert all(row.id == row.episode for row in held) and len(held) == 2  # expert episodes, not copies
    assert not {row.episode for row in train} & {row.episode for row in held}
    assert len(train) + len(held) + sum(row.episode in {h.id for h in held} and row.id != row.episode
                                        for row in rows) == len(rows)
    assert [r.id for r in plain_sft.hold_out(rows, 2)[1]] == [r.id for r in held]  # the same on every run
    # without copies: the permutation of the rows as before the swaps (the same held-out rows as earlier runs)
    plain = [plain_sft.Row(None, None, None, None, None, f"r{i}") for i in range(18)]
    order = torch.randperm(18, generator=torch.Generator().manual_seed(1)).tolist()
    assert [r.id for r in plain_sft.hold_out(plain, 16)[1]] == [f"r{i}" for i in order[:16]]


def test_plain_sft_answer_check_compares_the_last_turn_as_the_reward_does(plain_sft, exported, task,
                                                                         tiny_vl_processor, monkeypatch):
    (row,) = plain_sft.load_rows(exported, tiny_vl_processor)
    start, end = plain_sft.turn_spans(row.loss_mask)[-1]
    answer = row.input_ids[start:end]

    def writes(tokens):  # the model's part only: what it generates after the prefix
        return lambda model, tok, prefix, *args, **kwargs: torch.cat([prefix, tokens])[None]

    monkeypatch.setattr(plain_sft, "generate_turn", writes(answer))
    report = plain_sft.check_answers(torch.nn.Linear(1, 1), tiny_vl_processor, [row], temperature=1.0, max_new_tokens=8,
                                       device="cpu")
    assert report["answer_right_share"] == 1.0 and report["missed_samples"] == []
    # the reward's normalisation: case and an article do not matter; another fact does
    retold = tiny_vl_processor.tokenizer(f"The {task.answer.upper()}<|im_end|>", return_tensors="pt").input_ids[0]
    monkeypatch.setattr(plain_sft, "generate_turn", writes(retold))
    assert plain_sft.check_answers(torch.nn.Linear(1, 1), tiny_vl_processor, [row], temperature=1.0,
                                   max_new_tokens=8, device="cpu")["answer_right_share"] == 1.0
    other = tiny_vl_processor.tokenizer("Atlantis<|im_end|>", return_tensors="pt").input_ids[0]
    monkeypatch.setattr(plain_sft, "generate_turn", writes(other))
    report = plain_sft.check_answers(torch.nn.Linear(1, 1), tiny_vl_processor, [row], temperature=1.0, max_new_tokens=8,
                                       device="cpu")
    assert report["answer_right_share"] == 0.0 and report["missed_samples"] == [{"want": task.answer,
                                                                                "got": "Atlantis"}]


def test_plain_sft_refuses_a_directory_without_the_export(plain_sft, tmp_path, tiny_vl_model_dir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        plain_sft.main(["--model", str(tiny_vl_model_dir), "--data", str(tmp_path), "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert f"--data: {tmp_path / 'sft.parquet'} not found" in capsys.readouterr().err


async def test_an_episode_the_agent_loop_rolls_out_is_token_for_token_its_sft_row(
    task, small_world, tiny_vl_model, tiny_vl_processor, tool_server, tmp_path
):
    """What SFT trains on is what RL shows: an episode of the ``neos_search_agent`` loop (the expert's words forced,
    the exporter's RL row read by verl's ``RLHFDataset``, the real tool server's observations and fetched image),
    exported as an SFT row and read by verl's SFT dataset, gives the loop's own tokens (image placeholders included)
    with targets on exactly its generated turns. It caught fetched images reaching the processor unrounded (54
    visual tokens for a flag SFT shows as 56), found while looking for why the learning curve's warm start wrote
    calls in its check but not in RL (the main cause was its training positions)."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from verl_ext.data.sft_dataset import JsonToolsMultiTurnSFTDataset
    from verl_ext.rollout.hf_generate import TransformersGenerateClient

    from ..rollout.test_agent_loop_on_cpu import make_loop, run, scripted, url_of

    def call(name, **arguments):  # as the chat template writes a call: non-ASCII kept
        body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        return f"<tool_call>\n{body}\n</tool_call>"

    url = next(s.checkpoint_image_url for s in task.steps if s.checkpoint)
    forced = scripted("A reverse image search first.\n" + call("ReverseImageSearch", image_token=["img_1"], goal=GOAL),
                      call("FetchImage", urls=[url]), task.answer)
    pd.DataFrame([rl_row(task, small_world, "rl", 0)]).to_parquet(tmp_path / "rl.parquet")  # the exporter's RL row
    config = OmegaConf.create({"filter_overlong_prompts": False, "cache_dir": str(tmp_path / "cache")})
    messages = RLHFDataset(str(tmp_path / "rl.parquet"), tiny_vl_processor.tokenizer, config,
                           processor=tiny_vl_processor)[0]["raw_prompt"]
    client = TransformersGenerateClient(tiny_vl_model, tiny_vl_processor, max_new_tokens=128, forced=forced)
    out, record = await run(make_loop("neos_search_agent", client, url_of(tool_server)), messages)
    assert [t.outcome for t in record.turns] == ["call_ok", "call_ok", "answer"]

    (tmp_path / "sft.jsonl").write_text(json.dumps(sft_record(task, record.model_dump(mode="json"))) + "\n")
    assert sft_parquet_from_jsonl(tmp_path / "sft.jsonl", small_world, tmp_path / "sft.parquet") == 1
    config = OmegaConf.create({"max_length": 8192, "pad_mode": "no_padding", "truncation": "error"})
    item = JsonToolsMultiTurnSFTDataset(str(tmp_path / "sft.parquet"), tiny_vl_processor.tokenizer, config,
                                        processor=tiny_vl_processor)[0]
    newline = tiny_vl_processor.tokenizer.encode("\n")
    assert item["input_ids"].tolist() == out.prompt_ids + out.response_ids + newline  # generation stops at <|im_end|>
    # SFT's targets: each generated turn and the newline after its <|im_end|>
    mask = [0] * len(out.prompt_ids) + list(out.response_mask) + [0]
    for i in range(len(mask) - 1, 0, -1):
        mask[i] |= mask[i - 1]
    assert item["loss_mask"].tolist() == mask
    assert tuple(map(tuple, item["multi_modal_inputs"]["image_grid_thw"].tolist())) == client.calls[-1].image_grid_thw
    assert client.calls[-1].image_grid_thw == ((1, 14, 16), (1, 14, 16))  # two 320x240 flags, 56 tokens each
