"""Output budget of the credit judge: tokens of v2 assessments (Neos App. F Fig. 20) of 20-50-turn failures.

A judge's reply for a long failure grows with the turns it labels. This builds assessments as a judge following the
prompt writes them (evidence-specific rationales naming queries, pages, images and reference turns; 1-2 sentence
summary) for failures of 20, 30, 40 and 50 turns at three label densities, and counts their tokens with the real Qwen3
tokenizer the repository's tiny Qwen-VL uses (``verl_ext.models.tiny_vl``), compact and pretty-printed (indent 2, as
chat models often answer), both inside a ```json fence:

- ``typical``: Neos Fig. 9b's composition of credited failure turns (productive ~11%, causal ~4%, corrective ~5%,
  re-derailment ~2%): about one turn in five labelled;
- ``dense``: every other turn labelled;
- ``every``: every turn labelled (the judge ignores "label only significant events": the upper bound).

The default ``CREDIT_MAX_TOKENS`` must hold the largest with headroom (``--headroom``, default 1.5x). Run from the
repository root: ``PYTHONPATH=. .venv/bin/python bench/bench_judge_budget.py [--seeds 5]``.
"""

from __future__ import annotations

import argparse
import json
import random

from neos_core.usage import OneLineParser, positive_float, positive_int

TURN_COUNTS = (20, 30, 40, 50)
DENSITIES = {"typical": 0.22, "dense": 0.5, "every": 1.0}
_ENTITIES = [
    "Mount Vernon", "Cedar Falls", "Cornell College", "Mercy Medical Center", "Studer J37", "Abbey Road Studios",
    "Residence Inn Marina del Rey", "Calochortus pulchellus", "Calochortus amabilis", "Gebhard von Blücher",
    "Daniel Maclise", "Rostock tramway", "Deptford Dockyard", "The North American Review", "Burberry", "Lake Baikal",
    "Hamra Street", "Achrafieh", "Beirut River", "Orontes", "Sint-Janshospitaal", "Hallgrímskirkja", "Mostar bridge",
    "Palau de la Música", "Kinkaku-ji", "Teatro Colón", "Hôtel de Ville", "Rila Monastery", "Nyhavn", "Bled Castle",
]
_KINDS = ["town", "hospital", "painting", "species", "album", "recorder model", "hotel", "campaign", "artist", "bridge"]
_TOOLS = ["TextSearch", "WebVisit", "ImageSearch", "ReverseImageSearch", "FetchImage", "CropImage"]
_CATEGORIES = ["wrong_entity", "metadata_as_pixels", "ignored_contrary_evidence", "premature_answer",
               "repeated_failing_call", "unsupported_visual_claim", "query_drift", "wrong_region_crop"]


def _url(rng: random.Random) -> str:
    page = rng.choice(_ENTITIES).replace(" ", "_")
    site = rng.choice(["https://en.wikipedia.org/wiki/", "https://www.britannica.com/place/", "https://cnps.org/"])
    return site + page


