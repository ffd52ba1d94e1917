"""Renders with images through the fast path give verl's processor ids; the media caches return what they cache."""

from __future__ import annotations

import asyncio
import base64
import io

import pytest
from PIL import Image
from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

from verl_ext.models.tiny_vl import HF_MODEL_TYPE
from verl_ext.rollout import media, tokens
from verl_ext.rollout.lru import LRU
from verl_ext.rollout.tokens import fast_text_renders

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "FetchImage",
            "description": "fetch images",
            "parameters": {"type": "object", "properties": {"urls": {"type": "array"}}},
        },
    }
]



def _images(world) -> list[Image.Image]:
    """World images of two sizes, a crop below the processor's min_pixels (upscaled), and a grayscale one."""
    flag = world.load_pixels("flag_fra", max_pixels=4_000_000)
    logo = world.load_pixels("logo_acer", max_pixels=4_000_000)
    return [flag, logo, flag.crop((10, 20, 60, 45)), logo.convert("L")]


def _episode(builder, images: list[Image.Image]) -> list[list[int]]:
    """Question with two images, then an observation with two fetched images: the stream after each step."""
    messages = [
        {"role": "system", "content": "rules"},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": images[0]},
                {"type": "image", "image": images[1]},
                {"type": "text", "text": "Which flag?"},
            ],
        },
    ]
    ids = builder.build_initial_tokens(messages, tools=TOOLS, images=images[:2])
    call = {"type": "function", "function": {"name": "FetchImage", "arguments": {"urls": ["a", "b"]}}}
    tokenizer = builder.tokenizer
    generated = tokenizer.encode('<tool_call>\n{"name": "FetchImage", "arguments": {"urls": ["a", "b"]}}\n</tool_call>')
    ids = builder.merge_assistant_tokens(ids, generated + [tokenizer.convert_tokens_to_ids("<|im_end|>")]).token_ids
    previous = messages + [{"role": "assistant", "content": "", "tool_calls": [call]}]
    observation = {
        "role": "tool",
        "content": [
            {"type": "text", "text": "img_3:"},
            {"type": "image", "image": images[2]},
            {"type": "text", "text": "img_4:"},
            {"type": "image", "image": images[3]},
            {"type": "text", "text": "fetched 2 images"},
        ],
    }
    merged = builder.merge_context_tokens(previous, previous + [observation], ids, tools=TOOLS).token_ids
    return [ids, merged]


@pytest.fixture
def cold_caches(monkeypatch):
    """Empty media caches and no render shape verified yet, as in a fresh worker process."""
    monkeypatch.setattr(tokens, "_verified", {})
    monkeypatch.setattr(tokens, "_tools_free", {})
    monkeypatch.setattr(tokens, "_size_formula_ok", {})
    media.IMAGE_REPLACEMENTS.clear()
    media.SESSION_PNGS.clear()


def test_renders_with_images_match_verls_processor(vl_builder, world, cold_caches):
    images = _images(world)
    reference = _episode(vl_builder(), images)
    fast = fast_text_renders(vl_builder())
    assert _episode(fast, images) == reference  # first use: checked against verl's render
    # Three renders with images checked: the question; the observation without the tool schemas (verl's synthetic
    # prefix, then prefix + observation) and, once, with them (``render_delta_token_id``'s own check).
    image_shapes = [ok for (cls, kind, *_), ok in tokens._verified.items() if cls is type(fast) and kind == "images"]
    assert image_shapes == [True, True, True]
    assert _episode(fast, images) == reference  # again, the placeholders from the cache


def test_placeholder_count_is_the_processors_grid(vl_builder, tiny_vl_processor, world, cold_caches):
    # flag_fra is 320x240; the tiny processor's max_pixels is 224*224 = 50176, so it is resized to 252x168 (multiples
    # of 28): a 18x12 grid of 14-pixel patches, merged 2x2 -> 54 placeholder tokens.
    flag = world.load_pixels("flag_fra", max_pixels=4_000_000)
    assert flag.size == (320, 240)
    grid = tiny_vl_processor.image_processor([flag], return_tensors="pt")["image_grid_thw"].tolist()
    assert grid == [[1, 12, 18]]
    messages = [{"role": "user", "content": [{"type": "image", "image": flag}, {"type": "text", "text": "?"}]}]
    ids = fast_text_renders(vl_builder()).build_initial_tokens(messages, images=[flag])
    pad = tiny_vl_processor.image_token_id
    start = ids.index(tiny_vl_processor.tokenizer.convert_tokens_to_ids("<|vision_start|>"))
    assert ids[start + 1 : start + 55] == [pad] * 54 and ids.count(pad) == 54


