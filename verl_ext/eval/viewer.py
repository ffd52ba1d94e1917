"""A static HTML trajectory viewer: one file that opens from the file system, no server, no network.

Per trajectory: the question and its images, the reference and the response, the judge's verdict and reasoning, then
every turn: the policy's text, its call (tool and arguments), the observation, the images the call loaded, the
turn's outcome and error class, and its credit label when the trajectory carries Neos' turn credit
(``extra_fields["neos_credit"]``). Images are linked by relative path (the run's ``images/``), so the page stays
small. A few lines of script count the images that decoded into ``<body data-images-loaded>`` (for tests and for a
reader to see missing files at a glance).
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_ext.credit.labels import CREDIT_KEY, CreditLabels
from verl_ext.credit.params import CreditParams
from verl_ext.eval.benchmarks import json_lines
from verl_ext.rollout.record import RECORD_KEY, TRAJECTORY_JSON, TrajectoryRecord


@dataclass
class ViewerEpisode:
    title: str
    record: TrajectoryRecord
    correct: bool | None
    reference: str = ""
    response: str = ""
    verdict: dict[str, Any] | None = None
    image_files: dict[str, str] = field(default_factory=dict)  # register ref -> file under the images root
    credit: list[str] | None = None  # credit type per turn

    @classmethod
    def from_eval(cls, r: Any) -> ViewerEpisode:
        gt = r.ground_truth
        reference = gt["target"] + (f" (also: {', '.join(gt['aliases'])})" if gt.get("aliases") else "")
        return cls(f"{r.benchmark} / {r.item_id} / run {r.run}", TrajectoryRecord.model_validate(r.trajectory),
                   r.correct, reference, r.response, r.verdict, r.image_files)

    @classmethod
    def from_export(cls, path: Path) -> Iterator[ViewerEpisode]:
        """Trajectories exported during training (JSONL): records, objects holding one under ``neos_trajectory``, or
        lines of verl's validation dump written with ``reward_kwargs.dump_trajectories`` (``neos_trajectory_json``);
        a bad line raises ``ValueError`` naming file and line."""
        for number, row in json_lines(path):
            try:
                record = TrajectoryRecord.model_validate_json(row[TRAJECTORY_JSON]) if TRAJECTORY_JSON in row \
                    else TrajectoryRecord.model_validate(row.get(RECORD_KEY, row))
                labels = row.get(CREDIT_KEY)
                credit = CreditLabels.model_validate(labels) if labels else None
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not a trajectory record ({str(exc).splitlines()[0]})") from None
            correct = row.get("correct", row.get("acc"))
            yield cls(f"{path.name}:{number}", record, None if correct is None else bool(correct),
                      response=record.final_answer or "",
                      credit=credit.turn_types(CreditParams()) if credit and credit.assessed else None)


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1100px;color:#222}
.ep{border:1px solid #ccc;border-radius:6px;padding:.8em 1em;margin:1em 0}
.ok{color:#2d7d32;font-weight:bold}.bad{color:#c0392b;font-weight:bold}.unk{color:#777}
.turn{border-left:4px solid #bbb;margin:.6em 0;padding:.3em .8em;background:#fafafa}
.turn.call_error,.turn.no_action{border-color:#c0392b}.turn.answer{border-color:#2d7d32}
pre{white-space:pre-wrap;word-break:break-word;background:#f1f1f1;padding:.4em;margin:.3em 0;max-height:22em;
overflow:auto}
img{max-height:220px;max-width:320px;border:1px solid #999;margin:.2em}
.label{display:inline-block;padding:0 .5em;border-radius:3px;background:#ddd;font-size:.85em}
.productive{background:#c8e6c9}.causal_error{background:#f5b7b1}.re_derailment{background:#d7bde2}
.downstream{background:#fad7a0}.recovery{background:#aed6f1}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:2px 8px;font-size:.9em}
"""
_SCRIPT = """window.addEventListener('load',function(){var n=0,m=0;document.querySelectorAll('img').forEach(
function(i){if(i.complete&&i.naturalWidth>0){n++}else{m++;i.alt='missing: '+i.getAttribute('src')}});
document.body.dataset.imagesLoaded=n;document.body.dataset.imagesMissing=m;});"""


