"""``python -m data_gen neos --world DIR --out DIR [--limit N] [--seed S] [--ocr] [--llm-url URL --llm-model M]
[--vlm-url URL --vlm-model M] [--teacher-url URL --teacher-model M]``: the whole Neos pipeline, resumable
(``OUT/results.jsonl`` is the append-only log), then the export (policy data, MEI pairs in ``OUT/mei_sft.jsonl``) and
a statistics report.

With ``--llm-url`` a model also answers probe 1 closed-book and rewords the template questions; with ``--vlm-url``
(default: the LLM's) a VLM is the blind observer and also answers probe 3 from the entry images; with
``--teacher-url`` a model runs the expert episodes (``data_gen.common.teacher``), the programmatic expert taking
over where its episode cannot be kept. Without them every step is offline and uses no model."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import aiohttp

from data_gen.common.cli import counts_work, input_error, progress, report_output, world_or_exit
from data_gen.common.closed_book import RECOGNISED_SOURCES
from data_gen.common.episode import Expert
from data_gen.common.llm import SyncChat
from data_gen.common.report import bar_charts
from data_gen.common.stats import SHARE_FILTERS, Shares, answer_type_cap, diversity, filter_rates, stage_rates
from data_gen.common.teacher import TeacherExpert, TeacherSettings
from data_gen.kg.commons import COMMONS_FILE_PATH, download
from data_gen.kg.wikidata import WikidataFormatError
from data_gen.neos.agents import (
    ProgrammaticExpert,
    probe_entry_image_vqa,
    probe_short_multimodal_search,
    probe_text_only_answer,
    probe_text_only_search,
    teacher_brief,
)
from data_gen.neos.export import check_exportable, export, mei_pairs, of_kinds
from data_gen.neos.flags import ANSWER_TYPE_SHARE
from data_gen.neos.kg_world import KGWorldError, entity_subset, image_files, read_graph, write_world
from data_gen.neos.llm import LLMRewriter, LLMTextOnlyProbe, ProbeUnavailable, VLMEntryImageProbe, VLMObserver
from data_gen.neos.observer import PaletteObserver, rapid_ocr
from data_gen.neos.open_world import undecided
from data_gen.neos.store import ResultLog
from data_gen.neos.strict_colours import strict_ablation
from data_gen.neos.synth import (
    CONVERGENT_VARIANTS,
    KG_RELATION_VARIANTS,
    SEED_FREE_VARIANTS,
    Candidate,
    SynthConfig,
    Synthesizer,
)
from neos_core.neos_tasks import Outcome, Task
from neos_core.world.store import World
from tool_server.launch import served
from verl_ext.reward.judge import JudgeConfig
from verl_ext.tools.client import ToolServerClient, ToolServerUnavailable

# The filters in pipeline order; a candidate reaching one has passed all before it.
FILTERS = ("open_world", "grounding", "source_colours", "entry_image_ablation", "checkpoint_ablation", "closed_book",
           "coverage",
           *SHARE_FILTERS, "text_only_answer", "text_only_search", "entry_image_vqa",
           "short_multimodal_search", "expert")
OUTPUT_FILES = ["train.parquet", "rl.parquet", "benchmark.parquet", "sft.parquet", "sft.jsonl", "rl_expert.parquet",
                "references.jsonl", "mei_sft.jsonl", "stats.json", "plots/", "results.jsonl"]
STAGES = ("synthesis", "text_only_search", "short_multimodal_search", "expert")


def model_configs(args: argparse.Namespace) -> tuple[JudgeConfig | None, JudgeConfig | None]:
    """(LLM, VLM) endpoints from the flags; the VLM defaults to the LLM. Rewrites need more tokens than verdicts."""
    llm = JudgeConfig(url=args.llm_url, model=args.llm_model, max_tokens=1024) if args.llm_url else None
    vlm_url = args.vlm_url or args.llm_url
    vlm = JudgeConfig(url=vlm_url, model=args.vlm_model or args.llm_model) if vlm_url else None
    return llm, vlm


async def _judge(client: ToolServerClient, expert: Expert, cand: Candidate, image_texts: list[str],
                 seconds: dict[str, float], llm_probe: LLMTextOnlyProbe | None,
                 vqa_probe: VLMEntryImageProbe | None) -> Outcome:
    """Steps 7-8 for a synthesized task: the four probes in order, then the expert; the first that decides ends it.
    Probes 1 and 3 are the programmatic checks, then (when configured) the model's answer."""
    task = cand.task
    assert task is not None
    probes: dict[str, bool] = {}

    def rejected(name: str, detail: str = "") -> Outcome:
        return Outcome(key=cand.key, status="rejected", filter=name, detail=detail, task=task, probes=probes,
                       seconds=seconds)

    probes["text_only_answer"] = probe_text_only_answer(task)
    if probes["text_only_answer"]:
        return rejected("text_only_answer", "the question names the answer")
    if llm_probe is not None:
        probes["text_only_answer"] = await llm_probe.solves(task)
        if probes["text_only_answer"]:
            return rejected("text_only_answer", f"{llm_probe.name} ({llm_probe.config.model}) answered it")
    t = time.perf_counter()
    searched = await probe_text_only_search(client, task)
    probes["text_only_search"], probes["text_only_search_saw_answer"] = searched.solved, searched.saw_answer
    seconds["text_only_search"] = time.perf_counter() - t
    if probes["text_only_search"]:
        return rejected("text_only_search")
    probes["entry_image_vqa"] = probe_entry_image_vqa(task, image_texts)
    if probes["entry_image_vqa"]:
        return rejected("entry_image_vqa")
    if vqa_probe is not None:
        probes["entry_image_vqa"] = await vqa_probe.solves(task)
        if probes["entry_image_vqa"]:
            return rejected("entry_image_vqa", f"{vqa_probe.name} ({vqa_probe.config.model}) answered it")
    t = time.perf_counter()
    probes["short_multimodal_search"] = await probe_short_multimodal_search(client, task)
    seconds["short_multimodal_search"] = time.perf_counter() - t
    if probes["short_multimodal_search"]:
        return rejected("short_multimodal_search")
    t = time.perf_counter()
    solved, record, why = await expert.solve(task)
    seconds["expert"] = time.perf_counter() - t
    return Outcome(key=cand.key, status="verified" if solved else "rejected", filter=None if solved else "expert",
                   detail=why, task=task, trajectory=record.model_dump(mode="json"), probes=probes, seconds=seconds)


