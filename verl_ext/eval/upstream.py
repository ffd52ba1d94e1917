"""Named loaders for the benchmark files as their authors publish them (``--bench NAME=PATH`` picks one by name).

One loader per upstream layout, each written from the authors' own loader or dataset card (named with its commit in
the loader's docstring). Every row and every image is read or the file is refused: an image column that is missing,
an image that is neither a readable file nor decodable data, or an answer that is absent is a one-line
:class:`~verl_ext.eval.benchmarks.BenchmarkError` naming ``file:line``, the field and the keys tried. Each item
records the layout it was read in (``EvalItem.layout``; ``run.json`` lists them per benchmark).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from verl_ext.eval.benchmarks import (
    AGENT_PROTOCOLS,
    BenchmarkError,
    EvalItem,
    ImageRef,
    _checked,
    _ground_truth,
    _image_ref,
    _parquet_rows,
    _question_of,
    is_parquet,
    json_lines,
    register_format,
    show,
    tried,
)

Where = tuple[Path, int, str]


# ---------------------------------------------------------------- rows: parquet, a JSON array, or JSON lines
def table(path: Path) -> tuple[str, Iterator[tuple[int, dict[str, Any]]]]:
    """(container, rows) of a parquet file (by its magic bytes), a JSON array, or JSON lines; rows are numbered by
    the line their object starts on (the row for parquet)."""
    if is_parquet(path):
        return "parquet", _parquet_rows(path)
    with path.open(encoding="utf-8") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith("["):
        return "JSON array", _json_array(path)
    return "JSONL", json_lines(path)


def _json_array(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    text = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    pos, line, counted = text.index("[") + 1, 1, 0

    def skip(at: int) -> int:
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        return at

    while True:
        pos = skip(pos)
        if pos >= len(text) or text[pos] == "]":
            return
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            row, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise BenchmarkError(path, line, "<element>", f"not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise BenchmarkError(path, line, "<element>", f"not a JSON object: {show(row)}")
        yield line, row
        pos = skip(pos)
        if pos < len(text) and text[pos] == ",":
            pos += 1


# ---------------------------------------------------------------- images and answers in every form shipped
def image(value: Any, bases: tuple[Path, ...], where: Where) -> tuple[ImageRef, str]:
    """One image and how it was given: parquet/HF ``{"bytes", "path"}`` cells, raw bytes, a ``data:`` URL, an
    http(s) URL, a file relative to one of ``bases`` (its basename too), or plain base64 (SimpleVQA)."""
    if isinstance(value, (bytes, bytearray)):
        return ImageRef(data=_checked(bytes(value), where)), "bytes"
    if isinstance(value, Mapping):
        if value.get("bytes"):
            return _image_ref(value, bases[0], where), "parquet bytes"
        value = value.get("path") or value.get("url")
    if not isinstance(value, str) or not value.strip():
        raise BenchmarkError(*where, f"no image: {show(value)} is neither bytes, a path, a URL nor base64")
    if value.startswith("data:"):
        return _image_ref(value, bases[0], where), "data URL"
    if value.startswith(("http://", "https://")):
        return ImageRef(path=value), "URL"
    if len(value) < 1024 and "\n" not in value:
        for base in bases:
            for candidate in (base / value, base / Path(value).name):
                if candidate.is_file():
                    return _image_ref(str(candidate), base, where), "relative path"
    try:
        data = base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        data = b""
    if data:
        return ImageRef(data=_checked(data, where)), "base64"
    raise BenchmarkError(*where, f"image {show(value)} is neither a file (looked in "
                         f"{', '.join(str(b) for b in bases)}) nor base64 image data")


def images(value: Any, bases: tuple[Path, ...], where: Where) -> tuple[tuple[ImageRef, ...], str]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise BenchmarkError(*where, "an empty image list")
    got = [image(v, bases, (where[0], where[1], f"{where[2]}/{i}" if len(values) > 1 else where[2]))
           for i, v in enumerate(values)]
    kinds = sorted({kind for _, kind in got})
    return tuple(ref for ref, _ in got), ("list of " if isinstance(value, (list, tuple)) else "") + "/".join(kinds)


def answer_form(value: Any) -> str:
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            try:
                return "JSON-list text" if isinstance(json.loads(value), list) else "string"
            except json.JSONDecodeError:
                return "string"
        return "string"
    if isinstance(value, Mapping):
        return "target+aliases"
    return "list" if isinstance(value, (list, tuple)) else type(value).__name__


def pick(row: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str | None, Any]:
    """The first of ``keys`` the row has (even as null): (key, value), or (None, None)."""
    for key in keys:
        if key in row:
            return key, row[key]
    return None, None


def need(row: Mapping[str, Any], keys: tuple[str, ...], path: Path, line: int, what: str) -> tuple[str, Any]:
    key, value = pick(row, keys)
    if key is None or value is None or (isinstance(value, str) and not value.strip()):
        raise BenchmarkError(path, line, key or keys[0], f"no {what} {tried(keys)}")
    return key, value


def _text(value: Any, path: Path, line: int, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BenchmarkError(path, line, key, f"the question must be non-empty text, got {show(value)}")
    return value.replace("<image>", "").strip()


# ---------------------------------------------------------------- the loaders
_R1_IMAGES = ("images", "image_urls")


@register_format("mmsearch_r1")
def load_mmsearch_r1(name: str, path: Path) -> Iterator[EvalItem]:
    """MMSearch-R1's release (also its FVQA and InfoSeek splits): verl RL parquet as ``mmsearch_r1/data/
    mini_data.pq`` and ``mmsearch_r1_infoseek_sub_2k.parquet`` ship it, read by ``mmsearch_r1/utils/dataset/
    rl_dataset.py``: ``prompt`` (chat list), ``images`` (``{"bytes", "path"}`` cells), ``reward_model``
    (``ground_truth`` string, ``candidate_answers`` JSON-list text), ``data_source``, ``image_urls``.
    Source: github.com/EvolvingLMMs-Lab/multimodal-search-r1 at 583c6b49bb6c99db81aab56f64dbbfb8c8e1a9a3.
    FVQA/InfoSeek as SenseNova-MARS ships them (chat JSONL) are read by :func:`load_sensenova_mars`.
    Every row must have an image (these are visual questions): none in ``images`` nor ``image_urls`` is an error."""
    if not is_parquet(path):
        yield from load_sensenova_mars(name, path)
        return
    for number, row in _parquet_rows(path):
        reward = row.get("reward_model")
        if not isinstance(reward, Mapping) or reward.get("ground_truth") is None:
            raise BenchmarkError(path, number, "reward_model.ground_truth", f"missing, got {show(reward)}")
        if not any(k in row for k in _R1_IMAGES):
            raise BenchmarkError(path, number, "images", f"no image column {tried(_R1_IMAGES)}; columns: "
                                 f"{', '.join(sorted(row))}")
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), Mapping) else {}
        key, value = ("images", row.get("images")) if row.get("images") else ("image_urls", row.get("image_urls"))
        if not value:
            raise BenchmarkError(path, number, "images", f"the row has no image {tried(_R1_IMAGES)}")
        refs, kind = images(value, (path.parent,), (path, number, key))
        candidates = reward.get("candidate_answers")
        if candidates is None:
            candidates = extra.get("candidate_answers")
        agent = row.get("agent_name")
        if agent is not None and agent not in AGENT_PROTOCOLS:
            raise BenchmarkError(path, number, "agent_name", f"{agent!r} is none of {sorted(AGENT_PROTOCOLS)}")
        item_id = extra.get("task_id") or extra.get("id") or (
            str(extra["index"]) if extra.get("index") is not None else f"row{number}")
        yield EvalItem(
            benchmark=name, item_id=str(item_id),
            question=_question_of(row.get("prompt"), (path, number, "prompt")),
            ground_truth=_ground_truth(reward["ground_truth"], candidates, (path, number, "reward_model.ground_truth"),
                                       ("reward_model.ground_truth", "reward_model.candidate_answers",
                                        "extra_info.candidate_answers")),
            images=refs, protocol=AGENT_PROTOCOLS.get(agent) if agent else None,
            extra={"data_source": row["data_source"]} if row.get("data_source") else {},
            layout=f"parquet; {key}: {kind}; ground_truth {answer_form(reward['ground_truth'])}"
                   + (f" + candidate_answers {answer_form(candidates)}" if candidates is not None else ""),
        )


_MMS_IMAGE = ("query_image",)


@register_format("mmsearch")
def load_mmsearch(name: str, path: Path) -> Iterator[EvalItem]:
    """MMSearch's end-to-end task, ``end2end.parquet`` of the HF dataset ``CaraJ/MMSearch`` (config ``end2end``) as
    ``eval_end2end.py`` reads it: ``sample_id``, ``query``, ``query_image`` (an image, or null for a text-only
    query, which upstream answers without an image), ``gt_answer``, ``alternative_gt_answers`` (a list).
    Source: github.com/CaraJ7/MMSearch at d340f3f5ebfe6a50b938ecf4a60bcdfb23b146d6. A file without the
    ``query_image`` column is an error (this benchmark has images)."""
    container, rows = table(path)
    for number, row in rows:
        if "query_image" not in row:
            raise BenchmarkError(path, number, "query_image", f"no image column {tried(_MMS_IMAGE)}; columns: "
                                 f"{', '.join(sorted(row))}")
        qkey, question = need(row, ("query", "question"), path, number, "question")
        akey, answer = need(row, ("gt_answer", "answer"), path, number, "answer")
        alternatives = row.get("alternative_gt_answers")
        refs, kind = ((), "none (text-only query)") if row["query_image"] is None else \
            images(row["query_image"], (path.parent,), (path, number, "query_image"))
        _, sample_id = pick(row, ("sample_id", "id"))
        yield EvalItem(
            benchmark=name, item_id=str(sample_id) if sample_id is not None else f"line{number}",
            question=_text(question, path, number, qkey),
            ground_truth=_ground_truth(answer, alternatives, (path, number, akey),
                                       ("gt_answer", "alternative_gt_answers")),
            images=refs,
            extra={k: row[k] for k in ("area", "subfield") if row.get(k) is not None},
            layout=f"{container}; query_image: {kind}; gt_answer {answer_form(answer)}"
                   + (f" + alternative_gt_answers {answer_form(alternatives)}" if alternatives is not None else ""),
        )


_SVQA_IMAGE = ("image", "image_path")


@register_format("simplevqa")
def load_simplevqa(name: str, path: Path) -> Iterator[EvalItem]:
    """SimpleVQA as the HF dataset ``m-a-p/SimpleVQA`` ships it (parquet or JSONL): ``data_id``, ``image`` (plain
    base64, no ``data:`` prefix; the authors' request scripts read it as a path relative to their dataset folder,
    which is accepted too), ``question``, ``answer`` (``atomic_question`` is not asked).
    Source: github.com/SimpleVQA/SimpleVQA at b94d1f3d05d7f488afcdcf95bfcd69bcb279111e
    (``data_engineering/vqa_request/simplevqa_request_lvlm_api_parallel.py``) and the dataset card."""
    container, rows = table(path)
    yield from _one_image_items(name, path, container, rows, image_keys=_SVQA_IMAGE, question_keys=("question",),
                                answer_keys=("answer",), id_keys=("data_id", "id"), bases=(path.parent,),
                                extra_keys=("language", "original_category"))


_HR_IMAGE = ("query_image", "image", "images")
_HR_QUESTION = ("question", "query")
_HR_ANSWER = ("ground_truth", "answer")


@register_format("hr_mmsearch")
def load_hr_mmsearch(name: str, path: Path) -> Iterator[EvalItem]:
    """HR-MMSearch (HF dataset ``sensenova/HR-MMSearch``): ``query_image`` (parquet bytes, base64 or a path),
    the question under ``question``/``query``, ``ground_truth`` (a string, a list or JSON-list text). The dataset
    card was not in the searchable sources; the fields follow the issue's description, and SenseNova-MARS's own
    eval copy (``data/eval/hr_mmsearch/data.jsonl``, chat layout) is read as :func:`load_sensenova_mars` reads it
    (github.com/OpenSenseNova/SenseNova-MARS at ce052d7efe599bf3af0e2db2dcfdbda7d0183704, ``test_all.json``).
    A row without an image is an error: every HR-MMSearch question is about its high-resolution image."""
    container, rows = table(path)
    for number, row in rows:
        if isinstance(row.get("prompt"), list) and isinstance(row.get("reward_model"), Mapping):
            yield _mars_item(name, path, number, row, container)
            continue
        yield from _one_image_items(name, path, container, [(number, row)], image_keys=_HR_IMAGE,
                                    question_keys=_HR_QUESTION, answer_keys=_HR_ANSWER,
                                    id_keys=("id", "sample_id", "data_id"), bases=(path.parent,))


def _image_dirs(path: Path) -> tuple[Path, ...]:
    """The file's folder and its ``*_imgs``/``*_images`` subfolders (LiveVQA: ``News/News_imgs``,
    ``Paper/Paper_images``)."""
    subs = sorted(p for p in path.parent.iterdir() if p.is_dir() and p.name.endswith(("_imgs", "_images")))
    return (path.parent, *subs)


@register_format("livevqa")
def load_livevqa(name: str, path: Path) -> Iterator[EvalItem]:
    """LiveVQA's ``benchmark.json`` (News, Paper, Video): a JSON array of ``{"id", "img_path", "level1_qa",
    "level2_qa"}``; each level is one item (``ID/level1``) with ``question``, ``options`` (``"B. text"``),
    ``Ground_Truth`` (the letter), ``Ground_Truth_List`` (answer texts) and its own ``img_path`` (else the item's),
    resolved in the file's folder or its ``*_imgs``/``*_images`` folder, as ``enhanced_benchmark.py`` does. The
    options are shown under the question; the target is the first answer text, the aliases the rest, the chosen
    option's text and its letter. Source: github.com/fumingyang2004/LIVEVQA at
    3680976126798d8b26b07d14b8fcf1d5098a9646 (``liveVQA_benchmarks/Evaluation/enhanced_benchmark.py``)."""
    container, rows = table(path)
    bases = _image_dirs(path)
    for number, row in rows:
        levels = [k for k in ("level1_qa", "level2_qa") if isinstance(row.get(k), Mapping)]
        if not levels:
            raise BenchmarkError(path, number, "level1_qa", f"no question {tried(('level1_qa', 'level2_qa'))}")
        for level in levels:
            qa = row[level]
            field = f"{level}."
            question = _text(qa.get("question"), path, number, f"{field}question")
            img = qa.get("img_path") or row.get("img_path")
            if not img:
                raise BenchmarkError(path, number, f"{field}img_path",
                                     f"no image {tried((f'{field}img_path', 'img_path'))}")
            refs, kind = images(img, bases, (path, number, f"{field}img_path"))
            options = qa.get("options") or []
            letter = qa.get("Ground_Truth")
            texts = list(qa.get("Ground_Truth_List") or [])
            extra_aliases: list[str] = []
            form = "answer list"
            if options:
                chosen = [o for o in options if isinstance(letter, str)
                          and str(o).strip().upper().startswith(f"{letter.strip().upper()}.")]
                if not chosen:
                    raise BenchmarkError(path, number, f"{field}Ground_Truth",
                                         f"letter {show(letter)} names none of the options {show(options)}")
                option_text = str(chosen[0]).split(".", 1)[1].strip()
                extra_aliases = [option_text, letter.strip()]
                question = question + "\n" + "\n".join(str(o) for o in options)
                form = "letter + options" + (" + answer list" if texts else "")
            answers = texts + extra_aliases
            yield EvalItem(
                benchmark=name, item_id=f"{row.get('id', f'line{number}')}/{level.split('_')[0]}",
                question=question,
                ground_truth=_ground_truth(answers, None, (path, number, f"{field}Ground_Truth_List"),
                                           (f"{field}Ground_Truth_List", f"{field}Ground_Truth")),
                images=refs,
                extra={k: v for k, v in (("question_type", qa.get("question_type")), ("source", row.get("source")))
                       if v is not None},
                layout=f"{container}; img_path: {kind}; {form}",
            )


_BCVL_QUESTION = ("prompt", "question", "query")
_BCVL_IMAGE = ("file_path", "image", "images", "image_path", "image_url")
_BCVL_ANSWER = ("answer", "gold_answer", "ground_truth")


@register_format("browsecomp_vl")
def load_browsecomp_vl(name: str, path: Path) -> Iterator[EvalItem]:
    """BrowseComp-VL (WebWatcher's ``bc_vl_v1.jsonl``/``bc_vl_v2.jsonl``), JSONL as WebWatcher's
    ``infer/scripts_eval/agent_eval.py`` reads it: the question under ``prompt``, the image under ``file_path``
    (upstream opens its basename in an image folder: here the file's folder, or its ``images/``), and the answer,
    which that script does not read, under ``answer`` (per the issue's description; ``gold_answer``/
    ``ground_truth`` also tried). Source: github.com/Alibaba-NLP/WebAgent at 9ef32e9817eff419630641263340e5af46c24150
    (``WebAgent/WebWatcher/infer/scripts_eval/agent_eval.py``); the data file itself was not readable here."""
    container, rows = table(path)
    yield from _one_image_items(name, path, container, rows, image_keys=_BCVL_IMAGE, question_keys=_BCVL_QUESTION,
                                answer_keys=_BCVL_ANSWER, id_keys=("id", "qid", "question_id"),
                                bases=(path.parent, path.parent / "images"))


def _one_image_items(name: str, path: Path, container: str, rows: Iterable[tuple[int, Mapping[str, Any]]], *,
                     image_keys: tuple[str, ...], question_keys: tuple[str, ...], answer_keys: tuple[str, ...],
                     id_keys: tuple[str, ...], bases: tuple[Path, ...],
                     extra_keys: tuple[str, ...] = ()) -> Iterator[EvalItem]:
    """The items of a flat layout (image, question, answer and id columns, each under one of a few names), the
    image required: SimpleVQA, HR-MMSearch, BrowseComp-VL."""
    for number, row in rows:
        ikey, value = need(row, image_keys, path, number, "image column")
        refs, kind = images(value, bases, (path, number, ikey))
        qkey, question = need(row, question_keys, path, number, "question")
        akey, answer = need(row, answer_keys, path, number, "answer")
        _, item_id = pick(row, id_keys)
        yield EvalItem(
            benchmark=name, item_id=str(item_id) if item_id is not None else f"line{number}",
            question=_text(question, path, number, qkey),
            ground_truth=_ground_truth(answer, None, (path, number, akey), answer_keys), images=refs,
            extra={k: row[k] for k in extra_keys if row.get(k) is not None},
            layout=f"{container}; {ikey}: {kind}; {akey} {answer_form(answer)}",
        )


def _mars_item(name: str, path: Path, number: int, row: Mapping[str, Any], container: str) -> EvalItem:
    prompt = row.get("prompt")
    users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"] \
        if isinstance(prompt, list) else []
    if not users:
        raise BenchmarkError(path, number, "prompt", f"no user message in {show(prompt)}")
    question = _text(users[0].get("content"), path, number, "prompt")  # upstream asks the first user turn
    reward = row.get("reward_model")
    if not isinstance(reward, Mapping) or reward.get("ground_truth") is None:
        raise BenchmarkError(path, number, "reward_model.ground_truth", f"no answer, got {show(reward)}")
    if not row.get("image"):
        raise BenchmarkError(path, number, "image", f"no image {tried(('image',))}, got {show(row.get('image'))}")
    refs, kind = images(row["image"], (path.parent,), (path, number, "image"))
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), Mapping) else {}
    item_id = extra.get("id") or extra.get("index")
    return EvalItem(
        benchmark=name, item_id=str(item_id) if item_id is not None else f"line{number}", question=question,
        ground_truth=_ground_truth(reward["ground_truth"], None, (path, number, "reward_model.ground_truth"),
                                   ("reward_model.ground_truth",)),
        images=refs,
        extra={"data_source": row["data_source"]} if row.get("data_source") else {},
        layout=f"{container} chat; image: {kind}; ground_truth {answer_form(reward['ground_truth'])}",
    )


@register_format("sensenova_mars")
def load_sensenova_mars(name: str, path: Path) -> Iterator[EvalItem]:
    """SenseNova-MARS eval sets (``data/eval/<set>/data.jsonl``: mmsearch_end2end_only_image, hr_mmsearch,
    infoseek, fvqa_test, simplevqa_en, livevqa_research_preview, ...), as ``inference/eval.py`` ``load_datasets``
    reads them: ``prompt`` (chat list; the first user message, ``<image>`` removed, is the question), ``image`` (a
    list of paths relative to the set's root, the file's folder; every one is read, upstream uses the first),
    ``reward_model.ground_truth`` (a list of answers). Source: github.com/OpenSenseNova/SenseNova-MARS at
    ce052d7efe599bf3af0e2db2dcfdbda7d0183704 (``inference/eval.py``, ``test_all.json``)."""
    container, rows = table(path)
    for number, row in rows:
        yield _mars_item(name, path, number, row, container)
