"""The named loaders on fixtures written here in each benchmark's upstream layout (the field names and shapes of the
authors' loaders and dataset cards, named in each loader's docstring): images as parquet bytes, plain base64,
relative paths and lists; answers as strings, lists, JSON-list text and letter choices with options. Expectations
are written out by hand. Before these loaders the files were refused (SimpleVQA's base64 read as a path, LiveVQA's
JSON array "not JSON", SenseNova-MARS's chat JSONL) or loaded without their images (HR-MMSearch, MMSearch)."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from verl_ext.eval.benchmarks import BenchmarkError
from verl_ext.eval.specs import BenchmarkSpec

REPO = Path(__file__).resolve().parents[2]


def _png(colour: str = "red") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), colour).save(buf, format="PNG")
    return buf.getvalue()


def _b64(colour: str = "red") -> str:
    return base64.b64encode(_png(colour)).decode()


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _load(spec: str) -> tuple[list, dict[str, int]]:
    parsed = BenchmarkSpec.parse(spec)
    return parsed.load(), parsed.layouts()


def test_mmsearch_r1_release_parquet_with_bytes_and_candidate_json_text(tmp_path: Path) -> None:
    """``mini_data.pq``'s columns: prompt, images ({bytes, path: null}), reward_model {candidate_answers (JSON
    text), ground_truth, style}, data_source, image_urls (null); a ``.pq`` name."""
    path = tmp_path / "mini_data.pq"
    pd.DataFrame([{
        "prompt": [{"content": "What is the country of origin of this food?", "role": "user"}],
        "images": [{"bytes": _png(), "path": None}],
        "reward_model": {"candidate_answers": '["Kingdom of Spain", "ES"]', "ground_truth": "Spain", "style": "rule"},
        "data_source": "mmsearch_r1/infoseek_train_split", "image_urls": None,
    }]).to_parquet(path)
    [item], layouts = _load(f"infoseek={path}")
    assert (item.item_id, item.question) == ("row1", "What is the country of origin of this food?")
    assert item.ground_truth == {"target": "Spain", "aliases": ["Kingdom of Spain", "ES"]}
    assert [i.data for i in item.images] == [_png()]
    assert item.extra == {"data_source": "mmsearch_r1/infoseek_train_split"}
    assert layouts == {"parquet; images: list of parquet bytes; ground_truth string + candidate_answers "
                       "JSON-list text": 1}
    # an image-less row of a visual benchmark is refused, naming the columns tried
    pd.DataFrame([{"prompt": [{"content": "q", "role": "user"}], "images": [], "image_urls": None,
                   "reward_model": {"ground_truth": "a"}}]).to_parquet(path)
    with pytest.raises(BenchmarkError, match=r":1: field 'images': the row has no image \(tried images, image_urls\)"):
        BenchmarkSpec.parse(f"fvqa={path}").load()


def test_mmsearch_end2end_parquet_keeps_image_alternatives_and_sample_id(tmp_path: Path) -> None:
    path = tmp_path / "end2end.parquet"
    pd.DataFrame([
        {"sample_id": "news_0", "query": "When was the building in the image opened?",
         "query_image": {"bytes": _png("blue"), "path": "q.png"}, "gt_answer": "1889",
         "alternative_gt_answers": ["in 1889", "March 1889"], "area": "news", "subfield": "architecture"},
        {"sample_id": "news_1", "query": "Who won the 2024 Tour de France?", "query_image": None,
         "gt_answer": "Tadej Pogačar", "alternative_gt_answers": [], "area": "news", "subfield": "sports"},
    ]).to_parquet(path)
    (with_image, text_only), layouts = _load(f"mmsearch={path}")
    assert (with_image.item_id, with_image.question) == ("news_0", "When was the building in the image opened?")
    assert with_image.ground_truth == {"target": "1889", "aliases": ["in 1889", "March 1889"]}
    assert [i.data for i in with_image.images] == [_png("blue")]
    assert (text_only.item_id, text_only.images) == ("news_1", ())
    assert text_only.ground_truth["target"] == "Tadej Pogačar"
    assert layouts == {"parquet; query_image: parquet bytes; gt_answer string + alternative_gt_answers list": 1,
                       "parquet; query_image: none (text-only query); gt_answer string + alternative_gt_answers "
                       "list": 1}
    pd.DataFrame([{"sample_id": "x", "query": "q", "gt_answer": "a"}]).to_parquet(path)  # the column is gone
    with pytest.raises(BenchmarkError, match=r":1: field 'query_image': no image column \(tried query_image\)"):
        BenchmarkSpec.parse(f"mmsearch={path}").load()


@pytest.mark.parametrize("container", ["parquet", "jsonl"])
def test_simplevqa_plain_base64_images(tmp_path: Path, container: str) -> None:
    rows = [{"data_id": 0, "image": _b64("green"), "question": "图中的动物是什么？", "answer": "大熊猫",
             "language": "CN", "original_category": "animals"},
            {"data_id": 1012, "image": _b64(), "question": "What city is this?", "answer": "Paris", "language": "EN"}]
    if container == "parquet":
        path = tmp_path / "simplevqa.parquet"
        pd.DataFrame(rows).to_parquet(path)
    else:
        path = _jsonl(tmp_path / "simplevqa.jsonl", rows)
    (cn, en), layouts = _load(f"simplevqa={path}")
    assert (cn.item_id, cn.question) == ("0", "图中的动物是什么？")
    assert cn.ground_truth == {"target": "大熊猫", "aliases": []}
    assert [cn.images[0].data, en.images[0].data] == [_png("green"), _png()]
    assert layouts == {f"{'parquet' if container == 'parquet' else 'JSONL'}; image: base64; answer string": 2}


def test_simplevqa_bad_base64_is_one_short_line(tmp_path: Path) -> None:
    """A real-size blob that is no image: one line, the value cut to 80 characters (not 377 kB on stderr)."""
    blob = base64.b64encode(b"\x00not an image" * 30000).decode()
    path = _jsonl(tmp_path / "simplevqa.jsonl", [{"data_id": 5, "image": blob, "question": "q", "answer": "a"}])
    with pytest.raises(BenchmarkError) as err:
        BenchmarkSpec.parse(f"simplevqa={path}").load()
    message = str(err.value)
    assert message.startswith(f"{path}:1: field 'image': image bytes: not a readable image")
    assert "\n" not in message and len(message) < 300
    path = _jsonl(tmp_path / "simplevqa.jsonl", [{"data_id": 5, "image": "#" * 5000, "question": "q", "answer": "a"}])
    with pytest.raises(BenchmarkError, match=r":1: field 'image': image '#{60,}… \(5002 chars\) is neither a file"):
        BenchmarkSpec.parse(f"simplevqa={path}").load()


def test_hr_mmsearch_query_image_and_ground_truth_forms(tmp_path: Path) -> None:
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "hr_1.png").write_bytes(_png("white"))
    path = tmp_path / "hr_mmsearch.parquet"
    pd.DataFrame([
        {"id": "hr_0", "question": "What is written on the small sign?",
         "query_image": {"bytes": _png(), "path": None}, "ground_truth": "Open daily"},
        {"id": "hr_1", "question": "Which team's logo is on the jersey?", "query_image": {"bytes": None,
                                                                                          "path": "imgs/hr_1.png"},
         "ground_truth": '["Ajax", "AFC Ajax"]'},
        {"id": "hr_2", "question": "Which year is on the plaque?",
         "query_image": {"bytes": _png("black"), "path": None}, "ground_truth": "1920"},
    ]).to_parquet(path)
    items, layouts = _load(f"hr_mmsearch={path}")
    assert [i.item_id for i in items] == ["hr_0", "hr_1", "hr_2"]
    assert [len(i.images) for i in items] == [1, 1, 1]  # none dropped: before, all three ran image-less
    assert items[1].images[0].path == str(tmp_path / "imgs" / "hr_1.png")
    assert items[1].ground_truth == {"target": "Ajax", "aliases": ["AFC Ajax"]}
    assert layouts == {"parquet; query_image: parquet bytes; ground_truth string": 2,
                       "parquet; query_image: relative path; ground_truth JSON-list text": 1}
    pd.DataFrame([{"id": "hr_0", "question": "q", "ground_truth": "a"}]).to_parquet(path)
    with pytest.raises(BenchmarkError, match=r":1: field 'query_image': no image column \(tried query_image, image, "
                                             r"images\)"):
        BenchmarkSpec.parse(f"hr_mmsearch={path}").load()


def test_livevqa_benchmark_json_levels_letters_and_options(tmp_path: Path) -> None:
    """News/benchmark.json beside News/News_imgs/: each item's level1_qa and level2_qa are two questions."""
    (tmp_path / "News_imgs").mkdir()
    (tmp_path / "News_imgs" / "cnn_a.jpg").write_bytes(_png())
    (tmp_path / "News_imgs" / "cnn_b.jpg").write_bytes(_png("blue"))
    path = tmp_path / "benchmark.json"
    path.write_text(json.dumps([{
        "id": "0_2025", "img_path": "cnn_a.jpg", "source": "cnn",
        "level1_qa": {"question": "Based on the provided image, what event is taking place?", "question_type": "event",
                      "options": ["A. A town hall", "B. CBS News vice presidential debate", "C. An inauguration"],
                      "Ground_Truth": "B", "Ground_Truth_List": ["CBS News vice presidential debate",
                                                                 "CBS vice presidential debate"],
                      "img_path": "cnn_a.jpg"},
        "level2_qa": {"question": "How many jobs did the group count?", "question_type": "count",
                      "options": ["A. 312,900", "B. 109,000"], "Ground_Truth": "B", "Ground_Truth_List": ["109,000"],
                      "img_path": "cnn_b.jpg"},
    }], indent=2))
    (level1, level2), layouts = _load(f"livevqa={path}")
    assert level1.item_id == "0_2025/level1" and level2.item_id == "0_2025/level2"
    assert level1.question == ("Based on the provided image, what event is taking place?\nA. A town hall\n"
                               "B. CBS News vice presidential debate\nC. An inauguration")
    assert level1.ground_truth == {"target": "CBS News vice presidential debate",
                                   "aliases": ["CBS vice presidential debate", "B"]}
    assert level2.ground_truth == {"target": "109,000", "aliases": ["B"]}
    assert [level1.images[0].path, level2.images[0].path] == [str(tmp_path / "News_imgs" / "cnn_a.jpg"),
                                                              str(tmp_path / "News_imgs" / "cnn_b.jpg")]
    assert level1.extra == {"question_type": "event", "source": "cnn"}
    assert layouts == {"JSON array; img_path: relative path; letter + options + answer list": 2}
    data = json.loads(path.read_text())
    data[0]["level2_qa"]["img_path"] = "gone.jpg"
    path.write_text(json.dumps(data, indent=2))
    with pytest.raises(BenchmarkError, match=r":2: field 'level2_qa.img_path': image 'gone.jpg' is neither a file"):
        BenchmarkSpec.parse(f"livevqa={path}").load()


