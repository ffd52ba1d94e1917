"""Neos' rewriter, blind observer and probe 3 with a model, against a stand-in model endpoint: a real
chat-completions HTTP server on loopback (``threaded_chat``, its own thread) whose replies each test scripts.
Usable replies are taken, every unusable one (prose, extra keys, a dropped phrase, a broken step, a
leaked name, an off-palette colour, HTTP 503) falls back to the offline step and is counted under its reason; probe 3
sends the question and the entry images' pixels only; and a pipeline run with all of them verifies tasks whose
question is the model's wording."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import aiohttp
import pytest
from PIL import Image

from data_gen.common.llm import SyncChat
from data_gen.kg import Edge, Structure
from data_gen.neos.cli import model_configs, run
from data_gen.neos.flags import parser
from data_gen.neos.llm import LLMRewriter, ProbeUnavailable, VLMEntryImageProbe, VLMObserver
from data_gen.neos.observer import Description, PaletteObserver, ground, palette
from data_gen.neos.synth import Synthesizer
from data_gen.neos.verbalize import TemplateVerbalizer, check_coverage
from neos_core.world.store import World
from verl_ext.reward.judge import JudgeConfig

STRUCTURE = Structure(
    branches=((Edge("country:a", "country:b", "P47", True), Edge("country:b", "city:c", "P36", True)),),
    tail=(), checkpoints=("country:b",))
FLAG_B = Description("national flag", ("blue", "white"))
WITHHELD = {"Aland", "Bora", "Cetown"}
TEMPLATE = TemplateVerbalizer().verbalize(
    STRUCTURE, {"country:a": "country", "country:b": "country", "city:c": "city"},
    {"P47": "shares border with", "P36": "capital"}, ["national flag"], {"country:b": FLAG_B}, ambiguous={"country:b"})
KEEP = ["the image", FLAG_B.clause()]
FLUENT = ("Could you name the capital of a country whose national flag is mostly blue and white, and that shares a "
          "border with the country whose national flag is shown in the image?")
REWRITES = {
    "fluent": json.dumps({"question": FLUENT}),
    "fenced": "```json\n" + json.dumps({"question": FLUENT}) + "\n```",
    "prose": FLUENT,
    "extra_key": json.dumps({"question": FLUENT, "note": "polished"}),
    "no_flag": json.dumps({"question": FLUENT.replace("whose national flag is mostly blue and white, and ", "")}),
    "turned": json.dumps({"question": FLUENT.replace("the capital of a country", "the country whose capital is a "
                                                                                  "country")}),
    "leak": json.dumps({"question": FLUENT.replace("image?", "image, Cetown perhaps?")}),
    "down": 503,
}


def _rewrite(url: str, model: str):
    with SyncChat(JudgeConfig(url=url, model=model, max_retries=1, retry_backoff_s=0.0)) as chat:
        rewriter = LLMRewriter(chat)
        out = rewriter.rewrite(TEMPLATE, KEEP, lambda q: check_coverage(q, STRUCTURE, TEMPLATE, WITHHELD))
    return out, rewriter.usage


@pytest.mark.parametrize("model", ["fluent", "fenced"])
def test_a_rewrite_that_keeps_every_step_is_taken(threaded_chat, model):
    threaded_chat.reply = lambda body: REWRITES[body["model"]]
    out, usage = _rewrite(threaded_chat.url, model)
    assert TEMPLATE.question == ("Name the capital of a country whose national flag is mostly blue and white, and "
                                 "that shares a border with the country whose national flag is shown in the image.")
    assert out.question == FLUENT and out.spans == TEMPLATE.spans
    assert (usage.calls, usage.fallbacks) == (1, {})
    sent = json.loads(threaded_chat.seen[0]["messages"][1]["content"])
    assert sent == {"question": TEMPLATE.question, "phrases": [*TEMPLATE.spans, *KEEP]}
    assert not any(name in json.dumps(threaded_chat.seen[0]) for name in WITHHELD)  # the model never sees names


@pytest.mark.parametrize(("model", "reason", "calls"), [
    ("prose", "invalid", 1), ("extra_key", "invalid", 1), ("no_flag", "dropped_phrase", 1),
    ("turned", "dropped_phrase", 1), ("leak", "coverage", 1), ("down", "transport", 2)])
def test_an_unusable_rewrite_falls_back_to_the_template_and_is_counted(threaded_chat, model, reason, calls):
    threaded_chat.reply = lambda body: REWRITES[body["model"]]
    out, usage = _rewrite(threaded_chat.url, model)
    assert out is TEMPLATE
    assert usage.report() == {"calls": calls, "fallbacks": 1, "by_reason": {reason: 1}}


def test_an_unreachable_model_falls_back():
    out, usage = _rewrite("http://127.0.0.1:9/v1", "fluent")
    assert out is TEMPLATE and usage.fallbacks == {"transport": 1}


def _flag(path: Path, colours: list[tuple[int, int, int]]) -> Path:
    im = Image.new("RGB", (10, 3 * len(colours)))
    for i, c in enumerate(colours):
        im.paste(c, (0, 3 * i, 10, 3 * i + 3))
    im.save(path)
    return path


def _image_of(body: dict) -> bytes:
    part = body["messages"][1]["content"][1]
    assert part["type"] == "image_url"
    head, data = part["image_url"]["url"].split(",", 1)
    assert head == "data:image/png;base64"
    return base64.b64decode(data)


def test_the_vlm_observer_reports_in_the_offline_schema_without_names_and_asks_once_per_image(tmp_path,
                                                                                               threaded_chat):
    red, white, blue = (210, 20, 40), (255, 255, 255), (0, 60, 170)
    files = {"x": _flag(tmp_path / "x.png", [red, white]), "y": _flag(tmp_path / "y.png", [blue, white]),
             "z": _flag(tmp_path / "z.png", [red, white, red])}
    # The model reads the word on each flag, so it tells x and z apart where the palette alone cannot.
    words = {files["x"].read_bytes(): ["Bora", "Republic"], files["z"].read_bytes(): ["Zedland"],
             files["y"].read_bytes(): ["Aland"]}
    threaded_chat.reply = lambda body: json.dumps({"colours": ["red", "white"] if _image_of(body) != files[
        "y"].read_bytes() else ["blue", "white"], "text": words[_image_of(body)]})
    images_of = lambda e: [(f"flag_{e}", files[e], "flag-icons")]  # noqa: E731
    with SyncChat(JudgeConfig(url=threaded_chat.url, model="eye")) as chat:
        observer = VLMObserver(chat, PaletteObserver())
        g = ground("x", {"x", "y", "z"}, images_of, observer, withheld={"Bora"})
        assert observer.describe(files["x"], "flag-icons", {"Bora"}) == Description("national flag",
                                                                                   ("red", "white"), ("Republic",))
        assert observer.describe(files["x"], "world-atlas", ()) == Description("locator map", ("red", "white"),
                                                                               ("Bora", "Republic"))
        assert observer.describe(files["x"], "not-an-image-source", ()) is None
    assert g is not None and g.image_id == "flag_x" and g.description.text == ("Republic",)
    assert ground("x", {"x", "y", "z"}, images_of, PaletteObserver(), withheld={"Bora"}) is None
    assert observer.usage.calls == 3 and len(threaded_chat.seen) == 3  # one per image, whatever is withheld
    sent = json.dumps(threaded_chat.seen)
    assert "x.png" not in sent and "flag_x" not in sent and "Bora" not in sent


@pytest.mark.parametrize(("reply", "reason"), [
    (json.dumps({"colours": ["teal"], "text": []}), "unknown_colour"),
    (json.dumps({"colours": ["red", "red"], "text": []}), "unknown_colour"),
    (json.dumps({"colours": [], "text": []}), "invalid"),
    (json.dumps({"colours": ["red", "white", "blue", "green", "black"], "text": []}), "invalid"),
    (json.dumps({"colours": "red", "text": []}), "invalid"),
    (json.dumps({"colours": ["red"], "text": ["x" * 201]}), "invalid"),
    ("a red and white flag", "invalid")])
def test_an_unusable_observation_falls_back_to_the_palette_observer(tmp_path, threaded_chat, reply, reason):
    path = _flag(tmp_path / "x.png", [(210, 20, 40), (255, 255, 255)])
    threaded_chat.reply = lambda body: reply
    with SyncChat(JudgeConfig(url=threaded_chat.url, model="eye")) as chat:
        observer = VLMObserver(chat, PaletteObserver())
        assert observer.describe(path, "flag-icons", ()) == Description("national flag", ("red", "white"))
    assert observer.usage.fallbacks == {reason: 1}


def test_the_vlm_defaults_to_the_llm():
    args = parser(__import__("argparse").ArgumentParser()).parse_args(
        ["--world", "w", "--out", "o", "--llm-url", "http://h/v1", "--llm-model", "big"])
    llm, vlm = model_configs(args)
    assert (llm.url, llm.model, vlm.url, vlm.model) == ("http://h/v1", "big", "http://h/v1", "big")
    args.vlm_url, args.vlm_model = "http://v/v1", "eye"
    assert model_configs(args)[1].model == "eye"
    args.llm_url = args.vlm_url = None
    assert model_configs(args) == (None, None)


@pytest.fixture(scope="module")
def first_task(small_world):
    synth = Synthesizer(World.load(small_world), seed=0)
    return synth.world, next(c.task for s in synth.seeds() for c in synth.synthesize(s).candidates if c.task)


async def test_the_vqa_probe_sends_the_question_and_entry_pixels_only(first_task, threaded_chat):
    world, task = first_task
    threaded_chat.reply = lambda body: {"knows": task.answer, "guesses": "Atlantis", "down": 503}[
        body["model"]]
    async with aiohttp.ClientSession() as http:
        probes = {m: VLMEntryImageProbe(JudgeConfig(url=threaded_chat.url, model=m, max_retries=0), http,
                                        world.image_path) for m in ("knows", "guesses", "down")}
        assert await probes["knows"].solves(task) and not await probes["guesses"].solves(task)
        with pytest.raises(ProbeUnavailable, match="vlm_entry_image_answer \\(down\\): ClientResponseError: 503"):
            await probes["down"].solves(task)
    user = threaded_chat.seen[0]["messages"][1]["content"]
    assert user[0] == {"type": "text", "text": task.question} and len(user) == 1 + len(task.entry_images)
    assert _image_of(threaded_chat.seen[0]) == world.image_path(task.entry_images[0].image_id).read_bytes()
    sent = json.dumps(threaded_chat.seen[0])
    assert task.answer not in sent and task.entry_images[0].image_id not in sent  # pixels, not names or ids


def _model(body: dict) -> str:
    """Rewriter ("writer"): the template with its question reworded; observer ("eye"): the image's true palette;
    probe 3 (also "eye", asked a question): no answer."""
    content = body["messages"][1]["content"]
    if isinstance(content, list) and content[0]["text"] != "Describe this image.":
        return "I cannot tell."
    if body["model"] == "writer":
        question = json.loads(body["messages"][1]["content"])["question"]
        return json.dumps({"question": "Puzzle: " + question})
    with Image.open(io.BytesIO(_image_of(body))) as im:
        # an image without clearly named colours (the offline palette's margin): a VLM still names one
        return json.dumps({"colours": list(palette(im)) or ["grey"], "text": []})


async def test_a_run_with_both_model_steps_verifies_reworded_questions(small_world, tool_server, threaded_chat,
                                                                       tmp_path):
    threaded_chat.reply = _model
    report = await run(small_world, tmp_path, str(tool_server.make_url("")).rstrip("/"), seed=0, limit=1, ocr=False,
                       rewrite=JudgeConfig(url=threaded_chat.url, model="writer"),
                       vlm=JudgeConfig(url=threaded_chat.url, model="eye"))
    outcomes = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    verified = [o["task"] for o in outcomes if o["status"] == "verified"]
    assert len(verified) == 1 and verified[0]["question"].startswith("Puzzle: ")
    assert "Let " not in verified[0]["question"]
    assert report["llm_rewriter"]["fallbacks"] == 0 and report["llm_rewriter"]["calls"] >= 1
    assert report["vlm_observer"]["fallbacks"] == 0 and report["vlm_observer"]["calls"] >= 1
    writes = [b for b in threaded_chat.seen if b["model"] == "writer"]
    assert len(writes) == report["llm_rewriter"]["calls"]
    asked = [b["messages"][1]["content"][0]["text"] for b in threaded_chat.seen
             if b["model"] == "eye" and b["messages"][1]["content"][0]["text"] != "Describe this image."]
    assert verified[0]["question"] in asked  # probe 3 asked the VLM about the reworded question
