"""The learning curve's policy warm start in a plain torch loop, with a check of the turns it writes.

**Why not verl's SFT trainer** (which ``tests/data_gen/test_verl_sft_on_gpu.py`` runs, the real path): on an H100 on
2026-12-07 it took 12.5 s a step of 16 expert rows (~57,000 tokens; FSDP2, ``use_remove_padding=false`` because
verl 0.9.1's remove-padding patch breaks under transformers 5.x, dynamic micro-batches of 16,384 tokens; MFU 0.5%,
53 GB reserved), so the ~400 steps a from-scratch model needs would not fit a 30-minute GPU session. This loop
reads the very rows that trainer reads (verl's ``MultiTurnSFTDataset`` through our JSON-tools subclass: same chat
template, loss masks and images), trains the same masked cross-entropy (assistant tokens only, each row's sum over
the batch's target count), and computes logits only where a target is (10% of the tokens): 0.66 s a step on the
same GPU and rows once warm, one row a forward, 19x faster (0.42 s with ``--rows-per-forward`` 4, the default). It
passes verl's position ids (M-RoPE for Qwen-VL) as verl's trainer does. What it leaves out: FSDP (one GPU), verl's
checkpoint format (it writes HF directories), sequence packing.

**The check**: a warm start is useful for RL only if it writes well-formed calls and reads its answers off the
pages, which the loss does not say (a step-100 checkpoint at loss 0.25 wrote 8% well-formed turns in RL; a step-400
one wrote 98% but answered 1 of 40 RL questions right: 2026-12-07). It runs on episodes never trained on: the RL
split's expert episodes (``rl_expert.parquet`` of the export, ``--check-data``), else the held-out rows. ``--check N``
samples every assistant turn of N of them after the expert's own history, at the rollout's temperature, and parses
it with the agent loop's own parser (``verl_ext.rollout.protocols.parse_neos_turn``): the share of turns of the
expert's kind (a well-formed call where it called, an answer where it answered), overall and by turn index, and of
calls naming its tool. ``--check-answers N`` samples the last turn of N of them and compares it with the expert's
answer as the reward does. Printed and kept in ``OUT/check.json`` (one report per ``--check-temperature``). An upper
bound for RL, where the history is the policy's own. The held-out rows' loss, logged every ``--eval-every`` steps,
says when more passes only memorise the training episodes; an episode's answer-swapped copies (``data_gen neos
--sft-answer-swaps``) are held out with it.

    python bench/curve_sft_plain.py --model DIR --data CURVE_DATA --out OUT --steps 400 --check 8

writes ``OUT/step_<N>/huggingface`` every ``--save-every`` steps (weights, processor: the policy of
``bench/learning_curve.py --policy``), ``OUT/log.jsonl`` (step, loss, held-out loss, seconds a step); ``--resume``
continues from the newest ``step_<N>`` (weights only: a fresh optimizer; the schedule continues at step N).
"""

from __future__ import annotations

import copy
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from data_gen.common.sft import SWAP_ID
from neos_core.usage import OneLineParser, positive_float, positive_int, whole_number
from tool_server.mei.jsonl import write_atomic

if TYPE_CHECKING:
    import torch

STEP_DIR = re.compile(r"step_(\d+)$")


@dataclass(frozen=True)
class Row:
    """One expert episode as verl's SFT dataset tokenised it."""
    input_ids: torch.Tensor  # 1-D, long
    loss_mask: torch.Tensor  # 1-D, bool: the tokens to predict
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    position_ids: torch.Tensor  # verl's: (4, L) for Qwen-VL (text positions, then the 3-D M-RoPE index), else (L,)
    id: str = ""  # the parquet row's: an expert episode's, or ``<episode>~swapK`` for data_gen's answer swaps

    @property
    def episode(self) -> str:
        """The expert episode the row was made of."""
        return self.id.split(SWAP_ID)[0]


