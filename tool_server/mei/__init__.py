"""Multimodal Evidence Interface (Neos §3.2): turns raw page/image results into goal-conditioned observations.

Use::

    mei = build_interface(MEIConfig(log_path="runs/mei.jsonl"))            # extractive, no model
    mei = build_interface(MEIConfig(endpoint="http://mei:8000/v1", model="neos-mei", log_path=...))
    call = await mei.web_visit(goal=..., page=PageView(...), ctx=MEIContext(session_id=..., turn=3, tool="WebVisit"))
    call.evidence    # WebVisitEvidence (validated, strict keys)
    call.call_id     # the id of this call's record in the MEI log
    call.version     # the version that served it: a model server's reported ``model`` (our MEI server: its checkpoint)
    call.outcome     # extractive | valid | repaired | retried | fallback

Tools return ``{"call_id": call.call_id, "version": call.version, "outcome": call.outcome}`` per MEI call to their
clients. Each call gets its own :class:`~tool_server.mei.schema.MEICall` (no per-session "last call" state) because
one tool call can run several MEI calls concurrently under the same context. ``mei.counters()`` gives ``calls``, a
count per outcome, ``error``, ``version_mismatch`` (answers refused for a session fixed to another version),
``activations``, and attempt-level ``timeout`` / ``http_error`` / ``invalid`` plus ``ocr_calls`` (engine runs),
``ocr_disk_hits`` and ``ocr_disk_errors`` (the OCR disk cache's). ``mei.version`` is
the active version and ``mei.activate(v)`` changes it (see :mod:`.interface`). ``await mei.close()`` on shutdown.

A model endpoint's bearer token, if it needs one, is read from the environment variable named by
``api_key_env`` (default ``NEOS_MEI_API_KEY``); unset means no ``Authorization`` header.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .client import ModelMEI
from .extractive import ExtractiveMEI
from .interface import LoggedInterface
from .log import MEILog
from .ocr import OCR
from .schema import EvidenceInterface, MEICall, MEIContext

__all__ = ["MEIConfig", "build_interface", "EvidenceInterface", "MEICall", "MEIContext"]


class MEIConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str | None = None  # OpenAI-compatible base URL (".../v1"); None -> extractive interface
    model: str = "mei"
    # The active version until a checkpoint is activated (POST /admin/mei_version); None: the first version the model
    # server reports in its answers' ``model`` field (our MEI server: its checkpoint version).
    version: str | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    retry_backoff_s: float = Field(default=0.5, ge=0)
    max_tokens: int = Field(default=2048, gt=0)
    max_page_chars: int = Field(default=60_000, gt=0)
    json_mode: bool = True  # send response_format={"type": "json_object"}
    api_key_env: str = "NEOS_MEI_API_KEY"
    log_path: Path
    fsync_every: int = Field(default=0, ge=0)
    ocr: bool = True  # extractive interface and fallback: read text in images when pixels are given
    ocr_cache_dir: Path | None = None  # OCR texts kept on disk here too, by image hash (default: memory only)


def build_interface(config: MEIConfig) -> LoggedInterface:
    extractive = ExtractiveMEI(ocr=OCR(cache_dir=config.ocr_cache_dir) if config.ocr else None)
    log = MEILog(config.log_path, fsync_every=config.fsync_every)
    if config.endpoint is None:
        return LoggedInterface(extractive, log, version=config.version or extractive.version)
    producer = ModelMEI(
        endpoint=config.endpoint,
        model=config.model,
        version=config.version or config.model,
        fallback=extractive,
        timeout_s=config.timeout_s,
        max_retries=config.max_retries,
        retry_backoff_s=config.retry_backoff_s,
        max_tokens=config.max_tokens,
        max_page_chars=config.max_page_chars,
        api_key=os.environ.get(config.api_key_env) or None,
        json_mode=config.json_mode,
    )
    return LoggedInterface(producer, log, version=config.version, model=True)
