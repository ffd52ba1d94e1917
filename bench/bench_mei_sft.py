"""MEI SFT throughput: tokens per second of ``train_mei`` through verl's TrainingWorker (FSDP2) on one GPU.

Synthetic ReverseImageSearch calls (two small images each, a short JSON target) tokenised with the MEI model's
processor, then ``--updates`` MEI updates of ``--examples`` calls on one worker group; the figure is the median
tokens/s (all tokens through forward and backward) of the updates after the first (the first pays CUDA/NCCL warm-up).
No baseline exists in the same run: the figure is absolute. Needs a CUDA device and verl + Ray (see
tests/mei/test_mei_sft_on_gpu.py for the GPU machine's setup)::

    PYTHONPATH=/tmp/site:$PWD:$PWD/.gpu/extra \\
      python bench/bench_mei_sft.py --model .gpu/tiny-vl --examples 64 --updates 4
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile

from neos_core.usage import OneLineParser, positive_int

# The GPU image ships JAX; anything that initialises it would preallocate most of the GPU for XLA.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _png(color: tuple[int, int, int], size: tuple[int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def synthetic_examples(n: int) -> list:
    """``n`` ReverseImageSearch SFT examples (query 56x56, one 84x56 candidate, a one-candidate JSON answer)."""
    from tool_server.mei.prompts import reverse_image_messages
    from tool_server.mei.schema import ImageView
    from verl_ext.mei.sft import SFTExample, target_text

    out = []
    for i in range(n):
        q = ImageView(url=f"https://neos-world.invalid/q{i}.png", png=_png((10 * i % 255, 80, 160), (56, 56)))
        c = ImageView(url=f"https://neos-world.invalid/c{i}.png", png=_png((200, 10 * i % 255, 40), (84, 56)))
        target = {"rational": f"case {i}", "candidates": [
            {"index": 0, "match_state": ["visual_match", "not_match"][i % 2], "caption": f"candidate {i}"}]}
        out.append(SFTExample(f"g{i}", reverse_image_messages(f"goal {i}", q, [c]), target_text(target)))
    return out


def synthetic_web_examples(n: int) -> list:
    """``n`` text-only WebVisit SFT examples (a short page, no images): most MEI calls in a Neos rollout."""
    from tool_server.mei.prompts import web_visit_messages
    from tool_server.mei.schema import PageView
    from verl_ext.mei.sft import SFTExample, target_text

    out = []
    for i in range(n):
        page = PageView(url=f"https://neos-world.invalid/wiki/P{i}", title=f"P{i}",
                        text=f"Page {i}. The bridge over river {i} was built in {1800 + i}.")
        target = {"rational": "The page dates the bridge.", "evidence": f"built in {1800 + i}",
                  "summary": f"{1800 + i}", "relevant_images": []}
        out.append(SFTExample(f"w{i}", web_visit_messages(f"when was bridge {i} built", page, max_page_chars=2000),
                              target_text(target)))
    return out


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_mei_sft.py", description="MEI SFT throughput: tokens per second of an "
                      "MEI update through verl's TrainingWorker (FSDP2) on one GPU, the median of the updates after "
                      "the first. Needs a CUDA device, verl and Ray.")
    p.add_argument("--model", required=True, metavar="DIR", help="HF directory of the MEI model to train")
    p.add_argument("--examples", type=positive_int, default=64, metavar="N",
                   help="synthetic ReverseImageSearch calls per update (default: 64)")
    p.add_argument("--updates", type=positive_int, default=4, metavar="N",
                   help="MEI updates; the first is warm-up and not counted (default: 4)")
    p.add_argument("--batch", type=positive_int, default=16, metavar="N",
                   help="global batch size (default: 16, the paper's)")
    p.add_argument("--micro", type=positive_int, default=4, metavar="N", help="micro-batch size per GPU (default: 4)")
    return p


def main() -> None:
    args = parser().parse_args()

    import ray
    from transformers import AutoProcessor

    from verl_ext.mei.sft import tokenize
    from verl_ext.mei.worker import MEITrainSettings, build_worker_group, train_mei

    processor = AutoProcessor.from_pretrained(args.model)
    items = [tokenize(ex, processor) for ex in synthetic_examples(args.examples)]
    ray.init(num_gpus=1, include_dashboard=False, log_to_driver=False)
    rates = []
    try:
        group = build_worker_group(MEITrainSettings(
            model_path=os.path.abspath(args.model), attn_implementation="sdpa", use_remove_padding=False,
            global_batch_size=args.batch, micro_batch_size_per_gpu=args.micro))
        with tempfile.TemporaryDirectory() as out:
            for k in range(args.updates):
                m = train_mei(group, items, f"v{k + 1}", out_dir=out, pad_token_id=processor.tokenizer.pad_token_id,
                              global_batch_size=args.batch, micro_batch_size=args.micro).metrics
                rates.append(m["mei/tokens_per_s"])
                print(f"update {k + 1}: {m['mei/steps']:.0f} steps, {m['mei/tokens']:.0f} tokens "
                      f"({m['mei/target_tokens']:.0f} target), {m['mei/seconds']:.2f} s, "
                      f"{m['mei/tokens_per_s']:.0f} tokens/s, loss {m['mei/loss']:.4f}")
    finally:
        ray.shutdown()
    print(f"MEI SFT tokens/s, median of updates 2..{args.updates}: {statistics.median(rates[1:]):.0f}")


if __name__ == "__main__":
    main()