def test_browsecomp_vl_jsonl_file_path(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "bc_1.jpg").write_bytes(_png())
    path = _jsonl(tmp_path / "bc_vl_v1.jsonl", [
        {"prompt": "The person in the image founded a company; in which year did it go public?",
         "file_path": "/data/bc_vl/images/bc_1.jpg", "answer": "1999"}])
    [item], layouts = _load(f"browsecomp_vl={path}")
    assert (item.item_id, item.ground_truth) == ("line1", {"target": "1999", "aliases": []})
    assert item.images[0].path == str(tmp_path / "images" / "bc_1.jpg")  # upstream opens the basename there
    assert layouts == {"JSONL; file_path: relative path; answer string": 1}


def test_sensenova_mars_chat_jsonl_with_image_list(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    for name, colour in (("a.jpg", "red"), ("b.jpg", "green")):
        (tmp_path / "images" / name).write_bytes(_png(colour))
    path = _jsonl(tmp_path / "data.jsonl", [
        {"data_source": "hr_mmsearch", "prompt": [{"role": "user", "content": "<image>\nWhat brand is the bag?"}],
         "image": ["images/a.jpg", "images/b.jpg"], "reward_model": {"ground_truth": ["Hermès", "Hermes"]}},
        {"data_source": "hr_mmsearch", "prompt": [{"role": "user", "content": "<image>Where is this?"}],
         "image": ["images/a.jpg"], "reward_model": {"ground_truth": ["Oslo"]}, "extra_info": {"index": 7}},
    ])
    for spec in (f"sensenova_mars={path}", f"hr_mmsearch={path}", f"simplevqa_en=sensenova_mars:{path}"):
        (first, second), layouts = _load(spec)
        assert (first.item_id, first.question, second.item_id) == ("line1", "What brand is the bag?", "7")
        assert first.ground_truth == {"target": "Hermès", "aliases": ["Hermes"]}
        assert [i.path for i in first.images] == [str(tmp_path / "images" / n) for n in ("a.jpg", "b.jpg")]
        assert layouts == {"JSONL chat; image: list of relative path; ground_truth list": 2}
    bad = _jsonl(tmp_path / "bad.jsonl", [{"prompt": [{"role": "user", "content": "<image>q"}],
                                           "image": ["images/a.jpg", "images/missing.jpg"],
                                           "reward_model": {"ground_truth": ["x"]}}])
    with pytest.raises(BenchmarkError, match=r"bad.jsonl:1: field 'image/1': image 'images/missing.jpg' is neither"):
        BenchmarkSpec.parse(f"sensenova_mars={bad}").load()


def test_generic_refuses_unknown_keys_listing_the_known_ones(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "g.jsonl", [{"question": "q", "answer": "a", "image": ["x.png"], "alias": ["b"]}])
    with pytest.raises(BenchmarkError, match=r"g.jsonl:1: field 'alias': unknown key\(s\) 'alias', 'image'; generic "
                                             r"knows id, question, images, answer, aliases, protocol"):
        BenchmarkSpec.parse(f"g=generic:{path}").load()


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
@pytest.mark.parametrize("fmt", ["generic", "vqa_jsonl", "simplevqa", "sensenova_mars", "browsecomp_vl"])
def test_an_empty_file_is_an_error(tmp_path: Path, text: str, fmt: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(text)
    with pytest.raises(BenchmarkError, match=r"empty.jsonl: field '<file>': no rows \(the file is empty"):
        BenchmarkSpec.parse(f"b={fmt}:{path}").load()


def test_run_json_records_the_detected_layout(tmp_path: Path) -> None:
    from verl_ext.eval.episode import PolicySettings
    from verl_ext.eval.run import RunConfig
    from verl_ext.reward.judge import JudgeConfig

    path = _jsonl(tmp_path / "simplevqa.jsonl", [{"data_id": 1, "image": _b64(), "question": "q", "answer": "a"}])
    config = RunConfig(out=tmp_path / "out", benches=[BenchmarkSpec.parse(f"simplevqa={path}")],
                       policy=PolicySettings(JudgeConfig(url="http://127.0.0.1:9", model="p")), tool_url="http://t")
    assert config.pin()["benchmarks"] == {"simplevqa": {"format": "simplevqa", "path": str(path),
                                                        "layouts": {"JSONL; image: base64; answer string": 1}}}


def test_cli_refuses_a_bad_benchmark_file_in_one_line_with_exit_2(tmp_path: Path) -> None:
    """Through the real CLI: an empty file is refused before a tool server starts or --out is written."""
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    done = subprocess.run([sys.executable, "-m", "verl_ext.eval", "run", "--bench", f"simplevqa={path}", "--out",
                           str(tmp_path / "out"), "--policy-url", "http://127.0.0.1:9", "--tool-server",
                           "http://127.0.0.1:9"], capture_output=True, text=True, timeout=120, cwd=REPO, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--bench" in lines[0] and f"{path}: field '<file>': no rows" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


def test_the_catch_all_vqa_loader_no_longer_drops_an_mmsearch_or_hr_mmsearch_image(tmp_path: Path) -> None:
    """``vqa_jsonl`` also tries ``query_image``/``gt_answer``/``alternative_gt_answers``/``sample_id``: before, such a
    file loaded with its images and alternatives silently dropped (or was refused for want of ``answer``)."""
    (tmp_path / "q.png").write_bytes(_png())
    row = {"sample_id": "s7", "query": "Which bridge?", "query_image": "q.png", "gt_answer": "Tower Bridge",
           "alternative_gt_answers": ["London Tower Bridge"]}
    path = _jsonl(tmp_path / "x.jsonl", [row])
    [item] = BenchmarkSpec.parse(f"x=vqa_jsonl:{path}").load()
    assert (item.item_id, item.images[0].path) == ("s7", str(tmp_path / "q.png"))
    assert item.ground_truth == {"target": "Tower Bridge", "aliases": ["London Tower Bridge"]}


def test_base64_given_to_a_path_loader_is_one_short_line(tmp_path: Path) -> None:
    """SimpleVQA's real-size base64 under ``vqa_jsonl`` (which reads paths): before, a raw ``[Errno 36] File name too
    long`` pasting the whole blob; now one line with the value cut and the loader that reads base64 named."""
    blob = base64.b64encode(b"\x89PNG" * 100000).decode()
    path = _jsonl(tmp_path / "simplevqa.jsonl", [{"id": 1, "question": "q", "answer": "a", "image": blob}])
    with pytest.raises(BenchmarkError) as err:
        BenchmarkSpec.parse(f"s=vqa_jsonl:{path}").load()
    message = str(err.value)
    assert message.startswith(f"{path}:1: field 'image/0': image file 'iVBOR")
    assert "e.g. simplevqa" in message and "\n" not in message and len(message) < 400