async def run(world: World | Path, out: Path, url: str, *, seed: int, limit: int | None, ocr: bool,
              llm: JudgeConfig | None = None, rewrite: JudgeConfig | None = None,
              vlm: JudgeConfig | None = None, teacher: TeacherSettings | None = None,
              config: SynthConfig = SynthConfig(), type_share: float = ANSWER_TYPE_SHARE) -> dict:
    """The pipeline on ``world`` (loaded, or its directory); ``llm``: probe 1's model, ``rewrite``: the rewriter's,
    ``vlm``: the observer's and probe 3's (the CLI passes its LLM as both ``llm`` and ``rewrite``), ``teacher``: the
    expert's; ``type_share``: the answer-type cap's share of ``limit``. Returns what the synthesis model steps and
    the teacher did."""
    with ExitStack() as models:
        world = world if isinstance(world, World) else World.load(world)
        observer = PaletteObserver(rapid_ocr() if ocr else None)
        vlm_observer = VLMObserver(models.enter_context(SyncChat(vlm)), observer) if vlm else None
        rewriter = LLMRewriter(models.enter_context(SyncChat(rewrite))) if rewrite else None
        synth = Synthesizer(world, seed=seed, config=config, observer=vlm_observer or observer, rewriter=rewriter)
        taught = await _pipeline(world, synth, observer, out, url, limit=limit, llm=llm, vlm=vlm, teacher=teacher,
                                 type_share=type_share)
        steps = {step.name: step.usage.report() for step in (vlm_observer, rewriter) if step is not None}
        return {**steps, "teacher": taught} if taught else steps


