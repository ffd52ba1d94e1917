"""Does an MEI checkpoint answer usably? Greedy answers to logged calls, judged exactly as the tool server judges them.

A checkpoint whose answers all fail the tool server's checks is silently useless for co-evolution: every call falls
back to the extractive interface, no call is retained and the first MEI update never happens (Neos §3.5 trains the
MEI on its own valid calls). The SFT loss does not tell: the smoke's tiny MEI, warm-started to a mean loss of 0.58
per target token, gave not one usable answer. So the warm start ends with this check, and it runs alone:

    python -m verl_ext.mei.check --model MEI_DIR/v0/huggingface --pairs OUT/mei_sft.jsonl [--check-calls 8]

Each checked call goes through the MEI server's own path (:func:`verl_ext.mei.server.complete`: the checkpoint's
processor and chat template, the transformers generate loop, greedy as the tool server asks) on the messages the
call logged (built by :mod:`tool_server.mei.prompts`, as the tool server's model MEI sends them), and the answer is
read as :class:`tool_server.mei.client.ModelMEI` reads it (JSON, else json-repair; the strict schema; the tool-side
check). ``valid`` and ``repaired`` answers are usable (MEI selection retains both); ``invalid`` ones would be retried
and then fall back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from neos_core.usage import OneLineParser, nonnegative_int, positive_int, share
from tool_server.mei import MEIConfig
from tool_server.mei.client import logged_answer_check, read_answer
from tool_server.mei.log import BlobStore, MEILog, MEIRecord, blobs_dir_of, load_images

# What the tool server asks of a model MEI by default (``MEIConfig.max_tokens``); the server caps it at its own limit.
DEFAULT_MAX_TOKENS: int = MEIConfig.model_fields["max_tokens"].default


@dataclass(frozen=True, slots=True)
class Answer:
    call_id: str
    method: str
    verdict: Literal["valid", "repaired", "invalid"]
    finish_reason: str  # "length": the answer hit the token limit (an unclosed JSON object, usually)
    completion_tokens: int
    text: str  # the answer's start, for the log


@dataclass(slots=True)
class CheckReport:
    answers: list[Answer] = field(default_factory=list)

    @property
    def usable(self) -> int:
        return sum(a.verdict != "invalid" for a in self.answers)

    @property
    def share(self) -> float:
        return self.usable / len(self.answers) if self.answers else 0.0

    def line(self) -> str:
        """``valid answers k/n (...)``: the log line that says whether the MEI is good."""
        verdicts = Counter(a.verdict for a in self.answers)
        per_method: dict[str, list[int]] = {}
        for a in self.answers:
            counts = per_method.setdefault(a.method, [0, 0])
            counts[0] += a.verdict != "invalid"
            counts[1] += 1
        methods = ", ".join(f"{m} {k}/{n}" for m, (k, n) in per_method.items())
        truncated = sum(a.finish_reason == "length" for a in self.answers)
        return (f"valid answers {self.usable}/{len(self.answers)} (valid {verdicts['valid']}, repaired "
                f"{verdicts['repaired']}, invalid {verdicts['invalid']}, hit the token limit {truncated}; {methods})")

    def to_json(self) -> dict:
        return {"valid_answers": self.usable, "checked": len(self.answers), "share": self.share,
                "answers": [asdict(a) for a in self.answers]}


def pick_calls(records: list[MEIRecord], n: int) -> list[MEIRecord]:
    """Up to ``n`` calls with logged messages, taken in turn from each method (log order within one), so both the
    long web-visit answers and the image-judging ones are checked."""
    by_method: dict[str, list[MEIRecord]] = {}
    for r in records:
        if r.messages:
            by_method.setdefault(r.method, []).append(r)
    queues = list(by_method.values())
    picked: list[MEIRecord] = []
    while len(picked) < n and any(queues):
        for queue in queues:
            if queue and len(picked) < n:
                picked.append(queue.pop(0))
    return picked


async def check_answers(served, calls: list[MEIRecord], blobs: BlobStore, *,
                        max_tokens: int = DEFAULT_MAX_TOKENS) -> CheckReport:
    """Ask ``served`` (:func:`verl_ext.mei.server.load_checkpoint`) each call's logged messages, greedy as the tool
    server does, and judge each answer as it does."""
    from verl_ext.mei.server import complete

    report = CheckReport()
    for call in calls:
        model, check = logged_answer_check(call.method, call.input)
        answer = await complete(served, load_images(call.messages, blobs),
                                {"temperature": 0.0, "max_tokens": max_tokens})
        read = read_answer(answer.text, model, check)
        report.answers.append(Answer(call.call_id, call.method, "invalid" if read is None else read[1],
                                     answer.finish_reason, answer.completion_tokens, answer.text[:300]))
    return report


def check_checkpoint(model_dir: Path, pairs: Path, *, calls: int = 8, device: str = "cpu",
                     max_tokens: int = DEFAULT_MAX_TOKENS) -> CheckReport:
    """:func:`check_answers` for the HF checkpoint ``model_dir`` on up to ``calls`` calls of the MEI log ``pairs``."""
    from verl_ext.mei.server import load_checkpoint

    served = load_checkpoint(model_dir, "check", device=device, max_new_tokens=max_tokens)
    picked = pick_calls(MEILog.read(pairs).records, calls)
    return asyncio.run(check_answers(served, picked, BlobStore(blobs_dir_of(pairs)), max_tokens=max_tokens))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The check's options, the same in this CLI and the warm start's."""
    p.add_argument("--check-calls", type=nonnegative_int, default=8, metavar="N",
                   help="logged calls to answer greedily; 0: no check (default: 8)")
    p.add_argument("--check-max-new-tokens", type=positive_int, metavar="N", default=DEFAULT_MAX_TOKENS,
                   help=f"token limit of each answer (default: {DEFAULT_MAX_TOKENS}, what the tool server asks)")
    p.add_argument("--min-valid-share", type=share, default=0.5,
                   help="below this share of usable answers: a warning, an error with --strict-check (default: 0.5)")
    p.add_argument("--strict-check", action="store_true", help="exit 1 when the share is below --min-valid-share")


