"""The MEI checkpoint check (``python -m verl_ext.mei.check``, run at the end of the warm start): a logged pair's
messages reach the model through the MEI server's path as exactly the context SFT trained on, the SFT target served
back is read as a valid answer by the tool server's parser, and what the tool server would reject (an answer cut at
the token limit, an image URL the page lacks, an index out of range) is counted invalid, with a warning below the
threshold. The tiny VL model answers; scripted (``forced``) answers stand in for a trained one."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText

from tool_server.mei import MEIConfig
from tool_server.mei.client import logged_answer_check, read_answer
from tool_server.mei.log import BlobStore, MEILog, MEIRecord, blobs_dir_of, image_summary, page_summary
from tool_server.mei.prompts import reverse_image_messages, web_visit_messages
from tool_server.mei.schema import ImageView, MEIContext, PageView, ReverseImageEvidence, WebVisitEvidence
from verl_ext.mei import check, warm_start
from verl_ext.mei.server import Served
from verl_ext.mei.sft import target_text, tokenize_calls
from verl_ext.rollout.hf_generate import TransformersGenerateClient

ORIGIN = "https://neos-world.invalid"


def png(color: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (56, 56), color).save(buf, format="PNG")
    return buf.getvalue()


PAGE = PageView(url=f"{ORIGIN}/wiki/Lyon", title="Lyon", text="Lyon is a city in France on the Rhône.",
                images=[ImageView(url=f"{ORIGIN}/media/lyon.png", alt="Lyon", caption="Lyon at night")])
WEB_OUTPUT = {"rational": "The page is about Lyon.", "evidence": "Lyon is a city in France on the Rhône.",
              "summary": "Lyon is in France.",
              "relevant_images": [{"alt": "Lyon", "url": f"{ORIGIN}/media/lyon.png", "caption": "Lyon at night"}]}
QUERY = ImageView(url="img_1", png=png("red"))
CANDIDATES = [ImageView(url=f"{ORIGIN}/media/a.png", caption="A", png=png("red")),
              ImageView(url=f"{ORIGIN}/media/b.png", caption="B", png=png("blue"))]
REVERSE_OUTPUT = {"rational": "Same pixels as candidate 0.",
                  "candidates": [{"index": 0, "match_state": "visual_match", "caption": "A"},
                                 {"index": 1, "match_state": "not_match", "caption": "B"}]}


@pytest.fixture
def pairs(tmp_path):
    """An MEI log as data generation writes one: the messages the tool server's model MEI sends, the answer."""
    path = tmp_path / "mei_sft.jsonl"
    log = MEILog(path)
    log.append(ctx=MEIContext(session_id="s", turn=1, tool="WebVisit"), method="web_visit", mei_version="v0",
               outcome="extractive", latency_s=0.0, input={"goal": "where is Lyon", "page": page_summary(PAGE)},
               output=WEB_OUTPUT, messages=web_visit_messages("where is Lyon", PAGE, max_page_chars=60_000))
    log.append(ctx=MEIContext(session_id="s", turn=2, tool="ReverseImageSearch"), method="reverse_image_search",
               mei_version="v0", outcome="extractive", latency_s=0.0,
               input={"goal": "which page", "query_image": image_summary(QUERY),
                      "candidates": [image_summary(c) for c in CANDIDATES]},
               output=REVERSE_OUTPUT, messages=reverse_image_messages("which page", QUERY, CANDIDATES))
    log.close()
    return path


def served(model_dir, processor, answers: dict[str, str] | None = None) -> Served:
    """The tiny model as the MEI server serves it; ``answers`` scripts the reply by a word of the prompt."""
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)

    def forced(call) -> str | None:
        prompt = processor.tokenizer.decode(call.prompt_ids)
        return next((text for key, text in (answers or {}).items() if key in prompt), None)

    return Served("v0", str(model_dir), TransformersGenerateClient(model, processor, max_new_tokens=2048,
                                                                   forced=forced))


def run_check(s: Served, path, **kwargs) -> check.CheckReport:
    calls = MEILog.read(path).records
    return asyncio.run(check.check_answers(s, calls, BlobStore(blobs_dir_of(path)), **kwargs))


def test_the_server_sees_the_sft_context_and_reads_the_sft_target_as_valid(
        pairs, tiny_vl_model_dir, tiny_vl_processor):
    """The warm start trains on (prompt, target); served, the same messages must give the same prompt tokens (chat
    template, system prompt, image placeholders, generation prompt) and the target must pass the tool server's
    checks. A mismatch anywhere (template, truncation, key order, stop token) fails here."""
    records = MEILog.read(pairs).records
    targets = {"Lyon": target_text(WEB_OUTPUT), "reverse-search candidates": target_text(REVERSE_OUTPUT)}
    s = served(tiny_vl_model_dir, tiny_vl_processor, targets)
    report = run_check(s, pairs)
    assert [a.verdict for a in report.answers] == ["valid", "valid"]
    assert [a.finish_reason for a in report.answers] == ["stop", "stop"]
    assert report.line().startswith("valid answers 2/2 (valid 2, repaired 0, invalid 0, hit the token limit 0")
    examples = tokenize_calls(records, BlobStore(blobs_dir_of(pairs)), tiny_vl_processor)
    for call, item in zip(s.client.calls, examples.items, strict=True):
        first_target = int(item["loss_mask"].nonzero()[0])
        assert list(call.prompt_ids) == item["input_ids"][:first_target].tolist()
    assert s.client.calls[1].num_images == 3  # the query image and both candidates, as SFT saw them
    assert s.client.calls[0].sampling_params["temperature"] == 0.0  # greedy, as the tool server asks


