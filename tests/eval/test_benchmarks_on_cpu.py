"""Benchmark loaders on small fixtures written here in each layout the field ships (none of the public sets can be
downloaded), and malformed rows: each error names the file, the line and the field."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from verl_ext.eval.benchmarks import BenchmarkError
from verl_ext.eval.specs import KNOWN_BENCHMARKS, BenchmarkSpec


def _png(colour: str = "red") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), colour).save(buf, format="PNG")
    return buf.getvalue()


def _jsonl(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_mmsearch_r1_parquet_layout_with_candidate_answers(tmp_path: Path) -> None:
    """MMSearch-R1 / FVQA / InfoSeek: verl's RL parquet, ground truth a list of candidate answers."""
    path = tmp_path / "fvqa_test.parquet"
    pd.DataFrame([{
        "data_source": "fvqa", "prompt": [{"role": "user", "content": "<image>\nWhich tower is this?"}],
        "images": [{"bytes": _png(), "path": None}],
        "reward_model": {"style": "rule", "ground_truth": ["Eiffel Tower", "La tour Eiffel"]},
        "extra_info": {"index": 7},
    }]).to_parquet(path)
    [item] = BenchmarkSpec.parse(f"fvqa={path}").load()
    assert (item.benchmark, item.item_id, item.question) == ("fvqa", "7", "Which tower is this?")
    assert item.ground_truth == {"target": "Eiffel Tower", "aliases": ["La tour Eiffel"]}
    assert item.images[0].data == _png() and item.protocol is None
    # candidate answers beside the ground truth, as JSON text, or in extra_info
    pd.DataFrame([{"prompt": [{"role": "user", "content": "<image>\nWhich tower is this?"}], "images": [],
                   "reward_model": {"ground_truth": "Eiffel Tower", "candidate_answers": '["La tour Eiffel"]'},
                   "extra_info": {"index": 1}},
                  {"prompt": [{"role": "user", "content": "Which bridge?"}], "images": [],
                   "reward_model": {"ground_truth": '["Tower Bridge"]'},
                   "extra_info": {"index": 2, "candidate_answers": ["London's Tower Bridge"]}}]).to_parquet(path)
    beside, extra = BenchmarkSpec.parse(f"fvqa=verl:{path}").load()  # image-less rows: only the plain verl loader
    assert beside.ground_truth == {"target": "Eiffel Tower", "aliases": ["La tour Eiffel"]}
    assert extra.ground_truth == {"target": "Tower Bridge", "aliases": ["London's Tower Bridge"]}


def test_our_split_layout_names_its_protocol(tmp_path: Path) -> None:
    """``python -m data_gen neos|modalsearch`` rows: ground truth {target, aliases}, agent_name, extra_info.task_id."""
    path = tmp_path / "benchmark.parquet"
    pd.DataFrame([{
        "prompt": [{"role": "user", "content": "<image>\nWhich city is D?"}],
        "images": [{"bytes": _png(), "path": "https://neos-world.invalid/media/flag_sxm.png"}],
        "reward_model": {"style": "rule", "ground_truth": {"target": "Willemstad", "aliases": ["Curaçao capital"]}},
        "agent_name": "modalsearch_react_agent", "extra_info": {"task_id": "t1", "label": "search_required"},
    }]).to_parquet(path)
    [item] = BenchmarkSpec.parse(f"ours=verl:{path}").load()
    assert (item.item_id, item.protocol, item.extra) == ("t1", "modalsearch", {"label": "search_required"})
    assert item.ground_truth["aliases"] == ["Curaçao capital"]


def test_vqa_jsonl_layouts(tmp_path: Path) -> None:
    """The catch-all ``vqa_jsonl``: image path relative to the file, answer + aliases, URLs, data: URLs."""
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.png").write_bytes(_png())
    path = _jsonl(tmp_path / "simplevqa.jsonl", [
        {"id": "s1", "question": "What bird?", "image": "imgs/a.png", "answer": "robin", "answer_aliases": ["Robin"]},
        {"qid": 9, "query": "Who painted it?", "image_urls": ["https://example.org/x.jpg"], "gold_answer": "Monet"},
        {"id": "d", "question": "Which colour?", "image": f"data:image/png;base64,{base64.b64encode(_png()).decode()}",
         "answer": "red"},
    ])
    first, second, inline = BenchmarkSpec.parse(f"simplevqa=vqa_jsonl:{path}").load()
    assert first.images[0].path == str(tmp_path / "imgs" / "a.png")
    assert first.ground_truth == {"target": "robin", "aliases": ["Robin"]}
    assert (second.item_id, second.question, second.images[0].path) == ("9", "Who painted it?",
                                                                        "https://example.org/x.jpg")
    assert inline.images[0].data == _png()  # a data: URL is decoded when the file is read


def test_generic_jsonl_and_parquet_read_the_same(tmp_path: Path) -> None:
    row = {"id": "g1", "question": "Capital of France?", "images": [], "answer": "Paris", "aliases": ["Paname"],
           "protocol": "neos"}
    jsonl = BenchmarkSpec.parse(f"g=generic:{_jsonl(tmp_path / 'g.jsonl', [row])}").load()
    pd.DataFrame([row]).to_parquet(tmp_path / "g.parquet")
    parquet = BenchmarkSpec.parse(f"g=generic:{tmp_path / 'g.parquet'}").load()
    assert jsonl == parquet and jsonl[0].ground_truth == {"target": "Paris", "aliases": ["Paname"]}


