"""MEI training pairs from logged extractive calls (``data_gen.common.mei_pairs``): the messages are exactly those a
model-backed MEI is sent for the call's real inputs, the target is the logged evidence, and every call that cannot
be a faithful pair (inputs that do not rebuild to the logged summary, an output that fails the client's checks or
schema, a call missing from the log, an error, an unknown query image, a malformed record) is skipped and counted,
never written."""

import io
import json

import pytest
from PIL import Image

from data_gen.common.mei_pairs import MAX_PAGE_CHARS, Episode, export_mei_pairs
from tool_server.mei import MEIConfig, build_interface, prompts
from tool_server.mei.log import BlobStore, MEILog, blobs_dir_of, load_images
from tool_server.mei.schema import ImageView, MEIContext
from tool_server.offline.pixels import encode_png
from tool_server.tools.base import world_image_view
from tool_server.tools.ops import world_page_view


class _Ctx:  # the view builders read only ``ctx.world``
    def __init__(self, world):
        self.world = world


def _page_with_images(world):
    return next(p for p in world.world.pages.values() if world.page_images(p) and len(p.text) > 200)


@pytest.fixture
async def logged(world, tmp_path):
    """A tool server's MEI log (real extractive interface, no OCR) with one WebVisit and one reverse search call of
    a question image, plus hand-tampered copies of them."""
    ctx = _Ctx(world)
    page = _page_with_images(world)
    view, _ = world_page_view(ctx, page)
    question = world.page_images(page)[0]
    registered = Image.open(io.BytesIO(world.image_bytes(question.id))).convert("RGB")  # as a session registers it
    query = ImageView(url="img_1", png=encode_png(registered))
    others = [im for im in world.world.images.values() if im.id != question.id][:2]
    candidates = [world_image_view(ctx, question.id, pixels=True, match_score=0.9),
                  world_image_view(ctx, others[0].id, pixels=True, match_score=0.1)]
    mei = build_interface(MEIConfig(log_path=tmp_path / "tool" / "mei.jsonl", ocr=False))
    visit = await mei.web_visit(goal="what is shown", page=view,
                                ctx=MEIContext(session_id="s1", turn=1, tool="WebVisit"))
    rev = await mei.reverse_image_search(goal="which page", query_image=query, candidates=candidates,
                                         ctx=MEIContext(session_id="s1", turn=0, tool="ReverseImageSearch"))
    await mei.close()
    path = tmp_path / "tool" / "mei.jsonl"
    records = {r.call_id: r for r in MEILog.read(path).records}
    v, r = records[visit.call_id], records[rev.call_id]
    bad_image = {"alt": "", "url": "https://neos-world.invalid/media/elsewhere.png", "caption": ""}
    tampered = {  # each with its own goal: calls with equal inputs are one call
        "check": v.model_copy(update={"call_id": "check", "input": {**v.input, "goal": "check"},
                                      "output": {**v.output, "relevant_images": [bad_image]}}),
        "input": v.model_copy(update={"call_id": "input", "input": {**v.input, "page": {**v.input["page"],
                                                                                         "text_chars": 1}}}),
        "schema": v.model_copy(update={"call_id": "schema", "input": {**v.input, "goal": "schema"},
                                       "output": {"evidence": "no other keys"}}),
        "error": v.model_copy(update={"call_id": "error", "input": {**v.input, "goal": "error"}, "outcome": "error",
                                      "output": {"error": "boom"}}),
        "query": r.model_copy(update={"call_id": "query", "input": {**r.input, "goal": "another goal"}}),
        "tool": v.model_copy(update={"call_id": "tool", "input": {**v.input, "goal": "tool"}, "tool": "Telnet"}),
        "shape": v.model_copy(update={"call_id": "shape", "input": {"goal": "shape", "page": None}}),
    }
    with path.open("a") as fh:
        for record in tampered.values():
            fh.write(json.dumps(record.model_dump(mode="json")) + "\n")
    return {"path": path, "visit": v, "rev": r, "view": view, "query": query, "candidates": candidates,
            "question_id": question.id, "other_id": others[1].id}


