"""The command line of ``python -m data_gen modalsearch``: its description and flags. Imports nothing of the
pipeline, so ``--help`` and a usage error answer at once; ``data_gen.modalsearch.cli`` runs what they ask for."""

from __future__ import annotations

import argparse

from data_gen.common.cli import add_common_flags, add_teacher_flags
from neos_core.usage import positive_int

DESCRIPTION = ("ModalSearch-Pipeline (ModalSearcher: Weaving Visual Evidence into Autonomous Cross-Modal Deep "
               "Search, Sec. 3): an interleaved text-image graph grown from seed articles, multi-hop paths sampled on "
               "it, a question written backwards along each path and solved by an expert with real tool calls. A "
               "benchmark graph and a disjoint training graph. Writes OUT/results.jsonl (resumable log), "
               "train/rl/benchmark/sft parquet, mei_sft.jsonl, stats.json and plots/.")


def parser(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_common_flags(p, "questions (a tenth of them, at least one, from the benchmark graph)")
    p.add_argument("--max-nodes", type=positive_int, default=1200, metavar="N",
                   help="node budget of the training graph (default: 1200)")
    p.add_argument("--benchmark-nodes", type=positive_int, default=300, metavar="N",
                   help="node budget of the benchmark graph (default: 300)")
    p.add_argument("--seeds", type=positive_int, default=40, metavar="N",
                   help="seed articles of the training graph; the benchmark graph gets a quarter (default: 40)")
    p.add_argument("--attempts", type=positive_int, default=8000, metavar="N",
                   help="path draws per graph at most (default: 8000)")
    p.add_argument("--text-only", action="store_true", help="also keep questions whose path holds no image (the "
                   "paper samples these separately, as an ablation, outside its RL and SFT mix; default: rejected "
                   "and counted as text_only)")
    p.add_argument("--ocr", action="store_true", help="let image linking also read the text in images (RapidOCR)")
    p.add_argument("--llm-url", default=None, metavar="URL",
                   help="OpenAI-compatible base URL for relation proposal and question wording (default: offline "
                   "KG/context templates and question templates, no model)")
    p.add_argument("--llm-model", default="relation-writer", metavar="NAME",
                   help="model name sent to --llm-url (default: relation-writer)")
    add_teacher_flags(p)
    return p