async def _pipeline(world: World, synth: Synthesizer, observer: PaletteObserver, out: Path, url: str, *,
                    limit: int | None, llm: JudgeConfig | None, vlm: JudgeConfig | None,
                    teacher: TeacherSettings | None, type_share: float) -> dict | None:
    """Steps 7-8 over the seeds, into the log; returns the teacher's report (None without a teacher)."""
    log = ResultLog(out / "results.jsonl")
    done = log.outcomes()
    verified = sum(1 for o in done if o.status == "verified")
    shares = Shares.of_run(limit, type_share)
    for o in done:
        if o.status == "verified" and o.task:
            shares.count(o.task.answer_entity, answer_type(o.task))
    seeds = synth.seeds()
    configs = (llm, vlm, teacher.chat if teacher else None)
    timeout = aiohttp.ClientTimeout(total=max((c.timeout_s for c in configs if c), default=None))
    async with ToolServerClient(url) as client, aiohttp.ClientSession(timeout=timeout) as http:
        expert: Expert = ProgrammaticExpert(client)
        if teacher is not None:
            expert = teacher.expert(client, http, "neos", expert, lambda task: teacher_brief(world, task),
                                    check_exportable)
        llm_probe = LLMTextOnlyProbe(llm, http) if llm else None
        vqa_probe = VLMEntryImageProbe(vlm, http, world.image_path) if vlm else None
        bar = progress(limit, verified, len(seeds), "neos", "seed")
        for seed_entity in kinds_with_room_first(seeds, lambda s: _kind(world, s), shares):
            if limit is not None and verified >= limit:
                break
            if f"seed:{seed_entity}" in log.done:
                continue
            over = seed_over_share(world, seed_entity, shares)
            if over is not None:  # every structure ends at its seed: each would be rejected by ``over``
                log.append(Outcome(key=f"seed:{seed_entity}", status="seed_done", counts={f"skipped:{over}": 1}))
                bar.update(1 if counts_work(limit) else 0)
                continue
            t = time.perf_counter()
            result = synth.synthesize(seed_entity)
            share = (time.perf_counter() - t) / max(1, len(result.candidates))
            errors = 0
            for cand in result.candidates:
                if cand.key in log.done:
                    continue
                seconds = {"synthesis": share}
                if cand.task is None:
                    log.append(Outcome(key=cand.key, status="rejected", filter=cand.filter, detail=cand.detail,
                                       seconds=seconds))
                    continue
                over = share_rule(cand.task, shares)
                if over is not None:
                    log.append(Outcome(key=cand.key, status="rejected", filter=over[0], detail=over[1],
                                       seconds=seconds))
                    continue
                texts = [t for e in cand.task.entry_images for t in _image_texts(world, e.image_id, observer)]
                try:
                    outcome = await _judge(client, expert, cand, texts, seconds, llm_probe, vqa_probe)
                except (ToolServerUnavailable, ProbeUnavailable) as err:
                    errors += 1
                    outcome = Outcome(key=cand.key, status="error", detail=str(err), task=cand.task, seconds=seconds)
                log.append(outcome)
                if outcome.status == "verified":
                    verified += 1
                    shares.count(cand.task.answer_entity, answer_type(cand.task))
                    bar.update(0 if counts_work(limit) else 1)
                if limit is not None and verified >= limit:
                    break
            else:
                if not errors:
                    log.append(Outcome(key=f"seed:{seed_entity}", status="seed_done", counts=result.counts,
                                       seconds={"synthesis": share if not result.candidates else 0.0}))
            bar.update(1 if counts_work(limit) else 0)
            bar.set_postfix(verified=verified)
        bar.close()
    log.close()
    return expert.report() if isinstance(expert, TeacherExpert) else None


def kinds_with_room_first(seeds: Sequence[str], kind_of: Callable[[str], str], shares: Shares) -> Iterator[str]:
    """``seeds``, the next one always of a kind with the fewest verified tasks so far (``shares``, read as the run
    goes), ties in ``seeds``' order (the synthesizer's: kinds take turns). A task answers its seed, so the run's last
    tasks go to a kind it has not answered yet rather than to one more time zone: under the type cap, 60 tasks then
    reach every kind that verifies one (issue 36), and the kinds that verify none cost one pass over their seeds."""
    queues: dict[str, deque[tuple[int, str]]] = {}
    for i, seed in enumerate(seeds):
        queues.setdefault(kind_of(seed), deque()).append((i, seed))
    while queues:
        kind = min(queues, key=lambda k: (shares.per_type[k], queues[k][0][0]))
        yield queues[kind].popleft()[1]
        if not queues[kind]:
            del queues[kind]


