"""MEI buffer: pending calls since the last MEI update, the K schedule, resume from state, and kill -9 mid-write."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tool_server.mei.log import BLOB_URL_PREFIX, BlobStore
from verl_ext.mei.buffer import MEIBuffer
from verl_ext.mei.selection import RetainedCall

from .conftest import mei_record

REPO = Path(__file__).resolve().parents[2]


def retained(call_id: str, messages=None) -> RetainedCall:
    rec = mei_record(call_id) if messages is None else mei_record(call_id, messages=messages)
    return RetainedCall(rec, "success", "s", 0)


def test_schedule_pending_and_resume(tmp_path):
    src = BlobStore(tmp_path / "log-blobs")
    digest = src.put(b"PNG-BYTES")
    img_msgs = [{"role": "user", "content": [{"type": "text", "text": "look"},
                                              {"type": "image_url", "image_url": {"url": BLOB_URL_PREFIX + digest}}]}]
    buf = MEIBuffer(tmp_path / "buf", initial_version="v0")
    gone = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": BLOB_URL_PREFIX + "0" * 64}}]}]
    assert buf.add([retained("a"), retained("b", img_msgs), retained("a"), retained("x", gone)], src) == 2
    assert buf.skipped == {"duplicate": 1, "unavailable": 1}  # "a" twice: once; "x" lost its image
    assert buf.blobs.get(digest) == b"PNG-BYTES"  # copied: the buffer does not depend on the MEI log's store
    for _ in range(2):
        buf.record_policy_update()
    assert (buf.due(2), buf.due(3)) == (True, False)
    pending = buf.pending()
    assert [c.call.call_id for c in pending.calls] == ["a", "b"] and pending.torn_lines == 0
    buf.add([retained("c")], src)  # arrives while MEI trains on a, b: stays pending
    buf.mark_mei_update("v1", end_offset=pending.end_offset, checkpoint="/ckpt/v1")
    buf.close()

    again = MEIBuffer(tmp_path / "buf", initial_version="ignored-on-resume")
    assert (again.state.mei_version, again.state.mei_updates, again.state.policy_updates) == ("v1", 1, 0)
    assert again.state.checkpoint == "/ckpt/v1" and not again.due(1)
    assert [c.call.call_id for c in again.pending().calls] == ["c"]
    assert again.add([retained("a")], src) == 1  # consumed calls may be retained again in a later round
    with pytest.raises(ValueError):
        again.mark_mei_update("v2", end_offset=0)  # before the consumed offset
    with pytest.raises(ValueError):
        again.due(0)
    again.close()


def test_torn_tail_is_skipped_and_the_next_record_is_intact(tmp_path):
    buf = MEIBuffer(tmp_path / "buf")
    buf.add([retained("a")], BlobStore(tmp_path / "x"))
    buf.close()
    with open(tmp_path / "buf" / "calls.jsonl", "ab") as f:
        f.write(b'{"call": {"call_id": "torn", "ts"')
    buf = MEIBuffer(tmp_path / "buf")
    buf.add([retained("b")], BlobStore(tmp_path / "x"))
    pending = buf.pending()
    assert [c.call.call_id for c in pending.calls] == ["a", "b"] and pending.torn_lines == 1
    buf.close()


CHILD = textwrap.dedent("""
    import sys
    from tool_server.mei.log import BlobStore, MEIRecord
    from verl_ext.mei.buffer import MEIBuffer
    from verl_ext.mei.selection import RetainedCall
    buf = MEIBuffer(sys.argv[1])
    blobs = BlobStore(sys.argv[1] + "-src")
    page = "x" * 400_000  # large records: a kill lands inside a write more often
    i = 0
    while True:
        rec = MEIRecord(call_id=f"c{i:06d}", ts=0.0, session_id="s", turn=0, tool="WebVisit", method="web_visit",
                        mei_version="v0", outcome="valid", latency_s=0.0, input={}, output={"i": i},
                        messages=[{"role": "user", "content": page}])
        buf.add([RetainedCall(rec, "success", "s", 0)], blobs)
        print(i, flush=True)  # acknowledged: fsynced
        i += 1
""")


def test_sigkill_mid_write_loses_at_most_the_record_being_written(tmp_path):
    root = tmp_path / "buf"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE, env=env, text=True)
    acknowledged = -1
    while acknowledged < 25:
        line = child.stdout.readline()
        assert line, "the writer died before writing 25 records"
        acknowledged = int(line)
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()

    buf = MEIBuffer(root)
    pending = buf.pending()
    ids = [c.call.call_id for c in pending.calls]
    assert ids == [f"c{i:06d}" for i in range(len(ids))]  # an unbroken prefix: nothing lost in the middle
    assert len(ids) >= acknowledged + 1  # every acknowledged (fsynced) record survived
    assert pending.torn_lines <= 1  # at most the record being written
    buf.add([retained("after")], BlobStore(tmp_path / "x"))
    assert buf.pending().calls[-1].call.call_id == "after"  # a resumed writer never glues onto a torn line
    buf.close()


def test_a_second_process_cannot_open_a_buffer_in_use(tmp_path):
    """Two runs given one buffer directory would interleave calls.jsonl and overwrite each other's state.json."""
    buf = MEIBuffer(tmp_path / "buf")
    opener = ("import sys; from verl_ext.mei.buffer import MEIBuffer, BufferBusyError\n"
              "try:\n    MEIBuffer(sys.argv[1]).close()\nexcept BufferBusyError as e:\n    sys.exit(str(e))")
    cmd = [sys.executable, "-c", opener, str(tmp_path / "buf")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    busy = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert busy.returncode == 1 and "in use by another process" in busy.stderr
    assert "trainer.v1.neos.mei.buffer_dir" in busy.stderr
    buf.close()
    assert subprocess.run(cmd, env=env).returncode == 0  # released with the first opener
