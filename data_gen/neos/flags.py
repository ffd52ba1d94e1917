"""The command line of ``python -m data_gen neos``: its description and flags. Imports nothing of the pipeline, so
``--help`` and a usage error answer at once; ``data_gen.neos.cli`` runs what they ask for."""

from __future__ import annotations

import argparse
from pathlib import Path

from data_gen.common.cli import add_common_flags, add_teacher_flags
from data_gen.kg.commons import COMMONS_FILE_PATH
from neos_core.usage import share, whole_number

# A structure's hops: edges from the entry anchors to the answer. Two is the fewest (a checkpoint sits between two
# edges); the defaults are data_gen.neos.synth.SynthConfig's, repeated here so that --help imports no pipeline.
MIN_HOPS, MAX_HOPS = 2, 5
# No answer type above 13% of a Neos run by default (issue 36: 60 tasks, at least 13 types): kinds take turns as
# seeds, but a kind whose every seed verifies (time zones, national dishes) would otherwise fill a third of the run
# while the rarer kinds wait for their turn (ModalSearch's own cap: data_gen.modalsearch.cli).
ANSWER_TYPE_SHARE = 0.13

DESCRIPTION = ("Neos task synthesis (Neos: Learning to Interleave Search and Visual Reasoning, Sec. 3): questions "
               "whose answer needs the entry image and visual checkpoints found while searching, checked by shortcut "
               "probes and solved by an expert with real tool calls. Writes OUT/results.jsonl (resumable log), "
               "train/rl/benchmark/sft parquet, mei_sft.jsonl, stats.json and plots/.")


def parser(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_common_flags(p, "tasks", kg=True)
    p.add_argument("--kg-images", type=Path, metavar="DIR", default=None,
                   help="with --kg: the Commons files its flag/logo/locator-map/image statements name (PNG, JPEG or "
                   "SVG, by file name); a named file missing here is counted in the world's manifest (default: none)")
    p.add_argument("--kg-image-base", default=None, metavar="URL",
                   help="with --kg and no --kg-images: the files are downloaded into OUT/kg_images from URL/<file "
                   f"name> (default: Wikimedia Commons' file redirect, {COMMONS_FILE_PATH}); failures are counted "
                   "by reason and the entities without their file have no image")
    p.add_argument("--tool-server", default=None, metavar="URL",
                   help="base URL of a running tool server (e.g. python -m tool_server --online) for the search "
                   "probes and the expert, instead of the offline server this command starts for the world")
    p.add_argument("--tool-server-cache", type=Path, default=None, metavar="DIR",
                   help="with --tool-server: that server's --cache-dir, whose MEI log (mei.jsonl) the MEI SFT pairs "
                   "are read from (default: no MEI pairs, counted in stats.json)")
    p.add_argument("--kg-entities", type=Path, metavar="FILE", default=None,
                   help="with --kg: the snapshot subset, one QID a line (default: every item of the dump)")
    p.add_argument("--ocr", action="store_true", help="let the blind observer also read image text (RapidOCR)")
    p.add_argument("--llm-url", default=None, metavar="URL",
                   help="OpenAI-compatible base URL: this model rewords each template question and probe 1 also asks "
                   "it to answer closed-book (default: templates and the programmatic probe alone, no model)")
    p.add_argument("--llm-model", default="probe", metavar="NAME", help="model name sent to --llm-url (default: probe)")
    p.add_argument("--vlm-url", default=None, metavar="URL",
                   help="OpenAI-compatible base URL of a VLM: the blind observer, and probe 3 also asks it to answer "
                   "from the entry images (default: --llm-url; with neither, the offline palette/OCR observer and "
                   "programmatic probe 3, no model)")
    p.add_argument("--vlm-model", default=None, metavar="NAME",
                   help="model name sent to --vlm-url (default: --llm-model)")
    p.add_argument("--min-hops", type=whole_number(MIN_HOPS), default=MIN_HOPS, metavar="N",
                   help="keep only structures of at least N hops, edges from the entry images to the answer over "
                   f"all branches (default: {MIN_HOPS}, the fewest: a visual checkpoint sits between two hops)")
    p.add_argument("--max-hops", type=whole_number(MIN_HOPS), default=MAX_HOPS, metavar="N",
                   help="keep only structures of at most N hops: the difficulty knob, 2 for the easiest tasks "
                   f"(default: {MAX_HOPS}; a resumed --out keeps the tasks it already holds)")
    p.add_argument("--keep-closed-book", action="store_true",
                   help="skip the closed-book filter: keep tasks a strong pretrained model could answer without a "
                   "tool, for a policy trained from scratch, which knows no flag or capital (about 85%% of the small "
                   "world's 2-hop candidates; a resumed --out keeps the rejections it holds; default: filtered, as "
                   "in the paper)")
    p.add_argument("--answer-type-share", type=share, default=None, metavar="F",
                   help="with --limit: verify at most F x N tasks of one answer type (entity kind; at least one), "
                   f"so that no kind fills the run (default: {ANSWER_TYPE_SHARE}); a world with too few reachable "
                   "kinds then ends short of N, with a warning naming the kinds at their cap")
    p.add_argument("--answer-kinds", type=lambda text: [k for k in text.split(",") if k], default=None,
                   metavar="KIND[,KIND...]",
                   help="export only the verified tasks whose answer is an entity of these kinds (e.g. city): one "
                   "kind is the learning curve's easiest mix, every answer the same fact of its page; synthesis and "
                   "results.jsonl are unchanged and the dropped tasks counted in stats.json (default: every kind)")
    p.add_argument("--sft-answer-swaps", type=whole_number(0), default=0, metavar="K",
                   help="also write K copies of each SFT episode with its answer replaced, in every observation and "
                   "the final turn, by another training answer of the same kind: a policy trained from scratch then "
                   "learns to read the asked fact off the page instead of recalling training answers (for the "
                   "learning-curve setting; counted in stats.json; default: 0, the expert's episodes only)")
    add_teacher_flags(p)
    return p