def load_rows(sft_parquet: Path, processor, *, workers: int = 0) -> list[Row]:
    """Every row of ``sft.parquet`` through verl's own multi-turn SFT dataset (the processor runs in ``workers``)."""
    import pyarrow.parquet as pq
    import torch
    from omegaconf import OmegaConf

    from verl_ext.data.sft_dataset import JsonToolsMultiTurnSFTDataset

    config = OmegaConf.create({"max_length": 16384, "truncation": "error", "pad_mode": "no_padding"})
    dataset = JsonToolsMultiTurnSFTDataset(str(sft_parquet), processor.tokenizer, config, processor=processor)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers, collate_fn=lambda x: x)
    ids = pq.read_table(sft_parquet, columns=["id"]).column("id").to_pylist()  # the dataset keeps the file's order
    rows = []
    for row_id, item in zip(ids, loader, strict=True):
        media = item.get("multi_modal_inputs", {})
        rows.append(Row(item["input_ids"].long(), item["loss_mask"].bool(), media.get("pixel_values"),
                        media.get("image_grid_thw"), item["position_ids"].long(), row_id))
    return rows


def hold_out(rows: list[Row], count: int) -> tuple[list[Row], list[Row]]:
    """(training rows, ``count`` held-out expert episodes): the same episodes on every run and resume (a fixed
    permutation); an episode's answer-swapped copies are held out with it, so none of it is trained on."""
    import torch

    experts = [i for i, row in enumerate(rows) if row.episode == row.id]
    order = torch.randperm(len(experts), generator=torch.Generator().manual_seed(1)).tolist()
    held = [experts[i] for i in order[:count]]
    episodes = {rows[i].episode for i in held}
    return [row for row in rows if row.episode not in episodes], [rows[i] for i in held]