def _e(text: Any) -> str:
    return html.escape(str(text))


def _verdict(correct: bool | None) -> str:
    if correct is None:
        return '<span class="unk">unjudged</span>'
    return '<span class="ok">correct</span>' if correct else '<span class="bad">incorrect</span>'


def _img(ref: str, ep: ViewerEpisode, base: str | None) -> str:
    file = ep.image_files.get(ref)
    if base is None or file is None:
        return f'<span class="label">{_e(ref)} (no pixels kept)</span>'
    return f'<figure style="display:inline-block"><img src="{_e(base + "/" + file)}" alt="{_e(ref)}">' \
           f'<figcaption>{_e(ref)}</figcaption></figure>'


def _episode(i: int, ep: ViewerEpisode, base: str | None) -> str:
    r = ep.record
    questions = [im.ref for im in r.images if im.source == "question"]
    parts = [f'<section class="ep" id="ep{i}"><h2>{_e(ep.title)} — {_verdict(ep.correct)}</h2>',
             f"<p><b>Question</b> ({r.protocol}):</p><pre class=question>{_e(r.question)}</pre>",
             "<div class=qimages>" + "".join(_img(ref, ep, base) for ref in questions) + "</div>"]
    if ep.reference:
        parts.append(f"<p><b>Reference:</b> {_e(ep.reference)}</p>")
    parts.append(f"<p><b>Response:</b> {_e(ep.response or '(no answer)')} · ended by "
                 f"<code>{_e(r.termination_reason)}</code></p>")
    if ep.verdict:
        parts.append(f"<p><b>Judge</b> ({_e(ep.verdict.get('source'))}): {_e(ep.verdict.get('reasoning') or '')}"
                     f"{' — ' + _e(ep.verdict['error']) if ep.verdict.get('error') else ''}</p>")
    for t in r.turns:
        label = ""
        if ep.credit and t.index < len(ep.credit):
            label = f' <span class="label {ep.credit[t.index]}">{_e(ep.credit[t.index])}</span>'
        error = f" · {_e(t.error_class)}/{_e(t.error_type)}" if t.error_class else ""
        parts.append(f'<div class="turn {t.outcome}" data-turn="{t.index}"><b>Turn {t.index + 1}</b> '
                     f"<code>{t.outcome}</code>{error}{label}<pre class=text>{_e(t.text)}</pre>")
        for c in t.calls:
            parts.append(f"<p>Call <b>{_e(c.tool_name)}</b> ({c.latency_s:.2f} s{', cached' if c.cached else ''})"
                         f"</p><pre class=args>{_e(json.dumps(c.arguments, ensure_ascii=False, indent=1))}</pre>"
                         f"<p>Observation:</p><pre class=obs>{_e(c.observation)}</pre>")
            if c.images_added:
                parts.append("<div class=loaded>" + "".join(_img(ref, ep, base) for ref in c.images_added) + "</div>")
        parts.append("</div>")
    parts.append("</section>")
    return "\n".join(parts)


def write_viewer(episodes: list[ViewerEpisode], path: Path, images_root: Path | None) -> Path:
    """Writes ``path`` (atomically); image links are relative to it."""
    base = os.path.relpath(images_root, path.parent) if images_root is not None else None
    index = ["<table><tr><th>#</th><th>trajectory</th><th>verdict</th><th>turns</th><th>ended by</th></tr>"]
    for i, ep in enumerate(episodes):
        index.append(f'<tr><td>{i}</td><td><a href="#ep{i}">{_e(ep.title)}</a></td><td>{_verdict(ep.correct)}</td>'
                     f"<td>{len(ep.record.turns)}</td><td>{_e(ep.record.termination_reason)}</td></tr>")
    index.append("</table>")
    body = "\n".join(_episode(i, ep, base) for i, ep in enumerate(episodes))
    page = (f"<!doctype html><html><head><meta charset=utf-8><title>Trajectories</title><style>{_CSS}</style>"
            f"<script>{_SCRIPT}</script></head><body><h1>Trajectories ({len(episodes)})</h1>"
            + "\n".join(index) + body + "</body></html>")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return path