def _rationale(rng: random.Random, kind: str, turn: int, turns: int) -> str:
    """One or two evidence-specific sentences, as the prompt asks; names differ per turn so nothing repeats."""
    a, b = rng.sample(_ENTITIES, 2)
    what, tool = rng.choice(_KINDS), rng.choice(_TOOLS)
    img, ref = f"img_{rng.randint(1, 12)}", rng.randint(1, max(2, turns // 2))
    year = rng.randint(1815, 2024)
    first = {
        "causal_error": f"{tool} call adopts '{a}' as the {what} from the title and snippet of {_url(rng)} without "
                        f"inspecting the pixels of {img}; the reference crops the lettering at turn {ref} and reads "
                        f"'{b}', so every later query follows the wrong {what}.",
        "re_derailment": f"After recovering, the agent drops the verified '{b}' lead and answers from a {year} page "
                         f"about '{a}' that never mentions the {what} in {img}, an independent new error.",
        "recovery": f"Rejects '{a}' after the crop of {img} shows '{b}' and re-issues the {tool} query for the {what} "
                    f"'{b}', restoring the route the reference takes at turn {ref}.",
        "productive": f"{tool} retrieves {_url(rng)}, which states that {a} is linked to {b} ({year}); this is the "
                      f"{what} evidence the reference uses at turn {ref}.",
    }[kind]
    second = rng.choice([
        "",
        f" The observation at t{min(turns - 1, turn + 1)} confirms it.",
        f" The candidate had {img} in context at this turn, so the visual check was available.",
        f" Reference turn {ref + 1} resolves the same constraint through a different page.",
    ])
    return first + second


def assessment(turns: int, density: float, seed: int = 0) -> dict:
    """A v2 assessment of a ``turns``-turn failure labelling about ``density`` of its turns (at least one causal
    error; recoveries and re-derailments alternate after it; the rest of the labelled turns productive)."""
    from verl_ext.credit import SCHEMA_VERSION, CreditAssessment  # here: --help answers without loading verl

    rng = random.Random(seed * 1000 + turns)
    labelled = sorted(rng.sample(range(turns), max(2, round(density * turns))))
    causal = labelled[min(len(labelled) - 1, max(1, len(labelled) // 5))]
    pairs = max(0, round(len(labelled) * 0.09))  # Fig. 9b: corrective ~5%, re-derailment ~2% of ~22% labelled
    later = [t for t in labelled if t > causal]
    switches = later[: 2 * pairs]
    events, productive = [], []
    for t in labelled:
        if t == causal or t in switches:
            kind = "causal_error" if t == causal else ("recovery" if switches.index(t) % 2 == 0 else "re_derailment")
            severity = 0.0 if kind == "recovery" else round(rng.uniform(0.5, 1), 2)
            events.append({
                "span_id": f"t{t}", "type": kind, "severity": severity, "confidence": round(rng.uniform(0.55, 0.95), 2),
                "error_category": "" if kind == "recovery" else rng.choice(_CATEGORIES),
                "rationale": _rationale(rng, kind, t, turns),
                "reference_support": sorted(rng.sample(range(1, 21), rng.randint(1, 3))),
            })
        else:
            productive.append({"span_id": f"t{t}", "confidence": round(rng.uniform(0.5, 0.95), 2),
                               "rationale": _rationale(rng, "productive", t, turns)})
    a, b = rng.sample(_ENTITIES, 2)
    out = {
        "schema_version": SCHEMA_VERSION,
        "candidate_overall_summary": f"The candidate found the right {rng.choice(_KINDS)} early but switched to '{a}' "
                                     f"at t{causal} on caption evidence and never verified it against the pixels; "
                                     f"its final answer about '{b}' follows from that branch.",
        "events": events,
        "productive_turns": productive,
        "confidence": round(rng.uniform(0.6, 0.9), 2),
    }
    CreditAssessment.model_validate(out)  # what a judge must produce: the schema our parser enforces
    return out


def fenced(reply: dict, indent: int | None) -> str:
    return f"```json\n{json.dumps(reply, ensure_ascii=False, indent=indent)}\n```"


def measure(tokenizer, seeds: int) -> dict[tuple[str, int], tuple[int, int]]:
    """(density, turns) -> (max compact tokens, max indented tokens) over ``seeds`` assessments."""
    out = {}
    for name, density in DENSITIES.items():
        for turns in TURN_COUNTS:
            sizes = [
                [len(tokenizer.encode(fenced(assessment(turns, density, s), indent))) for s in range(seeds)]
                for indent in (None, 2)
            ]
            out[(name, turns)] = (max(sizes[0]), max(sizes[1]))
    return out


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_judge_budget.py", description="Output budget of the credit judge: "
                      "tokens of assessments of 20-50-turn failures at three label densities (Neos: Learning to "
                      "Interleave Search and Visual Reasoning, App. F), counted with the real Qwen3 tokenizer, against "
                      "the default output budget.")
    p.add_argument("--seeds", type=positive_int, default=5, metavar="N",
                   help="assessments built per turn count and density; the largest counts (default: 5)")
    p.add_argument("--headroom", type=positive_float, default=1.5, metavar="X",
                   help="factor the default budget must leave above the largest assessment (default: 1.5)")
    return p


def main() -> None:
    args = parser().parse_args()
    from verl_ext.credit.judge import CREDIT_MAX_TOKENS
    from verl_ext.models.tiny_vl import _load_tokenizer

    tokenizer, source = _load_tokenizer(None)
    sizes = measure(tokenizer, args.seeds)
    print(f"tokenizer: Qwen3 ({source.version}); max over {args.seeds} assessments; compact / indent=2, fenced")
    print(f"{'labelled':>9} " + " ".join(f"{t:>6}-turn   " for t in TURN_COUNTS))
    for name in DENSITIES:
        print(f"{name:>9} " + " ".join(f"{sizes[(name, t)][0]:>5} / {sizes[(name, t)][1]:>5}" for t in TURN_COUNTS))
    worst = max(v[1] for v in sizes.values())
    print(f"largest {worst} tokens; x{args.headroom} = {worst * args.headroom:.0f}; "
          f"CREDIT_MAX_TOKENS = {CREDIT_MAX_TOKENS} ({CREDIT_MAX_TOKENS / worst:.2f}x the largest)")


if __name__ == "__main__":
    main()