def masked_ce_sum(model, rows: list[Row], device: str, pad_token_id: int):
    """Summed cross-entropy over the rows' targets (token t+1 predicted at t where loss_mask[t+1]) in one forward:
    rows right-padded into a batch with an attention mask, images in row order, logits only at the target positions.
    Positions are verl's (its SFT trainer's and its actor's): without them transformers 5.x's Qwen2.5-VL falls back
    to 1-D positions, which no rollout engine uses (a warm start trained so on 2026-12-07 had loss 0.02 on its own
    rows under 1-D positions and 0.6 under M-RoPE, and wrote 80% malformed turns in RL)."""
    import torch

    width = max(len(row.input_ids) for row in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    positions = torch.zeros((*rows[0].position_ids.shape[:-1], len(rows), width), dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    targets = torch.zeros((len(rows), width - 1), dtype=torch.bool)
    for i, row in enumerate(rows):
        n = len(row.input_ids)
        ids[i, :n], attention[i, :n], targets[i, :n - 1] = row.input_ids, 1, row.loss_mask[1:]
        positions[..., i, :n] = row.position_ids
    pixels = [row.pixel_values for row in rows if row.pixel_values is not None]
    grids = [row.image_grid_thw for row in rows if row.image_grid_thw is not None]
    ids, targets = ids.to(device), targets.to(device)
    out = model.model(input_ids=ids, attention_mask=attention.to(device), position_ids=positions.to(device),
                      pixel_values=torch.cat(pixels).to(device) if pixels else None,
                      image_grid_thw=torch.cat(grids).to(device) if grids else None)
    hidden = out.last_hidden_state[:, :-1][targets]
    logits = model.get_output_embeddings()(hidden).float()
    return torch.nn.functional.cross_entropy(logits, ids[:, 1:][targets], reduction="sum")


def lr_schedule(optimizer, *, warmup: int, total: int, start: int = 0, floor: float = 0.1):
    """verl's cosine schedule with linear warmup (its SFT trainer's), down to ``floor`` of the peak at ``total``,
    continuing at step ``start`` (a resumed run: its optimizer is fresh, its schedule is not)."""
    from verl.utils.torch_functional import get_cosine_schedule_with_warmup

    for group in optimizer.param_groups:
        group.setdefault("initial_lr", group["lr"])  # what torch's schedulers need to start past step 0
    return get_cosine_schedule_with_warmup(optimizer, warmup, total, min_lr_ratio=floor, last_epoch=start - 1)


def turn_spans(loss_mask: torch.Tensor) -> list[tuple[int, int]]:
    """[start, end) of each assistant turn: the maximal runs of targets."""
    import torch

    edges = torch.diff(torch.cat([torch.zeros(1, dtype=torch.long), loss_mask.long(),
                                  torch.zeros(1, dtype=torch.long)])).tolist()
    return list(zip([i for i, d in enumerate(edges) if d == 1], [i for i, d in enumerate(edges) if d == -1]))


def turn_prompt(row: Row, start: int, vision_start_id: int) -> tuple[torch.Tensor, torch.Tensor | None,
                                                                         torch.Tensor | None]:
    """The tokens before ``start`` (the expert's history up to an assistant header) and the images in them."""
    prefix = row.input_ids[:start]
    images = int((prefix == vision_start_id).sum())
    if not images or row.image_grid_thw is None:
        return prefix, None, None
    grid = row.image_grid_thw[:images]
    return prefix, row.pixel_values[: int(grid.prod(dim=1).sum())], grid


def generate_turn(model, tokenizer, prefix: torch.Tensor, pixels: torch.Tensor | None, grid: torch.Tensor | None,
                  device: str, **generate_kwargs):
    """``model.generate`` after ``prefix`` with M-RoPE positions: its image placeholders marked in
    ``mm_token_type_ids``, without which transformers 5.x's Qwen2.5-VL generates with 1-D positions."""
    import torch

    ids = prefix.to(device)[None]
    vision = {}
    if pixels is not None:
        image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
        vision = {"pixel_values": pixels.to(device), "image_grid_thw": grid.to(device),
                  "mm_token_type_ids": (ids == image_pad).int()}
    return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **vision, **generate_kwargs)


def turn_kind(text: str) -> tuple[str, str | None]:
    """What the agent loop would make of a turn: ``call`` (well-formed, with its tool), ``answer`` or the format
    error's type."""
    from verl_ext.rollout.protocols import parse_neos_turn

    parsed = parse_neos_turn(text.split("<|im_end|>")[0])
    if parsed.error:
        return parsed.error.type, None
    return ("call", parsed.calls[0].name) if parsed.calls else ("answer", None)


def check_turns(model, processor, rows: list[Row], *, temperature: float, max_new_tokens: int,
                device: str, seed: int = 0) -> dict:
    """Sample every assistant turn of each row after the expert's own history (as in the episode) and parse it as the
    agent loop would: the share of turns in the expert's kind (a well-formed call where it called, an answer where it
    answered), of calls naming its tool, and that share by turn index."""
    import torch

    tok = processor.tokenizer
    vision_start = tok.convert_tokens_to_ids("<|vision_start|>")
    outcomes: dict[str, int] = {}
    by_turn: dict[int, list[int]] = {}
    calls = same_tool = 0
    samples = []
    torch.manual_seed(seed)
    model.eval()
    with torch.no_grad():
        for row in rows:
            for index, (start, end) in enumerate(turn_spans(row.loss_mask)):
                prefix, pixels, grid = turn_prompt(row, start, vision_start)
                out = generate_turn(model, tok, prefix, pixels, grid, device, do_sample=True,
                                    temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens)
                text = tok.decode(out[0, len(prefix):])
                kind, tool = turn_kind(text)
                want, want_tool = turn_kind(tok.decode(row.input_ids[start:end]))
                outcomes[kind] = outcomes.get(kind, 0) + 1
                by_turn.setdefault(index, []).append(int(kind == want))
                calls += want == "call"
                same_tool += want == "call" and tool == want_tool
                if len(samples) < 3 and kind != want:
                    samples.append(text[:300])
    model.train()
    turns = sum(outcomes.values())
    return {"rows": len(rows), "turns": turns, "temperature": temperature,
            "expert_kind_share": sum(sum(v) for v in by_turn.values()) / turns,
            "expert_tool_share": same_tool / max(calls, 1), "outcomes": outcomes,
            "expert_kind_share_by_turn": {i: sum(v) / len(v) for i, v in sorted(by_turn.items())},
            "failed_samples": samples}


def save(model, processor, hf: Path, dtype) -> None:
    """The HF directory of the policy, its weights stored in ``dtype`` (the training copy stays float32), renamed
    into place complete: ``--resume`` and a check started beside the training never read a half-written one."""
    from verl_ext.models.tiny_vl import write_model_dir

    def write(tmp: Path) -> None:
        copy.deepcopy(model).to(dtype).save_pretrained(tmp)  # a copy: configs and weights agree on the dtype
        processor.save_pretrained(tmp)

    write_model_dir(hf, write)


def newest_checkpoint(out: Path) -> int:
    steps = [int(m.group(1)) for p in out.glob("step_*") if (m := STEP_DIR.search(p.name))
             and (p / "huggingface" / "config.json").is_file()]
    return max(steps, default=0)


def parser() -> OneLineParser:
    p = OneLineParser(prog="python bench/curve_sft_plain.py", description="The learning curve's policy warm start: "
                      "masked cross-entropy on verl's SFT rows of sft.parquet in a plain torch loop (one GPU), then "
                      "a check of the first turns it writes (see the module docstring for why not verl's trainer).")
    p.add_argument("--model", type=Path, required=True, metavar="DIR", help="HF model directory to start from")
    p.add_argument("--data", type=Path, required=True, metavar="DIR", help="the export holding sft.parquet")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="checkpoints, log.jsonl, check.json")
    p.add_argument("--steps", type=positive_int, default=400, help="optimizer steps (default: 400: the held-out loss "
                   "stopped falling by then on 2026-12-07)")
    p.add_argument("--batch", type=positive_int, default=16, help="rows per step (default: 16)")
    p.add_argument("--rows-per-forward", type=positive_int, default=4, metavar="N",
                   help="rows padded into one forward (default: 4; one row a forward left the H100 11%% busy)")
    p.add_argument("--lr", type=positive_float, default=1.5e-3, help="peak learning rate (default: 1.5e-3)")
    p.add_argument("--warmup", type=whole_number(0), default=20, help="warmup steps (default: 20)")
    p.add_argument("--save-every", type=positive_int, default=200, metavar="N", help="checkpoint period (default: 200)")
    p.add_argument("--holdout", type=whole_number(0), default=16, metavar="N",
                   help="rows never trained on: their loss is logged every --eval-every steps and the check samples "
                   "them (default: 16)")
    p.add_argument("--eval-every", type=positive_int, default=50, metavar="N", help="(default: 50; a multiple of 5)")
    p.add_argument("--check", type=whole_number(0), default=8, metavar="N",
                   help="rows whose every turn is sampled and parsed at the end (default: 8, ~56 turns; 0: none)")
    p.add_argument("--check-answers", type=whole_number(0), default=32, metavar="N",
                   help="rows whose last turn (the answer) is sampled and compared with the expert's as the reward "
                   "does, at the end (default: 32; 0: none)")
    p.add_argument("--check-data", type=Path, default=None, metavar="PARQUET",
                   help="the checks' episodes (default: DATA/rl_expert.parquet, the RL split's: answers SFT never "
                   "shows; without it the held-out rows)")
    p.add_argument("--check-temperature", type=positive_float, nargs="+", default=[1.0], metavar="T",
                   help="sampling temperatures of the check, each a report (default: 1.0, the rollout's)")
    p.add_argument("--check-max-new-tokens", type=positive_int, default=256, metavar="N",
                   help="longest sampled turn (default: 256; the expert's turns are shorter)")
    p.add_argument("--check-only", action="store_true", help="no training: check --model")
    p.add_argument("--save-dtype", choices=("bfloat16", "float32"), default="bfloat16",
                   help="dtype of the saved weights (default: bfloat16: half the bytes to carry, as verl's rollout "
                   "serves them)")
    p.add_argument("--resume", action="store_true", help="continue from the newest OUT/step_<N>")
    p.add_argument("--workers", type=whole_number(0), default=8, help="processes running the processor (default: 8)")
    p.add_argument("--device", default="cuda", help="(default: cuda)")
    p.add_argument("--seed", type=whole_number(0), default=0, help="row order and sampling seed (default: 0)")
    return p