def test_a_spec_reads_its_file_once(tmp_path: Path) -> None:
    """The CLI checks every row before a run starts and the run uses the same rows: the file is read once."""
    path = _jsonl(tmp_path / "g.jsonl", [{"id": "g1", "question": "q", "answer": "a"}])
    spec = BenchmarkSpec.parse(f"g=generic:{path}")
    first = spec.load()
    path.unlink()
    assert spec.load() == first and spec.load() is not first  # a fresh list each time; callers may slice it


@pytest.mark.parametrize(("rows", "where"), [
    ([{"question": "q", "answer": "a"}, {"question": "q2"}], ":2: field 'answer': no answer"),
    ([{"question": "q", "answer": "a"}, "{not json"], ":2: field '<line>': not JSON"),
    ([{"question": "", "answer": "a"}], ":1: field 'question': missing"),
    ([{"question": "q", "answer": "a", "images": ["missing.png"]}], ":1: field 'images/0': image file missing.png"),
    ([{"question": "q", "answer": "a", "protocol": "react"}], ":1: field 'protocol'"),
    ([{"question": "q", "answer": "a"}, {"question": "q", "answer": "a", "images": ["junk.png"]}],
     ":2: field 'images/0': image file junk.png: not a readable image"),  # a broken file is the row's error
    ([{"question": "q", "answer": "a", "images": ["data:image/png;base64,bm90IGEgcGljdHVyZQ=="]}],
     ":1: field 'images/0': image bytes: not a readable image"),
    ([{"question": "q", "answer": "a", "images": ["data:image/png;base64,%%%"]}],
     ":1: field 'images/0': a data: URL whose base64 does not decode"),
])
def test_malformed_rows_name_file_line_and_field(tmp_path: Path, rows: list, where: str) -> None:
    (tmp_path / "junk.png").write_bytes(b"not a picture")
    path = _jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(BenchmarkError) as err:
        BenchmarkSpec.parse(f"b=generic:{path}").load()
    assert str(err.value).startswith(f"{path}{where}")


def test_malformed_parquet_row_and_duplicate_ids(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    pd.DataFrame([{"prompt": [{"role": "user", "content": "q"}], "reward_model": {"style": "rule"}}]).to_parquet(path)
    with pytest.raises(BenchmarkError, match=rf"^{path}:1: field 'reward_model.ground_truth': missing"):
        BenchmarkSpec.parse(f"b=verl:{path}").load()
    row = {"prompt": [{"role": "user", "content": "<image>\nq"}], "reward_model": {"ground_truth": "a"}}
    pd.DataFrame([row, {**row, "images": [{"bytes": b"truncated", "path": None}]}]).to_parquet(path)
    with pytest.raises(BenchmarkError, match=rf"^{path}:2: field 'images/0': image bytes: not a readable image"):
        BenchmarkSpec.parse(f"b=verl:{path}").load()
    dup = _jsonl(tmp_path / "dup.jsonl", [{"id": 1, "question": "q", "answer": "a"}] * 2)
    with pytest.raises(BenchmarkError, match="item id '1' occurs twice"):
        BenchmarkSpec.parse(f"b=generic:{dup}").load()


def test_spec_parsing(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "x.jsonl", [{"question": "q", "answer": "a"}])
    assert BenchmarkSpec.parse(f"livevqa={path}").format == KNOWN_BENCHMARKS["livevqa"] == "livevqa"
    with pytest.raises(ValueError, match="unknown format 'csv'"):
        BenchmarkSpec.parse(f"mine=csv:{path}")
    with pytest.raises(ValueError, match="expected NAME=FORMAT:PATH"):
        BenchmarkSpec.parse(f"mine={path}")
    with pytest.raises(ValueError, match="no such file"):
        BenchmarkSpec.parse("mine=generic:/nonexistent.jsonl")


async def test_question_images_from_a_url_a_file_and_row_bytes(tmp_path: Path) -> None:
    """``image_bytes`` downloads a URL image (a real loopback HTTP server here), reads a file, passes row bytes."""
    import aiohttp
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from verl_ext.eval.benchmarks import ImageRef
    from verl_ext.eval.episode import image_bytes, save_image

    app = web.Application()
    app.router.add_get("/x.png", lambda request: web.Response(body=_png("blue"), content_type="image/png"))
    (tmp_path / "a.png").write_bytes(_png("green"))
    async with TestServer(app, host="127.0.0.1") as server, aiohttp.ClientSession() as http:
        got = [await image_bytes(ImageRef(path=str(server.make_url("/x.png"))), http),
               await image_bytes(ImageRef(path=str(tmp_path / "a.png")), http),
               await image_bytes(ImageRef(data=_png()), http)]
    assert got == [_png("blue"), _png("green"), _png()]
    name = save_image(tmp_path, got[0])
    assert name.endswith(".png") and (tmp_path / name).read_bytes() == got[0] and save_image(tmp_path, got[0]) == name
