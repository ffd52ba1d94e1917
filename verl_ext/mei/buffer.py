"""The retained-call buffer between MEI updates, and the co-evolution schedule (Neos §3.5), crash-safe for resume.

Layout of a buffer directory::

    calls.jsonl   every retained call ever added, one JSON line each, fsynced per record (append-only)
    blobs/        the images those calls' messages name (content-addressed, copied from the MEI log's store)
    state.json    {mei_version, mei_updates, policy_updates (since the last MEI update), consumed_offset, checkpoint,
                   run_id, skipped_updates (MEI updates skipped in a row)}

The calls since the last MEI update are the lines after ``consumed_offset``. ``state.json`` is replaced atomically
(temp file, fsync, rename, fsync of the directory), so it is always one whole state. A kill -9 loses at most the call
being written (its torn line is skipped on read and counted); a crash between an MEI update and the state write makes
the resumed run train on the same calls again rather than lose them. Blobs are written before the line naming them.

Schedule: the trainer calls :meth:`MEIBuffer.record_policy_update` after each policy update, and when
:meth:`due(K) <MEIBuffer.due>` holds it trains MEI on :meth:`pending` and calls :meth:`mark_mei_update` with the
pending view's ``end_offset``, so calls added while MEI trained stay pending for the next update.

Versions: the n-th trained MEI is ``v<n>-<run_id>`` (:meth:`MEIBuffer.next_version`), ``run_id`` drawn at random when
the buffer is created and kept on resume. Versions key the tool server's result cache (``WebVisit@mei:<version>``),
which two runs may share (a disk, directory or Redis tier): a bare ``v1`` of run B would be served run A's ``v1``
answers.
"""

from __future__ import annotations

import os
import secrets
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from neos_core.entry_lock import hold_or_none
from tool_server.mei.jsonl import JsonlAppender, iter_jsonl, write_atomic
from tool_server.mei.log import BLOB_URL_PREFIX, BlobStore, MEIRecord
from verl_ext.mei.selection import RetainedCall


