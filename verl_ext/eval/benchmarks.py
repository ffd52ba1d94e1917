"""Benchmark registry: loaders that turn the layouts the field ships into one item type (no verl import).

The public benchmarks each have a named loader of their upstream layout in :mod:`verl_ext.eval.upstream`
(``mmsearch_r1``, ``mmsearch``, ``simplevqa``, ``hr_mmsearch``, ``livevqa``, ``browsecomp_vl``, ``sensenova_mars``);
``verl_ext.eval.specs.KNOWN_BENCHMARKS`` maps each name to its loader. The catch-all layouts here (``FORMATS``;
``--bench NAME=FORMAT:PATH`` picks one per benchmark):

- ``verl``: verl's RL parquet, as ``python -m data_gen neos|modalsearch`` writes its splits and as MMSearch-R1,
  FVQA and InfoSeek are distributed: ``prompt`` (chat messages; ``<image>`` placeholders are dropped, the question
  is the last user turn's text), ``images`` (``{"bytes", "path"}`` cells, a path or a URL),
  ``reward_model.ground_truth`` (a string, a list of candidate answers, ``{"target", "aliases"}`` or that as JSON),
  candidate answers under ``reward_model.candidate_answers`` or ``extra_info.candidate_answers`` (a list, or one
  as JSON text), optional ``agent_name`` (picks the protocol), ``extra_info`` (``task_id``/``index`` name the item)
  and ``data_source``.
- ``vqa_jsonl``: one JSON object per line (or parquet) of VQA-style exports: the question under ``question`` (or
  ``query``/``prompt``), images under ``images``/``image``/``image_path``/``image_url``/``image_urls``/
  ``query_image`` (paths relative to the file, ``data:`` URLs, or http(s) URLs), the answer under ``answer``/
  ``gold_answer``/``ground_truth``/``gt_answer`` and aliases under ``aliases``/``answer_aliases``/
  ``candidate_answers``/``answers``/``alternative_gt_answers``.
- ``generic``: the documented minimal layout, JSONL or parquet, exactly these fields: ``id`` (optional),
  ``question``, ``images`` (list of paths or URLs, optional), ``answer``, ``aliases`` (optional), ``protocol``
  (optional: ``neos`` or ``modalsearch``).

A row that cannot be read is a :class:`BenchmarkError` naming the file, the line (1-based; the row for parquet) and
the field, before anything runs; images given as bytes, files or ``data:`` URLs must decode (http(s) URLs are
fetched by the episode).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

from PIL import Image, UnidentifiedImageError

from verl_ext.reward.answers import reference_answers
from verl_ext.rollout.protocols import Protocol

AGENT_PROTOCOLS: dict[str, Protocol] = {"neos_search_agent": "neos", "modalsearch_react_agent": "modalsearch"}


class BenchmarkError(ValueError):
    """A benchmark file that cannot be read; the message names file, line and field."""

    def __init__(self, path: Path, line: int | None, field_name: str, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(" ".join(f"{where}: field {field_name!r}: {problem}".split()))  # one line, always


def show(value: Any, limit: int = 80) -> str:
    """``value`` for an error message: its repr, cut to ``limit`` characters (a base64 image is not pasted whole)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 1]}… ({len(text)} chars)"


@dataclass(frozen=True)
class ImageRef:
    """A question image: the encoded file's bytes, a local file, or a URL (fetched when the episode starts)."""

    data: bytes | None = None
    path: str | None = None  # local file or http(s) URL

    def describe(self) -> str:
        return self.path or f"<{len(self.data or b'')} bytes>"


@dataclass(frozen=True)
class EvalItem:
    benchmark: str
    item_id: str
    question: str
    ground_truth: dict[str, Any]  # {"target": str, "aliases": [str, ...]}
    images: tuple[ImageRef, ...] = ()
    protocol: Protocol | None = None  # None: the run's --protocol
    extra: dict[str, Any] = field(default_factory=dict)
    layout: str = field(default="", compare=False)  # what the loader detected, e.g. "parquet; image base64"


Loader = Callable[[str, Path], Iterator[EvalItem]]
FORMATS: dict[str, Loader] = {}  # complete once verl_ext.eval.upstream is imported (verl_ext.eval.specs does)


def register_format(name: str) -> Callable[[Loader], Loader]:
    def wrap(fn: Loader) -> Loader:
        if name in FORMATS:
            raise ValueError(f"benchmark format {name!r} is already registered")
        FORMATS[name] = fn
        return fn

    return wrap


