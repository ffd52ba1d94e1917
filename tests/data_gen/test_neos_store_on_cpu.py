"""The append-only results log: a torn last line is dropped, the done-set skips finished work, errors are retried."""

import pytest

from data_gen.neos.schema import Outcome
from data_gen.neos.store import ResultLog


def test_restart_after_a_torn_write_keeps_every_full_record_once(tmp_path):
    path = tmp_path / "results.jsonl"
    log = ResultLog(path)
    log.append(Outcome(key="a", status="rejected", filter="grounding"))
    log.append(Outcome(key="b", status="error", detail="timeout"))
    log.close()
    with path.open("a") as fh:
        fh.write('{"key": "c", "status": "verif')  # the crash
    log = ResultLog(path)
    assert log.done == {"a"}  # b was an infrastructure error: retried; c was never complete
    with pytest.raises(ValueError):
        log.append(Outcome(key="a", status="rejected"))
    log.append(Outcome(key="b", status="rejected", filter="expert"))
    log.append(Outcome(key="c", status="seed_done"))
    log.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and all(line.endswith("}") for line in lines)
    latest = {o.key: o.status for o in ResultLog(path).outcomes()}
    assert latest == {"a": "rejected", "b": "rejected", "c": "seed_done"}