def check_answers(model, processor, rows: list[Row], *, temperature: float, max_new_tokens: int, device: str,
                  seed: int = 0) -> dict:
    """Sample each row's last turn (the answer) after the expert's history and compare it with the expert's answer as
    the reward does (``normalize_answer``). On the RL split's episodes (``rl_expert.parquet``: answers SFT never
    shows) it says whether the warm start reads the asked fact off the last page or recalls training answers, which
    the turn check cannot: on 2026-12-07 a warm start whose turns were 98% of the expert's kind answered 1 of 40 RL
    questions right (each time another fact of the right page), and RL from it never earned a reward."""
    import torch

    from verl_ext.reward.answers import normalize_answer

    tok = processor.tokenizer
    vision_start = tok.convert_tokens_to_ids("<|vision_start|>")
    right, missed = 0, []
    torch.manual_seed(seed)
    model.eval()
    with torch.no_grad():
        for row in rows:
            start, end = turn_spans(row.loss_mask)[-1]
            prefix, pixels, grid = turn_prompt(row, start, vision_start)
            out = generate_turn(model, tok, prefix, pixels, grid, device, do_sample=True, temperature=temperature,
                                top_p=1.0, top_k=0, max_new_tokens=max_new_tokens)
            got = tok.decode(out[0, len(prefix):]).split("<|im_end|>")[0].strip()
            want = tok.decode(row.input_ids[start:end]).split("<|im_end|>")[0].strip()
            if normalize_answer(got) == normalize_answer(want):
                right += 1
            elif len(missed) < 5:
                missed.append({"want": want, "got": got[:120]})
    model.train()
    return {"rows": len(rows), "temperature": temperature, "answer_right_share": right / max(len(rows), 1),
            "missed_samples": missed}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not (args.data / "sft.parquet").is_file():
        parser().error(f"--data: {args.data / 'sft.parquet'} not found (python -m data_gen neos --out DIR)")
    if not (args.model / "config.json").is_file():
        parser().error(f"--model: {args.model}: not an HF model directory (no config.json)")
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    torch.manual_seed(args.seed)
    start = newest_checkpoint(args.out) if args.resume else 0
    source = args.out / f"step_{start}" / "huggingface" if start else args.model
    processor = AutoProcessor.from_pretrained(args.model)
    t = time.time()
    rows = load_rows(args.data / "sft.parquet", processor, workers=args.workers)
    episodes = len({row.episode for row in rows})
    if args.holdout >= episodes:
        parser().error(f"--holdout: {args.holdout} of {episodes} episodes leaves none to train on")
    targets = sum(int(r.loss_mask.sum()) for r in rows)
    print(f"{len(rows)} rows, {sum(len(r.input_ids) for r in rows)} tokens ({targets} targets), "
          f"read in {time.time() - t:.0f} s; starting from {source}", flush=True)
    rows, held = hold_out(rows, args.holdout)
    model = AutoModelForImageTextToText.from_pretrained(source, dtype=torch.float32, attn_implementation="sdpa")
    model.to(args.device).train()
    autocast = torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.device != "cpu")
    checked = source  # the weights the check samples: the last step's once trained
    if not args.check_only and start < args.steps:
        train(model, processor, rows, held, args, start, autocast)
        checked = args.out / f"step_{args.steps}" / "huggingface"
    if args.check or args.check_answers:
        # questions not trained on: the RL split's episodes where the export has them, else the held-out rows
        check_data = args.check_data or args.data / "rl_expert.parquet"
        checked_rows = load_rows(check_data, processor, workers=args.workers) if check_data.is_file() else held or rows
        source_name = check_data.name if check_data.is_file() else "held-out" if held else "training"
        reports = []
        for temperature in args.check_temperature:
            report = {"held_out": bool(held), "check_rows": source_name, "temperature": temperature}
            with autocast:
                if args.check:
                    report |= check_turns(model, processor, checked_rows[:args.check], temperature=temperature,
                                          max_new_tokens=args.check_max_new_tokens, device=args.device)
                if args.check_answers:
                    answers = check_answers(model, processor, checked_rows[:args.check_answers],
                                            temperature=temperature, max_new_tokens=args.check_max_new_tokens,
                                            device=args.device)
                    report |= {"answer_rows": answers["rows"], "answer_right_share": answers["answer_right_share"],
                               "missed_answers": answers["missed_samples"]}
            reports.append(report)
            line = f"check at T={temperature} ({source_name} rows):"
            if args.check:
                by_turn = " ".join(f"{share:.0%}" for share in report["expert_kind_share_by_turn"].values())
                line += (f" {report['expert_kind_share']:.0%} of {report['turns']} turns in the expert's kind (by "
                         f"turn: {by_turn}), {report['expert_tool_share']:.0%} of its calls' tools "
                         f"({report['outcomes']});")
            if args.check_answers:
                line += f" answers right {report['answer_right_share']:.0%} of {report['answer_rows']}"
            print(line, flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        write_atomic(args.out / "check.json",
                     (json.dumps({"model": str(checked), "reports": reports}, indent=1) + "\n").encode(), durable=False)
    return 0


def heldout_loss(model, rows: list[Row], device: str, autocast, pad_token_id: int) -> float:
    """Mean cross-entropy per target over ``rows`` (no gradient)."""
    import torch

    model.eval()
    with torch.no_grad(), autocast:
        total = sum(float(masked_ce_sum(model, [row], device, pad_token_id)) for row in rows)
    model.train()
    return total / sum(int(row.loss_mask[1:].sum()) for row in rows)


def train(model, processor, rows: list[Row], held: list[Row], args, start: int, autocast) -> None:
    import torch

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    sched = lr_schedule(opt, warmup=args.warmup, total=args.steps, start=start)
    order: list[int] = []
    pad_id = processor.tokenizer.pad_token_id
    generator = torch.Generator().manual_seed(args.seed + start)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with open(args.out / "log.jsonl", "a") as log:
        for step in range(start + 1, args.steps + 1):
            while len(order) < args.batch:  # epochs back to back, fewer rows than a batch too
                order += torch.randperm(len(rows), generator=generator).tolist()
            batch, order = order[:args.batch], order[args.batch:]
            count = sum(int(rows[i].loss_mask[1:].sum()) for i in batch)
            total = 0.0
            for first in range(0, len(batch), args.rows_per_forward):
                chunk = [rows[i] for i in batch[first:first + args.rows_per_forward]]
                with autocast:
                    loss = masked_ce_sum(model, chunk, args.device, pad_id) / count
                loss.backward()
                total += loss.item()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            if step % 5 == 0 or step in (start + 1, args.steps):
                per_step = (time.time() - t0) / (step - start)
                line = {"step": step, "loss": round(total, 5), "grad_norm": round(grad_norm, 4),
                        "lr": sched.get_last_lr()[0], "s_per_step": round(per_step, 3)}
                if held and (step % args.eval_every == 0 or step == args.steps):
                    line["heldout_loss"] = round(heldout_loss(model, held, args.device, autocast, pad_id), 5)
                log.write(json.dumps(line) + "\n")
                log.flush()
                print(json.dumps(line), flush=True)
            if step % args.save_every == 0 or step == args.steps:
                hf = args.out / f"step_{step}" / "huggingface"
                save(model, processor, hf, getattr(torch, args.save_dtype))
                print(f"saved {hf}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