def _ground_truth(value: Any, aliases: Any, where: tuple[Path, int, str],
                  keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """``{"target", "aliases"}`` from any answer form ``reference_answers`` reads (a string, candidate answers,
    ``{"target", "aliases"}`` or that as JSON), plus extra aliases; the first form is the target."""
    forms = list(dict.fromkeys([*reference_answers(_json_list(value)), *reference_answers(_json_list(aliases))]))
    if not forms:
        raise BenchmarkError(where[0], where[1], where[2], f"no answer (empty or missing) {tried(keys or (where[2],))}")
    return {"target": forms[0], "aliases": forms[1:]}


def _json_list(value: Any) -> Any:
    """A list of answers stored as JSON text, decoded; anything else as it is (an answer may start with "[")."""
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return value
        return decoded if isinstance(decoded, list) else value
    return value


def _image_ref(value: Any, base: Path, where: tuple[Path, int, str]) -> ImageRef:
    """A row's image as bytes, a local file or a URL; bytes, files and ``data:`` URLs are checked to decode here, so
    that a broken picture is this row's error and not, later, an episode's (URLs are fetched when an episode runs)."""
    if isinstance(value, Mapping):
        data = value.get("bytes")
        if data:
            return ImageRef(data=_checked(bytes(data), where), path=value.get("path") or None)
        value = value.get("path") or value.get("url")
    if not isinstance(value, str) or not value.strip():
        raise BenchmarkError(where[0], where[1], where[2],
                             f"an image must be bytes, a path or a URL, got {show(value)}")
    if value.startswith("data:"):
        header, _, payload = value.partition(",")
        try:
            data = base64.b64decode(payload, validate=True) if header.endswith(";base64") \
                else unquote_to_bytes(payload)
        except binascii.Error:
            raise BenchmarkError(where[0], where[1], where[2], "a data: URL whose base64 does not decode") from None
        return ImageRef(data=_checked(data, where))
    if value.startswith(("http://", "https://")):
        return ImageRef(path=value)
    file = (base / value) if not Path(value).is_absolute() else Path(value)
    try:
        exists = file.is_file()
    except OSError:  # e.g. a base64 image read as a path: "File name too long"
        exists = False
    if not exists:
        shown = value if len(value) <= 80 else show(value)
        raise BenchmarkError(where[0], where[1], where[2], f"image file {shown} does not exist (looked in "
                             f"{base}; a base64 image needs a loader that reads base64, e.g. simplevqa)")
    _check_image(file, where, f"image file {value}")
    return ImageRef(path=str(file))


def _checked(data: bytes, where: tuple[Path, int, str]) -> bytes:
    _check_image(io.BytesIO(data), where, "image bytes")
    return data


def _check_image(source: Path | io.BytesIO, where: tuple[Path, int, str], what: str) -> None:
    """Raises unless PIL recognises ``source`` as an image (from its header only: cheap for a whole benchmark)."""
    try:
        with Image.open(source):
            pass
    except (UnidentifiedImageError, OSError) as exc:
        raise BenchmarkError(where[0], where[1], where[2],
                             f"{what}: not a readable image ({type(exc).__name__})") from None


def _image_refs(value: Any, base: Path, where: tuple[Path, int, str]) -> tuple[ImageRef, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, Mapping)):
        value = [value]
    return tuple(_image_ref(v, base, (where[0], where[1], f"{where[2]}/{i}")) for i, v in enumerate(value))


def json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) of each non-blank line; a line that is not a JSON object raises
    ``BenchmarkError`` naming file and line (the results, exports and metric logs are read the same way)."""
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BenchmarkError(path, number, "<line>", f"not JSON ({exc.msg} at char {exc.pos})") from None
            if not isinstance(row, dict):
                raise BenchmarkError(path, number, "<line>", "not a JSON object")
            yield number, row


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow.parquet as pq

    for number, row in enumerate(pq.read_table(path).to_pylist(), 1):
        yield number, row


def is_parquet(path: Path) -> bool:
    """By the file's magic bytes, not its name (MMSearch-R1 ships ``.pq``)."""
    with path.open("rb") as fh:
        return fh.read(4) == b"PAR1"


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    return _parquet_rows(path) if is_parquet(path) else json_lines(path)


def _question_of(prompt: Any, where: tuple[Path, int, str]) -> str:
    if isinstance(prompt, str):
        prompt = json.loads(prompt) if prompt.lstrip().startswith("[") else [{"role": "user", "content": prompt}]
    users = [m for m in prompt or [] if isinstance(m, Mapping) and m.get("role") == "user"]
    if not users:
        raise BenchmarkError(where[0], where[1], where[2], "no user message")
    content = users[-1].get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    text = str(content or "").replace("<image>", "").strip()
    if not text:
        raise BenchmarkError(where[0], where[1], where[2], "the user message has no question text")
    return text