class BufferedCall(BaseModel):
    """One retained call as the buffer keeps it: the logged call (input messages, target output) and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    call: MEIRecord
    reason: Literal["success", "productive", "corrective"]
    trajectory_session: str | None
    turn: int


class BufferState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mei_version: str
    mei_updates: int = Field(default=0, ge=0)
    policy_updates: int = Field(default=0, ge=0)  # since the last MEI update
    consumed_offset: int = Field(default=0, ge=0)  # byte offset in calls.jsonl of the first pending call
    checkpoint: str | None = None  # the HF directory of the current MEI version, once one was trained
    run_id: str = Field(default_factory=lambda: secrets.token_hex(4))  # makes this run's version names its own
    skipped_updates: int = Field(default=0, ge=0)  # due MEI updates skipped in a row (no usable call)


@dataclass(frozen=True, slots=True)
class Pending:
    calls: list[BufferedCall]
    end_offset: int  # pass to mark_mei_update: everything before it was trained on
    torn_lines: int  # lines after consumed_offset that were torn or invalid (skipped)


def _blob_digests(messages: list[dict]) -> list[str]:
    return [
        part["image_url"]["url"][len(BLOB_URL_PREFIX):]
        for m in messages if isinstance(m.get("content"), list)
        for part in m["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
        and part["image_url"]["url"].startswith(BLOB_URL_PREFIX)
    ]


class BufferBusyError(RuntimeError):
    """Another process has the buffer directory open: two runs would interleave their calls and states."""


class MEIBuffer:
    """One writer process per directory (the trainer), enforced by an exclusive lock on ``<dir>/.lock`` held while
    open; opening it resumes from ``state.json``."""

    def __init__(self, root: str | os.PathLike[str], *, initial_version: str = "v0") -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = hold_or_none(self.root / ".lock")
        if self._lock is None:
            raise BufferBusyError(f"MEI buffer {self.root} is in use by another process (another run or a run not yet "
                                  "exited); give this run its own trainer.v1.neos.mei.buffer_dir")
        self._state_path = self.root / "state.json"
        if self._state_path.exists():
            self.state = BufferState.model_validate_json(self._state_path.read_bytes())
        else:
            self.state = BufferState(mei_version=initial_version)
            self._save()
        self.blobs = BlobStore(self.root / "blobs", durable=True)
        self._calls_path = self.root / "calls.jsonl"
        self._out = JsonlAppender(self._calls_path, fsync_every=1)
        self._pending_ids = {c.call.call_id for c in self.pending().calls}
        self.skipped: Counter[str] = Counter()  # since this process opened the buffer

    def _save(self) -> None:
        write_atomic(self._state_path, self.state.model_dump_json(indent=1).encode(), durable=True)

    def add(self, retained: Iterable[RetainedCall], source_blobs: BlobStore) -> int:
        """Append retained calls, copying their images from ``source_blobs`` (the MEI log's store); returns how many
        were appended. A call already pending, or one whose image is missing or corrupt there, is skipped and
        counted in ``self.skipped`` (``duplicate``, ``unavailable``) for the metrics."""
        added = 0
        for r in retained:
            if r.call.call_id in self._pending_ids:
                self.skipped["duplicate"] += 1
                continue
            try:
                images = [source_blobs.get(d) for d in _blob_digests(r.call.messages or [])]
            except (OSError, ValueError):
                self.skipped["unavailable"] += 1
                continue
            for data in images:
                self.blobs.put(data)
            item = BufferedCall(call=r.call, reason=r.reason, trajectory_session=r.trajectory_session, turn=r.turn)
            self._out.append(item.model_dump(mode="json"))
            self._pending_ids.add(r.call.call_id)
            added += 1
        return added

    def pending(self) -> Pending:
        """The calls retained since the last MEI update, in the order they were added."""
        calls: list[BufferedCall] = []
        end, torn = self.state.consumed_offset, 0
        if self._calls_path.exists():
            for line in iter_jsonl(self._calls_path, offset=self.state.consumed_offset):
                end = line.end
                try:
                    if line.value is None:
                        raise ValueError("torn or not JSON")
                    calls.append(BufferedCall.model_validate(line.value))
                except (ValueError, ValidationError):
                    torn += 1
        return Pending(calls, end, torn)

    def record_policy_update(self) -> None:
        self.state.policy_updates += 1
        self._save()

    def due(self, k: int) -> bool:
        """An MEI update is due: ``k`` policy updates since the last one (Neos: K = 10)."""
        if k < 1:
            raise ValueError(f"the MEI update interval K must be >= 1, got {k}")
        return self.state.policy_updates >= k

    def next_version(self) -> str:
        """The name of the next trained MEI: unique across runs, as it keys shared result caches."""
        return f"v{self.state.mei_updates + 1}-{self.state.run_id}"

    def mark_mei_update(self, version: str, *, end_offset: int, checkpoint: str | None = None) -> None:
        """MEI was trained on the calls before ``end_offset`` and ``version`` (at ``checkpoint``) is now current."""
        if not self.state.consumed_offset <= end_offset <= self._out.size():
            raise ValueError(f"end_offset {end_offset} outside [{self.state.consumed_offset}, {self._out.size()}]")
        self.state = BufferState(mei_version=version, mei_updates=self.state.mei_updates + 1, policy_updates=0,
                                 consumed_offset=end_offset, checkpoint=checkpoint, run_id=self.state.run_id)
        self._save()
        self._pending_ids = {c.call.call_id for c in self.pending().calls}

    def skip_update(self, *, end_offset: int) -> None:
        """A due MEI update had no usable call: the calls before ``end_offset`` are dropped (consumed without
        training, so they are not tokenised again at every later step) and the K-update count starts over."""
        if not self.state.consumed_offset <= end_offset <= self._out.size():
            raise ValueError(f"end_offset {end_offset} outside [{self.state.consumed_offset}, {self._out.size()}]")
        self.state = self.state.model_copy(update={"policy_updates": 0, "consumed_offset": end_offset,
                                                   "skipped_updates": self.state.skipped_updates + 1})
        self._save()
        self._pending_ids = {c.call.call_id for c in self.pending().calls}

    def close(self) -> None:
        self._out.close()
        self._lock.close()