def _kind(world: World, seed: str) -> str:
    entity = world.entities.get(seed)
    return entity.kind if entity else seed.split(":", 1)[0]


def share_rule(task: Task, shares: Shares) -> tuple[str, str] | None:
    """``(filter, detail)`` when verifying ``task`` would put its answer or its answer type over its share of the
    run (``Shares.over``), else None."""
    return shares.over(task.answer_entity, answer_type(task), task.answer)


def seed_over_share(world: World, seed: str, shares: Shares) -> str | None:
    """The share filter every task of ``seed`` would fail (a task answers its seed), or None: such a seed is not
    synthesized, and ``seed_level`` counts it as ``skipped:<filter>``."""
    over = shares.over(seed, _kind(world, seed))
    return over[0] if over else None


def _image_texts(world: World, image_id: str, observer: PaletteObserver) -> list[str]:
    """What an image reader could take from an entry image by itself: its caption, alt text and OCR words."""
    image = world.images[image_id]
    return [image.caption, image.alt, " ".join(observer.read_text(world.image_path(image_id)))]


def statistics(outcomes: Sequence[Outcome]) -> dict:
    """Rejections per filter (rate = rejected / entering that filter), stage throughput, identifiability counts."""
    cands = [o for o in outcomes if o.status != "seed_done"]
    errors = sum(1 for o in cands if o.status == "error")
    judged = [o for o in cands if o.status != "error"]
    filters = filter_rates(judged, FILTERS)
    seeds = [o for o in outcomes if o.status == "seed_done"]
    seed_counts: Counter[str] = Counter()
    for o in seeds:
        seed_counts.update(o.counts)
    stages = stage_rates(outcomes, cands, STAGES)
    tasks = [o.task for o in judged if o.status == "verified" and o.task]
    searched = [o for o in judged if "text_only_search" in o.probes]
    return {"seeds_done": len(seeds), "candidates": len(judged), "infrastructure_errors_excluded": errors,
            "verified": len(tasks), "filters": filters, "stages": stages,
            # how close probe 2 came: of the candidates it searched, how many had the answer among its hits
            "text_only_search_saw_answer": {"searched": len(searched), "saw_answer": sum(
                o.probes.get("text_only_search_saw_answer", False) for o in searched)},
            "seed_level": dict(sorted(seed_counts.items())),
            "hops": dict(sorted(Counter(len(t.steps) for t in tasks).items())),
            "modality_path_types": dict(Counter(_path_type(t) for t in tasks).most_common()),
            "labels": dict(Counter(_label(t) for t in tasks).most_common()),
            "answer_types": dict(Counter(answer_type(t) for t in tasks).most_common()),
            "open_world_undecided": open_world_undecided(tasks),
            "diversity": diversity([t.answer_entity for t in tasks], [answer_type(t) for t in tasks],
                                   [s.relation_label for t in tasks for s in t.steps], [skeleton(t) for t in tasks])}


def short_of_limit(stats: dict, limit: int | None) -> str | None:
    """Why a run under ``--limit`` verified fewer tasks: the seeds ran out with these answer types at their cap
    (``answer_type_cap``) and the others short of it; None when it reached its limit (or had none)."""
    if limit is None or stats["verified"] >= limit:
        return None
    cap, types = stats["answer_type_cap"], stats["answer_types"]
    full = sorted(t for t, n in types.items() if n >= cap)
    return (f"{stats['verified']} of --limit {limit} tasks verified: every seed was tried; answer types at their "
            f"cap of {cap}: {', '.join(full) or 'none'}; below it: "
            f"{', '.join(f'{t} {n}' for t, n in types.items() if n < cap) or 'none'}")