@pytest.mark.parametrize(
    ("settings", "placeholders"),
    [
        # Qwen2VLImageProcessor applies min/max pixels only as a pair: max_pixels alone leaves 224*224, so 54 as by
        # default (the processor's size formula, ``_get_num_multimodal_tokens``, would say 99 here).
        ({"max_pixels": 200_000}, 54),
        # The pair: 320x240 is within it, each side rounded to a multiple of 28 (240 -> 252, 320 -> 308): 18x22
        # patches of 14 pixels, merged 2x2 -> 99.
        ({"min_pixels": 3136, "max_pixels": 200_000}, 99),
    ],
)
def test_processor_kwargs_count_as_the_processor_applies_them(
    tiny_vl_processor, world, cold_caches, settings, placeholders
):
    flag = world.load_pixels("flag_fra", max_pixels=4_000_000)
    messages = [{"role": "user", "content": [{"type": "image", "image": flag}, {"type": "text", "text": "?"}]}]

    def build(wrap):
        builder = wrap(
            create_continuous_token_builder(
                tiny_vl_processor.tokenizer,
                hf_model_type=HF_MODEL_TYPE,
                processor=tiny_vl_processor,
                mm_processor_kwargs=settings,
            )
        )
        return builder.build_initial_tokens(messages, images=[flag])

    ids = build(fast_text_renders)
    assert list(tokens._verified.values()) == [True]  # the fast path ran, and matched verl's render
    assert ids == build(lambda builder: builder)
    assert ids.count(tiny_vl_processor.image_token_id) == placeholders


def _question(image: Image.Image) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "?"}]}]


class _CountedImageProcessor:
    """The processor's image processor, recording the sizes of the images it is run on."""

    def __init__(self, inner, calls: list[tuple[int, int]]):
        self._inner, self._calls = inner, calls

    def __call__(self, images, *args, **kwargs):
        self._calls.extend(im.size for im in images)
        return self._inner(images, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._inner, name)


