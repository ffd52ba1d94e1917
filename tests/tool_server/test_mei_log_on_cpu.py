"""MEILog: one line per record, crash-torn lines skipped and reported, a restarted writer never glues records."""

import hashlib

import pytest

from tool_server.mei import MEIConfig, build_interface
from tool_server.mei.log import BlobStore, MEILog
from tool_server.mei.schema import MEIContext, PageView

CTX = MEIContext(session_id="s", turn=1, tool="WebVisit")


def write(log: MEILog, n: int) -> list[str]:
    return [log.append(ctx=CTX, method="web_visit", mei_version="v", outcome="valid", latency_s=0.01,
                       input={"goal": f"g{i}"}, output={"i": i}) for i in range(n)]


def test_records_round_trip_one_line_each(tmp_path):
    log = MEILog(tmp_path / "a" / "mei.jsonl", fsync_every=1)
    ids = write(log, 3)
    log.close()
    assert (tmp_path / "a" / "mei.jsonl").read_bytes().count(b"\n") == 3
    res = MEILog.read(tmp_path / "a" / "mei.jsonl")
    assert [r.call_id for r in res.records] == ids and res.skipped_lines == []
    assert [r.output["i"] for r in res.records] == [0, 1, 2]


def test_torn_tail_is_reported_and_next_writer_starts_a_new_line(tmp_path):
    path = tmp_path / "mei.jsonl"
    log = MEILog(path)
    write(log, 2)
    log.close()
    with open(path, "ab") as f:  # a crash in the middle of a record
        f.write(b'{"call_id": "torn", "ts": 1.0, "sess')
    res = MEILog.read(path)
    assert len(res.records) == 2 and res.skipped_lines == [3]
    log = MEILog(path)
    [new_id] = write(log, 1)
    log.close()
    res = MEILog.read(path)
    assert [r.call_id for r in res.records][-1] == new_id and len(res.records) == 3
    assert res.skipped_lines == [3]


def test_negative_fsync_policy_is_refused(tmp_path):
    with pytest.raises(ValueError):
        MEILog(tmp_path / "x.jsonl", fsync_every=-1)


async def test_extractive_interface_logs_every_call(tmp_path):
    mei = build_interface(MEIConfig(log_path=tmp_path / "mei.jsonl", ocr=False))
    page = PageView(url="https://neos-world.invalid/wiki/X", title="X", text="Lyon is a city in France.")
    calls = [await mei.web_visit(goal="city in France", page=page, ctx=CTX) for _ in range(2)]
    await mei.close()
    assert all(c.outcome == "extractive" and c.version == "extractive-1" for c in calls)
    recs = MEILog.read(tmp_path / "mei.jsonl").records
    assert [r.call_id for r in recs] == [c.call_id for c in calls]
    assert recs[0].input["page"]["text_chars"] == len(page.text)
    assert mei.counters()["calls"] == 2 and mei.counters()["extractive"] == 2


def test_blob_store_is_content_addressed_and_refuses_bad_names(tmp_path):
    blobs = BlobStore(tmp_path / "b")
    digest = blobs.put(b"pixels")
    assert blobs.put(b"pixels") == digest == hashlib.sha256(b"pixels").hexdigest()
    assert blobs.get(digest) == b"pixels"
    (tmp_path / "b" / digest[:2] / digest).write_bytes(b"other")
    with pytest.raises(ValueError, match="corrupt"):
        blobs.get(digest)
    with pytest.raises(ValueError, match="sha256"):
        blobs.get("../../etc/passwd")
    with pytest.raises(FileNotFoundError):
        blobs.get("0" * 64)