def contested_report(world: World) -> dict:
    """The facts a second source contradicts, which no question states (``data_gen.world.corroborate``), per
    relation and source; ``checked`` is False for a world built before the check (or a loaded KG): its facts were
    not checked, and a warning says so."""
    facts = world.manifest.get("contested_facts")
    if facts is None:
        print("warning: the world records no second-source check (built before it, or a loaded KG): its facts "
              "were not checked against a second source", file=sys.stderr)
        return {"checked": False, "left_out": 0}
    return {"checked": True, "left_out": len(facts),
            "by_relation": dict(Counter(f["p"] for f in facts).most_common()),
            "by_source": dict(Counter(f["source"] for f in facts).most_common())}


def closed_book_reach(world: World) -> int:
    """Images the closed-book probe recognises (national flags and locator maps of the offline world's sources); 0
    (a loaded KG's Commons images) means it rejects nothing, which a warning says."""
    n = sum(im.source in RECOGNISED_SOURCES for im in world.images.values())
    if not n:
        print("warning: the closed-book probe recognises none of this world's images (sources "
              f"{', '.join(sorted(RECOGNISED_SOURCES))}): it rejects no task, so tasks a strong model answers without "
              "a tool may pass", file=sys.stderr)
    return n


def open_world_undecided(tasks: Sequence[Task]) -> dict:
    """Verified tasks through a relation the open-world rule does not classify (taken as closed), and per relation
    how many: a loaded KG's own relations land here until data_gen.neos.open_world decides them."""
    per_task = [undecided((s.relation, s.forward) for s in t.steps) for t in tasks]
    return {"tasks": sum(1 for rels in per_task if rels),
            "relations": dict(Counter(r for rels in per_task for r in rels).most_common())}


def answer_type(task: Task) -> str:
    """The answer entity's kind in the world; a log written before tasks recorded it: its id's namespace."""
    return task.answer_type or task.answer_entity.split(":", 1)[0]


def skeleton(task: Task) -> str:
    """The question's form without its entities: the structure kind, then each hop's relation, ``*`` after a
    visual checkpoint's, e.g. "path: shares border with* > currency"."""
    return f"{task.structure_type}: " + " > ".join(s.relation_label + ("*" if s.checkpoint else "")
                                                   for s in task.steps)


def _path_type(task: Task) -> str:
    """Entry image(s), then per step I (a visual checkpoint: new visual evidence) or T: e.g. "I-T-I-T"."""
    return "-".join(["I"] * len(task.entry_images) + ["I" if s.checkpoint else "T" for s in task.steps])


def _label(task: Task) -> str:
    """ModalSearcher's evidence labels applied to a Neos task: visual checkpoints need newly acquired images."""
    return "search_required" if any(s.checkpoint for s in task.steps) else "input_only"


def plot_data(stats: dict) -> dict[str, dict]:
    """The charts of ``plots/``. The filters' rejections (one per candidate) and the seed-level counts (one per
    relation variant's DAG: identifiability, no structure) have charts of their own: in one chart the 25,000
    identifiability rejections of a 60-task run left the evidence rules' few hundred bars unreadable."""
    return {"hops": stats["hops"], "modality_path_types": stats["modality_path_types"], "labels": stats["labels"],
            "rejections_per_filter": {k: v["rejected"] for k, v in stats["filters"].items()},
            "seed_level_rejections": stats["seed_level"], "answer_types": stats["answer_types"],
            "relations": stats["diversity"]["relations"], "skeletons": stats["diversity"]["skeletons"],
            "top_answers": stats["diversity"]["top_answers"]}


def plots(stats: dict, out: Path) -> list[str]:
    return bar_charts(plot_data(stats), out, "Neos")