def verdict(report: CheckReport, *, min_share: float, strict: bool, label: str) -> int:
    """Print the report's line; below ``min_share`` a loud warning on stderr. Returns the exit code (1 if strict)."""
    print(f"{label}: {report.line()}", flush=True)
    if not report.answers:
        print(f"WARNING: {label}: no logged call with messages to check", file=sys.stderr, flush=True)
        return 1 if strict else 0
    if report.share >= min_share:
        return 0
    print(f"WARNING: {label}: only {report.usable}/{len(report.answers)} answers pass the tool server's checks "
          f"(< {min_share:.0%}); served as the MEI, nearly every call would fall back to the extractive interface "
          "and co-evolution would retain nothing. Train longer or at a higher lr (docs/training.md, GPU smoke).",
          file=sys.stderr, flush=True)
    first = next(a for a in report.answers if a.verdict == "invalid")
    print(f"WARNING: {label}: first invalid answer ({first.method}, {first.completion_tokens} tokens, "
          f"{first.finish_reason}): {first.text[:200]!r}", file=sys.stderr, flush=True)
    return 1 if strict else 0


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m verl_ext.mei.check", description="Answer a few logged MEI calls greedily with "
                      "an MEI checkpoint, through the MEI server's generation and the tool server's answer checks, "
                      "and report the share of usable answers.")
    p.add_argument("--model", required=True, type=Path, metavar="DIR", help="HF checkpoint directory of the MEI")
    p.add_argument("--pairs", required=True, type=Path, metavar="FILE",
                   help="an MEI log with messages (mei_sft.jsonl, mei.jsonl)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if not (args.model / "config.json").is_file():
        p.error(f"--model {args.model}: not an HF model directory (no config.json)")
    if not args.pairs.is_file():
        p.error(f"--pairs {args.pairs}: no such file")
    if args.check_calls < 1:
        p.error(f"--check-calls must be >= 1, got {args.check_calls}")
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    report = check_checkpoint(args.model, args.pairs, calls=args.check_calls, device=device,
                              max_tokens=args.check_max_new_tokens)
    for a in report.answers:
        print(json.dumps(asdict(a), ensure_ascii=False))
    return verdict(report, min_share=args.min_valid_share, strict=args.strict_check, label=str(args.model))


if __name__ == "__main__":
    raise SystemExit(main())