def test_answers_the_tool_server_would_reject_are_invalid(pairs, tiny_vl_model_dir, tiny_vl_processor):
    web = target_text(WEB_OUTPUT)
    looping = web[: web.index('"summary"')] + "Lyon is a city " * 3  # never closes the evidence string
    elsewhere = web.replace(f"{ORIGIN}/media/lyon.png", f"{ORIGIN}/media/paris.png")
    out_of_range = target_text({**REVERSE_OUTPUT, "candidates": [
        {"index": 2, "match_state": "not_match", "caption": "C"}]})
    for web_answer, reverse_answer in ((looping, out_of_range), (elsewhere, "```json\n{}\n```")):
        s = served(tiny_vl_model_dir, tiny_vl_processor, {"Lyon": web_answer, "reverse-search": reverse_answer})
        report = run_check(s, pairs)
        assert [a.verdict for a in report.answers] == ["invalid", "invalid"], report.answers
    fenced = "```json\n" + target_text(REVERSE_OUTPUT) + "\n```"  # json-repair reads it: usable, as in the tool server
    s = served(tiny_vl_model_dir, tiny_vl_processor, {"Lyon": web, "reverse-search": fenced})
    assert [a.verdict for a in run_check(s, pairs).answers] == ["valid", "repaired"]


def test_an_untrained_model_fails_the_check_with_a_warning(pairs, tiny_vl_model_dir, capsys):
    """The real greedy path (no script): the random tiny model writes no JSON; with --strict-check the CLI fails."""
    argv = ["--model", str(tiny_vl_model_dir), "--pairs", str(pairs), "--check-calls", "2",
            "--check-max-new-tokens", "6", "--device", "cpu", "--strict-check"]
    assert check.main(argv) == 1  # without --strict-check: 0 and the same warning (test_verdict_warns_...)
    out, err = capsys.readouterr()
    assert "valid answers 0/2 (valid 0, repaired 0, invalid 2, hit the token limit 2" in out
    assert "WARNING" in err and "first invalid answer" in err


def test_logged_checks_are_the_tool_servers():
    model, check_fn = logged_answer_check("web_visit", {"goal": "g", "page": page_summary(PAGE)})
    assert model is WebVisitEvidence
    assert read_answer(target_text(WEB_OUTPUT), model, check_fn)[1] == "valid"
    unknown = {**WEB_OUTPUT, "relevant_images": [{"alt": "", "url": "https://x/y.png", "caption": ""}]}
    assert read_answer(json.dumps(unknown), model, check_fn) is None
    model, check_fn = logged_answer_check("reverse_image_search", {
        "goal": "g", "query_image": image_summary(QUERY), "candidates": [image_summary(c) for c in CANDIDATES]})
    assert model is ReverseImageEvidence
    duplicate = {**REVERSE_OUTPUT, "candidates": [REVERSE_OUTPUT["candidates"][0]] * 2}
    assert read_answer(json.dumps(duplicate), model, check_fn) is None
    with pytest.raises(ValueError, match="no MEI method"):
        logged_answer_check("ocr", {})


def test_calls_are_picked_in_turn_from_each_method():
    def rec(i: int, method: str, messages=True) -> MEIRecord:
        return MEIRecord(call_id=str(i), ts=0.0, session_id="s", turn=0, tool="WebVisit", method=method,
                         mei_version="v0", outcome="extractive", latency_s=0.0, input={}, output={},
                         messages=[{"role": "user", "content": "x"}] if messages else None)

    records = [rec(0, "web_visit"), rec(1, "web_visit"), rec(2, "web_visit", messages=False),
               rec(3, "web_visit"), rec(4, "reverse_image_search")]
    assert [r.call_id for r in check.pick_calls(records, 3)] == ["0", "4", "1"]
    assert [r.call_id for r in check.pick_calls(records, 10)] == ["0", "4", "1", "3"]


def test_verdict_warns_below_the_threshold(capsys):
    answers = [check.Answer("a", "web_visit", "valid", "stop", 10, "{}"),
               check.Answer("b", "web_visit", "invalid", "length", 768, '{"rational": "x x x')]
    report = check.CheckReport(answers)
    assert report.usable == 1 and report.share == 0.5
    assert check.verdict(report, min_share=0.5, strict=True, label="MEI v0") == 0
    assert "WARNING" not in capsys.readouterr().err
    assert check.verdict(report, min_share=0.75, strict=False, label="MEI v0") == 0
    assert "only 1/2 answers" in capsys.readouterr().err
    assert check.verdict(report, min_share=0.75, strict=True, label="MEI v0") == 1
    assert check.verdict(check.CheckReport(), min_share=0.5, strict=True, label="MEI v0") == 1


def test_warm_start_checks_by_default_with_the_tool_servers_token_limit(tmp_path, tiny_vl_model_dir, pairs):
    args = warm_start.parse_args(["--model", str(tiny_vl_model_dir), "--pairs", str(pairs), "--out", str(tmp_path)])
    assert args.check_calls == 8 and args.min_valid_share == 0.5 and not args.strict_check
    assert args.check_max_new_tokens == MEIConfig.model_fields["max_tokens"].default == 2048
    with pytest.raises(SystemExit):
        warm_start.parse_args(["--model", str(tiny_vl_model_dir), "--pairs", str(pairs), "--out", str(tmp_path),
                               "--check-calls", "-1"])