def kg_world_or_exit(args: argparse.Namespace) -> dict | None:
    """``--kg``: the dump read and checked before anything is written, then its world written to OUT/kg_world;
    returns what ``stats.json`` reports of it (missing images, downloads by outcome), or None (after one line on
    stderr) when the dump, subset or images cannot make one."""
    fetched = None
    try:
        graph = read_graph(args.kg, entity_subset(args.kg_entities))
        if not graph.triples:
            raise KGWorldError(f"{args.kg}: no entity facts in the dump (or none in --kg-entities)")
        images = args.kg_images
        if images is None:  # the files the statements name, from Commons (or --kg-image-base) into OUT/kg_images
            images, base = args.out / "kg_images", args.kg_image_base or COMMONS_FILE_PATH
            fetched = asyncio.run(download(image_files(graph), images, base))
            print(f"kg images from {base} into {images}: {json.dumps(fetched)}", file=sys.stderr)
        manifest = write_world(graph, images, args.out / "kg_world", args.kg)
    except (OSError, WikidataFormatError, KGWorldError) as err:
        input_error("neos", f"--kg: {err}")
        return None
    if manifest["images_missing"]:
        print(f"warning: {images} lacks {manifest['images_missing']} of the files the dump's image statements "
              "name; those entities have no image", file=sys.stderr)
    _warn_unlabelled(manifest["unlabelled_properties"], args.kg)
    return {"images_missing": manifest["images_missing"], "image_downloads": fetched,
            "malformed_entities": graph.malformed, "self_loops_dropped": manifest["self_loops_dropped"],
            "unlabelled_properties": manifest["unlabelled_properties"]}


def _warn_unlabelled(pids: list[str], dump: Path) -> None:
    """Properties the world shows by id: their entities were not in the dump (or had no label in its languages)."""
    if pids:
        print(f"warning: {dump} has no label for {len(pids)} properties the world shows, shown as ids: "
              f"{', '.join(pids[:10])}{' ...' if len(pids) > 10 else ''}", file=sys.stderr)


def _misplaced_flag(args: argparse.Namespace) -> str | None:
    """A flag given where it does nothing, or two that contradict each other: a usage error, not a silently ignored
    flag."""
    if getattr(args, "tool_server_cache", None) and not getattr(args, "tool_server", None):
        return "--tool-server-cache only applies with --tool-server"
    if getattr(args, "kg_image_base", None) and (getattr(args, "kg", None) is None or args.kg_images is not None):
        return "--kg-image-base only applies with --kg and no --kg-images"
    if getattr(args, "answer_type_share", None) is not None and args.limit is None:
        return "--answer-type-share only applies with --limit (without it no answer type has a cap)"
    if getattr(args, "min_hops", 0) > getattr(args, "max_hops", math.inf):
        return f"--min-hops {args.min_hops} exceeds --max-hops {args.max_hops}: no structure has that many hops"
    return None


def synth_config(args: argparse.Namespace, kg: bool) -> SynthConfig:
    """The synthesis settings: a loaded KG's relation variants or the offline world's, ``--min-hops`` and
    ``--max-hops`` on the structures and ``--keep-closed-book`` (a Namespace built without them keeps the
    defaults)."""
    base = SynthConfig(seed_kinds=None, variants=KG_RELATION_VARIANTS) if kg else \
        SynthConfig(seed_free_variants=SEED_FREE_VARIANTS, convergent_variants=CONVERGENT_VARIANTS)
    hops = replace(base.structures, min_hops=getattr(args, "min_hops", base.structures.min_hops),
                   max_hops=getattr(args, "max_hops", base.structures.max_hops))
    return replace(base, structures=hops, closed_book=not getattr(args, "keep_closed_book", False))


async def _health(url: str) -> None:
    async with ToolServerClient(url) as client:
        await client.health()