@register_format("verl")
def load_verl(name: str, path: Path) -> Iterator[EvalItem]:
    for number, row in _parquet_rows(path):
        where = (path, number)
        reward = row.get("reward_model")
        if not isinstance(reward, Mapping) or "ground_truth" not in reward:
            raise BenchmarkError(path, number, "reward_model.ground_truth", "missing")
        extra = row.get("extra_info") or {}
        candidates = reward.get("candidate_answers")  # where a release keeps them: beside the ground truth ...
        if candidates is None and isinstance(extra, Mapping):
            candidates = extra.get("candidate_answers")  # ... or in extra_info
        agent = row.get("agent_name")
        if agent is not None and agent not in AGENT_PROTOCOLS:
            raise BenchmarkError(path, number, "agent_name", f"{agent!r} is none of {sorted(AGENT_PROTOCOLS)}")
        item_id = extra.get("task_id") or extra.get("id") or (
            f"{extra['index']}" if extra.get("index") is not None else f"row{number}")
        yield EvalItem(
            benchmark=name,
            item_id=str(item_id),
            question=_question_of(row.get("prompt"), (*where, "prompt")),
            ground_truth=_ground_truth(reward["ground_truth"], candidates, (*where, "reward_model.ground_truth")),
            images=_image_refs(row.get("images"), path.parent, (*where, "images")),
            protocol=AGENT_PROTOCOLS.get(agent) if agent else None,
            extra={k: extra[k] for k in ("task_path", "label", "modality", "hops", "structure_type") if k in extra},
        )


def _first(row: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, Any]:
    for key in keys:
        if row.get(key) is not None:
            return key, row[key]
    return keys[0], None


def tried(keys: tuple[str, ...]) -> str:
    return f"(tried {', '.join(keys)})"


_VQA_QUESTION = ("question", "query", "prompt")
_VQA_IMAGES = ("images", "image", "image_path", "image_paths", "image_url", "image_urls", "query_image")
_VQA_ANSWER = ("answer", "gold_answer", "ground_truth", "gt_answer")
_VQA_ALIASES = ("aliases", "answer_aliases", "candidate_answers", "answers", "alternative_gt_answers")
_VQA_ID = ("id", "qid", "question_id", "data_id", "sample_id")


def _items(name: str, path: Path, keys: dict[str, tuple[str, ...]],
           rows: Iterator[tuple[int, dict[str, Any]]] | None = None) -> Iterator[EvalItem]:
    for number, row in rows if rows is not None else _rows(path):
        qkey, question = _first(row, keys["question"])
        if not isinstance(question, str) or not question.strip():
            raise BenchmarkError(path, number, qkey, f"missing or not a non-empty string {tried(keys['question'])}")
        akey, answer = _first(row, keys["answer"])
        _, aliases = _first(row, keys["aliases"])
        ikey, images = _first(row, keys["images"])
        _, item_id = _first(row, keys["id"])
        protocol = row.get("protocol")
        if protocol is not None and protocol not in ("neos", "modalsearch"):
            raise BenchmarkError(path, number, "protocol", f"{protocol!r} is neither 'neos' nor 'modalsearch'")
        yield EvalItem(
            benchmark=name,
            item_id=str(item_id) if item_id is not None else f"line{number}",
            question=question.strip(),
            ground_truth=_ground_truth(answer, aliases, (path, number, akey), keys["answer"]),
            images=_image_refs(images, path.parent, (path, number, ikey)),
            protocol=protocol,
        )


@register_format("vqa_jsonl")
def load_vqa_jsonl(name: str, path: Path) -> Iterator[EvalItem]:
    keys = {"question": _VQA_QUESTION, "answer": _VQA_ANSWER, "aliases": _VQA_ALIASES, "images": _VQA_IMAGES,
            "id": _VQA_ID}
    return _items(name, path, keys)


GENERIC_KEYS = ("id", "question", "images", "answer", "aliases", "protocol")


@register_format("generic")
def load_generic(name: str, path: Path) -> Iterator[EvalItem]:
    """The documented minimal layout, exactly: a key it does not know (a misspelt ``image``) is an error, not a
    silently dropped field."""
    keys = {"question": ("question",), "answer": ("answer",), "aliases": ("aliases",), "images": ("images",),
            "id": ("id",)}

    def checked() -> Iterator[tuple[int, dict[str, Any]]]:
        for number, row in _rows(path):
            unknown = sorted(set(row) - set(GENERIC_KEYS))
            if unknown:
                raise BenchmarkError(path, number, unknown[0], f"unknown key(s) {', '.join(map(show, unknown))}; "
                                     f"generic knows {', '.join(GENERIC_KEYS)}")
            yield number, row

    return _items(name, path, keys, checked())