def _episode(call_ids, question_ids):
    turns = [{"calls": [{"ok": True, "mei_call_ids": ids}]} for ids in call_ids]
    return Episode({"turns": turns + [{"calls": []}]}, question_ids)


def test_pairs_are_the_model_messages_and_logged_evidence_and_unfaithful_calls_are_skipped(world, logged, tmp_path):
    v, r = logged["visit"], logged["rev"]
    episodes = [
        _episode([[r.call_id], [v.call_id], [v.call_id], ["check", "input"], ["schema", "missing", "error"],
                  ["tool", "shape"]],
                 [logged["question_id"]]),
        _episode([["query"]], [logged["other_id"]]),  # its query image is not among this episode's question images
    ]
    out = tmp_path / "pairs" / "mei_sft.jsonl"
    counts = export_mei_pairs(episodes, logged["path"], lambda: world, out)
    assert counts == {"written": 2, "skipped_check_failed": 1, "skipped_error_call": 1, "skipped_input_mismatch": 1,
                      "skipped_not_in_tool_log": 1, "skipped_query_image_not_found": 1, "skipped_schema": 1,
                      "skipped_malformed_input": 2, "relabelled_visual_match": 0}
    read = MEILog.read(out)
    assert read.skipped_lines == []
    rev_pair, visit_pair = read.records
    blobs = BlobStore(blobs_dir_of(out))
    assert load_images(rev_pair.messages, blobs) == prompts.reverse_image_messages(
        "which page", logged["query"], logged["candidates"])
    assert load_images(visit_pair.messages, blobs) == prompts.web_visit_messages(
        "what is shown", logged["view"], max_page_chars=MAX_PAGE_CHARS)
    for pair, source in ((rev_pair, r), (visit_pair, v)):
        assert pair.output == source.output and pair.input == source.input
        assert (pair.session_id, pair.turn, pair.tool, pair.method) == (source.session_id, source.turn, source.tool,
                                                                         source.method)
        assert pair.outcome == "extractive" and pair.mei_version == "extractive-1"
    # images are blobs beside the file, not inline: query + 2 candidates
    parts = [p for p in rev_pair.messages[1]["content"] if p["type"] == "image_url"]
    assert len(parts) == 3 and all(p["image_url"]["url"].startswith("blob:sha256:") for p in parts)


def test_export_replaces_the_previous_file_and_a_missing_log_writes_nothing(world, logged, tmp_path):
    out = tmp_path / "mei_sft.jsonl"
    episode = _episode([[logged["visit"].call_id]], [])
    assert export_mei_pairs([episode], logged["path"], lambda: world, out) == {"written": 1}
    assert export_mei_pairs([episode], logged["path"], lambda: world, out) == {"written": 1}
    assert len(MEILog.read(out).records) == 1

    def no_world():
        raise AssertionError("the world is loaded only to rebuild a logged call")

    assert export_mei_pairs([episode], tmp_path / "absent.jsonl", no_world, out) == {"written": 0,
                                                                                     "skipped_not_in_tool_log": 1}
    assert MEILog.read(out).records == []