def main(args: argparse.Namespace) -> int:
    external = getattr(args, "tool_server", None)
    misplaced = _misplaced_flag(args)
    if misplaced:
        return input_error("neos", misplaced)
    if external:  # a dead or wrong URL ends here, before anything is written
        try:
            asyncio.run(_health(external))
        except (ToolServerUnavailable, aiohttp.InvalidURL, ValueError) as err:
            return input_error("neos", f"--tool-server {external}: not a reachable tool server ({err})")
    kg_report = None
    if getattr(args, "kg", None) is not None:
        kg_report = kg_world_or_exit(args)
        if kg_report is None:
            return 2
        args.world = args.out / "kg_world"
    world = world_or_exit(args.world, "neos")  # before the output directory or a tool server exists
    if world is None:
        return 2
    kinds = getattr(args, "answer_kinds", None)
    unknown = sorted(set(kinds or ()) - {e.kind for e in world.entities.values()})
    if unknown:
        return input_error("neos", f"--answer-kinds: {', '.join(unknown)}: no entity of the world is of that kind "
                           f"(kinds: {', '.join(sorted({e.kind for e in world.entities.values()}))})")
    config = synth_config(args, kg=kg_report is not None)
    type_share = getattr(args, "answer_type_share", None)
    type_share = ANSWER_TYPE_SHARE if type_share is None else type_share
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    llm, vlm = model_configs(args)
    tool_dir = args.tool_server_cache if external else args.out / "tool_server_cache"
    with ExitStack() as server:
        url = external or server.enter_context(served(args.world, "--cache-dir", str(tool_dir)))
        models = asyncio.run(run(world, args.out, url, seed=args.seed, limit=args.limit, ocr=args.ocr,
                                 llm=llm, rewrite=llm, vlm=vlm, teacher=TeacherSettings.from_args(args),
                                 config=config, type_share=type_share))
    log = ResultLog(args.out / "results.jsonl")
    outcomes = log.outcomes()
    log.close()
    stats = statistics(outcomes)
    stats["hop_limits"] = {"min": config.structures.min_hops, "max": config.structures.max_hops}
    stats["closed_book_filter"] = config.closed_book  # False: --keep-closed-book, tasks for a from-scratch policy
    stats["answer_type_cap"] = answer_type_cap(args.limit, type_share)
    stats["contested_facts"] = contested_report(world)
    stats["closed_book_recognised_images"] = closed_book_reach(world)
    stats["strict_colour_ablation"] = strict_ablation(Synthesizer(world, seed=args.seed, config=config), [
        o.task for o in outcomes if o.status == "verified" and o.task])
    copies = getattr(args, "sft_answer_swaps", 0)
    if kinds:
        kept = of_kinds(outcomes, kinds)
        stats["answer_kinds"] = {"kinds": kinds, "dropped_tasks": len(outcomes) - len(kept)}
        outcomes = kept
    stats["splits"], swaps = export(outcomes, args.world, args.out, answer_swap_copies=copies, seed=args.seed)
    if swaps:
        stats["sft_answer_swaps"] = swaps
    if kg_report:
        stats["kg"] = kg_report
    stats["tool_server"] = external or "offline, started for the world"
    # an external server's MEI log is in its own --cache-dir: without --tool-server-cache there is none to read
    stats["mei_pairs"] = mei_pairs(outcomes, args.world, args.out, tool_dir) if tool_dir else {
        "written": 0, "skipped_no_tool_server_cache": 1}
    stats["plots"] = plots(stats, args.out / "plots")
    stats["model_steps_this_run"] = models
    stats["wall_seconds_this_run"] = round(time.perf_counter() - start, 1)
    (args.out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(json.dumps(stats, indent=2))
    if kinds and not sum(stats["splits"].values()):
        print(f"warning: --answer-kinds {','.join(kinds)}: no verified task answers one; nothing exported",
              file=sys.stderr)
    skipped = sum(swaps.values()) - swaps.get("written", 0)
    if skipped > 0.1 * sum(swaps.values()):
        print(f"warning: --sft-answer-swaps: {skipped} of {sum(swaps.values())} swapped copies not written "
              f"({swaps})", file=sys.stderr)
    short = short_of_limit(stats, args.limit)
    if short:
        print(f"warning: {short}", file=sys.stderr)
    unsure = stats["open_world_undecided"]
    if unsure["tasks"]:
        print(f"warning: {unsure['tasks']} of {stats['verified']} verified tasks go through relations the open-world "
              f"rule does not classify ({', '.join(unsure['relations'])}), taken as closed: their answers are unique "
              "in the KG, perhaps not to a reader; decide them in data_gen/neos/open_world.py", file=sys.stderr)
    report_output(args.out, stats["verified"], "tasks", OUTPUT_FILES)
    return 0