@pytest.fixture
def image_path_calls(tiny_vl_processor, monkeypatch) -> list[tuple[int, int]]:
    """The sizes of the images the processor's image path (its image processor) was run on."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(tiny_vl_processor, "image_processor",
                        _CountedImageProcessor(tiny_vl_processor.image_processor, calls))
    return calls


# Sizes the tiny processor treats differently: within its pixel range, above it (downscaled), below it (upscaled),
# smaller than one 28-pixel cell, and aspect ratios up to its limit of 200.
SIZES = [(320, 240), (641, 479), (3000, 2000), (2000, 3000), (20, 20), (1, 150), (5, 1000), (1999, 10), (57, 29)]


def test_new_image_sizes_cost_the_size_formula_once_it_gave_the_processors_text(
    vl_builder, image_path_calls, cold_caches
):
    fast = fast_text_renders(vl_builder())
    for size in SIZES:
        image = Image.new("RGB", size, "red")
        assert fast.build_initial_tokens(_question(image), images=[image]) == vl_builder().build_initial_tokens(
            _question(image), images=[image]
        ), size
    # verl's renders (the references) run the image path on every image. The fast renders ran it on the first image
    # twice (to check the formula, and in the first-use check of the conversation shape against verl's render) and
    # never again.
    assert image_path_calls == [SIZES[0]] * 3 + SIZES[1:]


def test_a_size_formula_that_disagrees_with_the_processor_is_never_used(
    vl_builder, tiny_vl_processor, image_path_calls, cold_caches, monkeypatch
):
    formula = tiny_vl_processor._get_num_multimodal_tokens

    def off_by_one(**kwargs):
        data = formula(**kwargs)
        data.num_image_tokens = [n + 1 for n in data.num_image_tokens]
        return data

    monkeypatch.setattr(tiny_vl_processor, "_get_num_multimodal_tokens", off_by_one)
    fast = fast_text_renders(vl_builder())
    for size in SIZES[:3]:
        image = Image.new("RGB", size, "red")
        ids = fast.build_initial_tokens(_question(image), images=[image])
        assert ids == vl_builder().build_initial_tokens(_question(image), images=[image])
    assert tokens._size_formula_ok == {id(tiny_vl_processor): False}
    # The fast renders ran the image path on each size (and on the first once more: the shape's first-use check).
    assert sorted(image_path_calls) == sorted(SIZES[:3] * 2 + SIZES[:1])


def test_an_image_the_processor_refuses_raises_its_error_and_keeps_the_fast_path(vl_builder, cold_caches):
    fast = fast_text_renders(vl_builder())
    thin = Image.new("RGB", (320, 1))
    with pytest.raises(ValueError, match="aspect ratio must be smaller than 200"):
        fast.build_initial_tokens(_question(thin), images=[thin])
    image = Image.new("RGB", (320, 240))
    assert fast.build_initial_tokens(_question(image), images=[image]) == vl_builder().build_initial_tokens(
        _question(image), images=[image]
    )
    assert list(tokens._verified.values()) == [True]  # the refusal did not turn the fast path off


def test_a_fast_render_that_differs_from_verls_is_dropped_for_its_shape(
    vl_builder, world, cold_caches, monkeypatch
):
    images = _images(world)
    reference = _episode(vl_builder(), images)
    monkeypatch.setattr(tokens, "_encode_messages", lambda tokenizer, text: [0])  # a broken fast path
    fast = fast_text_renders(vl_builder())
    assert _episode(fast, images) == reference
    assert [ok for (_, kind, *_), ok in tokens._verified.items() if kind == "images"] == [False, False, False]
    assert _episode(fast, images) == reference  # from then on, verl's render


def test_a_processor_that_cannot_give_an_image_replacement_falls_back_to_verls_render(
    vl_builder, world, cold_caches, monkeypatch
):
    """A processor whose call or size formula this does not understand (another model family, another signature):
    verl's render, no crash. (Simulated at our call to it: the processor's own render must keep working.)"""
    images = _images(world)
    reference = _episode(vl_builder(), images)

    def missing(self, image):
        raise AttributeError("'Processor' object has no attribute '_get_num_multimodal_tokens'")

    monkeypatch.setattr(tokens._TextRenderMemo, "_image_replacement", missing)
    fast = fast_text_renders(vl_builder())
    assert _episode(fast, images) == reference
    assert [ok for (_, kind, *_), ok in tokens._verified.items() if kind == "images"] == [False, False, False]


def test_encoding_a_message_at_a_time_equals_encoding_the_whole(tiny_vl_processor):
    tokenizer = tiny_vl_processor.tokenizer
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "a <|im_start|> inside, tabs\t\tand  spaces \n"},
        {"role": "assistant", "content": "ok"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    text = text.replace("rules", "rules <|vision_start|>" + "<|image_pad|>" * 7 + "<|vision_end|>")
    assert tokens._encode_messages(tokenizer, text) == tokens._encode(tokenizer, text)
    assert tokens._encode_messages(tokenizer, text) == tokenizer(text)["input_ids"]  # again, from the memo


def test_session_pngs_are_cached_by_content(world, cold_caches):
    flag = world.load_pixels("flag_fra", max_pixels=4_000_000)
    copy = flag.copy()
    other = world.load_pixels("flag_abw", max_pixels=4_000_000)
    assert other.size == flag.size
    png = media.session_png(flag)
    assert media.session_png(copy) is png  # same pixels, another object: the cached encoding
    assert media.session_png(other) != png
    assert media.image_key(flag.convert("L")) != media.image_key(flag)
    with Image.open(io.BytesIO(base64.b64decode(png))) as decoded:
        assert decoded.convert("RGB").tobytes() == flag.tobytes()


def test_question_media_are_keyed_by_content_and_only_when_it_is_at_hand(world):
    flag = world.load_pixels("flag_fra", max_pixels=4_000_000)

    def ask(*parts):
        return [{"role": "system", "content": "rules"}, {"role": "user", "content": [*parts, {"type": "text"}]}]

    key = media.question_media_key(ask({"type": "image", "bytes": b"png-1", "image": flag}))
    assert key == media.question_media_key(ask({"type": "image", "bytes": b"png-1"}))  # the file decides
    assert key != media.question_media_key(ask({"type": "image", "bytes": b"png-2", "image": flag}))
    assert media.question_media_key(ask({"type": "image", "image": flag})) == media.question_media_key(
        ask({"type": "image", "image": flag.copy()})
    )
    assert media.question_media_key(ask()) is None
    assert media.question_media_key(ask({"type": "image", "image": "file:///q.png"})) is None
    assert media.question_media_key(ask({"type": "image", "bytes": b"png-1"}, {"type": "video", "video": []})) is None


async def test_a_shared_computation_that_fails_reaches_every_waiter_and_is_not_kept():
    cache: LRU = LRU(8)
    started = []

    async def compute():
        started.append(1)
        await asyncio.sleep(0.01)
        if len(started) == 1:
            raise ValueError("undecodable")
        return "pixels"

    waiters = [media.shared_result(cache, "q", compute) for _ in range(3)]
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert [repr(r) for r in results] == [repr(ValueError("undecodable"))] * 3 and len(started) == 1
    assert await media.shared_result(cache, "q", compute) == "pixels"  # computed afresh
    assert await media.shared_result(cache, "q", compute) == "pixels" and len(started) == 2  # then kept