async def test_only_the_true_near_duplicate_keeps_visual_match(world, tmp_path):
    """The backend scores a look-alike (another flag) as high as the query's own image; the pair's target keeps
    visual_match for the same pixels only, the look-alike becomes partial_match, and the relabel is counted."""
    ctx = _Ctx(world)
    page = _page_with_images(world)
    question = world.page_images(page)[0]
    registered = Image.open(io.BytesIO(world.image_bytes(question.id))).convert("RGB")
    query = ImageView(url="img_1", png=encode_png(registered))
    other = next(im for im in world.world.images.values() if im.id != question.id)
    candidates = [world_image_view(ctx, other.id, pixels=True, match_score=0.95),
                  world_image_view(ctx, question.id, pixels=True, match_score=0.9)]
    mei = build_interface(MEIConfig(log_path=tmp_path / "tool" / "mei.jsonl", ocr=False))
    rev = await mei.reverse_image_search(goal="which page", query_image=query, candidates=candidates,
                                         ctx=MEIContext(session_id="s1", turn=0, tool="ReverseImageSearch"))
    await mei.close()
    assert [c.match_state for c in rev.evidence.candidates] == ["visual_match", "visual_match"]
    out = tmp_path / "pairs" / "mei_sft.jsonl"
    counts = export_mei_pairs([_episode([[rev.call_id]], [question.id])], tmp_path / "tool" / "mei.jsonl",
                              lambda: world, out)
    assert counts == {"written": 1, "relabelled_visual_match": 1}
    (pair,) = MEILog.read(out).records
    assert [c["match_state"] for c in pair.output["candidates"]] == ["partial_match", "visual_match"]


async def test_the_same_map_with_its_label_is_a_visual_match_and_a_neighbours_map_is_not(world, tmp_path):
    """A question's unlabelled locator map (Burkina Faso's) and the same map with the country's name printed on it
    differ in 1.5% of their pixels, the label: the same picture, so both keep visual_match (before, only identical
    pixels did, and the labelled map, the one on the country's page, became partial_match). The neighbour's map
    (the Central African Republic highlighted instead) differs in 11% and becomes partial_match."""
    ctx = _Ctx(world)
    registered = Image.open(io.BytesIO(world.image_bytes("map_bfa_unlabelled"))).convert("RGB")
    query = ImageView(url="img_1", png=encode_png(registered))
    candidates = [world_image_view(ctx, i, pixels=True, match_score=s)
                  for i, s in (("map_bfa_unlabelled", 1.0), ("map_bfa", 0.94), ("map_caf", 0.9))]
    # Samoa's unlabelled map and American Samoa's map differ in 2.5% of their pixels (a small island's highlight):
    # another entity's picture stays a partial match however few pixels differ
    samoa = ImageView(url="img_1", png=encode_png(Image.open(io.BytesIO(world.image_bytes("map_wsm_unlabelled")))
                                                  .convert("RGB")))
    islands = [world_image_view(ctx, i, pixels=True, match_score=s) for i, s in (("map_wsm", 0.97),
                                                                                 ("map_asm", 0.95))]
    mei = build_interface(MEIConfig(log_path=tmp_path / "tool" / "mei.jsonl", ocr=False))
    rev = await mei.reverse_image_search(goal="which page", query_image=query, candidates=candidates,
                                         ctx=MEIContext(session_id="s1", turn=0, tool="ReverseImageSearch"))
    await mei.close()
    mei2 = build_interface(MEIConfig(log_path=tmp_path / "tool" / "mei.jsonl", ocr=False))
    rev2 = await mei2.reverse_image_search(goal="which island", query_image=samoa, candidates=islands,
                                           ctx=MEIContext(session_id="s2", turn=0, tool="ReverseImageSearch"))
    await mei2.close()
    assert [c.match_state for c in rev.evidence.candidates] == ["visual_match"] * 3
    assert [c.match_state for c in rev2.evidence.candidates] == ["visual_match"] * 2
    out = tmp_path / "pairs" / "mei_sft.jsonl"
    episodes = [_episode([[rev.call_id]], ["map_bfa_unlabelled"]), _episode([[rev2.call_id]], ["map_wsm_unlabelled"])]
    counts = export_mei_pairs(episodes, tmp_path / "tool" / "mei.jsonl", lambda: world, out)
    assert counts == {"written": 2, "relabelled_visual_match": 2}
    pairs = {r.input["goal"]: r for r in MEILog.read(out).records}
    assert [c["match_state"] for c in pairs["which page"].output["candidates"]] == \
        ["visual_match", "visual_match", "partial_match"]
    assert [c["match_state"] for c in pairs["which island"].output["candidates"]] == ["visual_match", "partial_match"]
