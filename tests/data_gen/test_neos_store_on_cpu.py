"""The append-only results log: a torn last line is dropped, the done-set skips finished work, errors are retried;
a bad complete line is one error naming the file and line."""

import pytest

from data_gen.neos.store import ResultLog
from neos_core.neos_tasks import Outcome
from neos_core.results import ResultLogError, latest_per_key, read_records


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


def _log_with_a_cut_line(path):
    log = ResultLog(path)
    log.append(Outcome(key="a", status="rejected", filter="grounding"))
    log.close()
    with path.open("a") as fh:
        fh.write('{"key": "b", "status": "verif\n')  # a line cut in the middle, then the file went on
        fh.write(Outcome(key="c", status="seed_done").model_dump_json() + "\n")
    return path.read_bytes()


def test_a_line_cut_in_the_middle_is_one_error_naming_the_file_and_line_and_nothing_is_appended(tmp_path):
    path = tmp_path / "results.jsonl"
    before = _log_with_a_cut_line(path)
    for open_log in (lambda: ResultLog(path), lambda: list(read_records(path, Outcome))):
        with pytest.raises(ResultLogError) as err:
            open_log()
        message = str(err.value)
        assert message.startswith(f"{path}:2: not a valid result record (Invalid JSON") and "\n" not in message
        assert "delete that line and rerun" in message
    assert path.read_bytes() == before


def test_a_record_that_breaks_the_schema_names_its_field(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"key": "a", "status": "finished"}\n')
    with pytest.raises(ResultLogError, match=r"results.jsonl:1: not a valid result record \(status: Input should be"):
        ResultLog(path)


def test_the_reader_skips_a_torn_last_line_says_so_and_leaves_the_file_as_it_is(tmp_path, caplog):
    path = tmp_path / "results.jsonl"
    path.write_text(Outcome(key="a", status="seed_done").model_dump_json() + '\n{"key": "b", "sta')
    before = path.read_bytes()
    assert [o.key for o in latest_per_key(read_records(path, Outcome))] == ["a"]
    assert path.read_bytes() == before
    assert [r.getMessage() for r in caplog.records] == [f"{path}:2: a line cut mid-write (a crash while writing) "
                                                        "is skipped"]


def test_resuming_neos_into_an_out_with_a_cut_line_exits_2_with_one_line(small_world, tmp_path, capsys):
    from data_gen.__main__ import main

    before = _log_with_a_cut_line(tmp_path / "results.jsonl")
    assert main(["neos", "--world", str(small_world), "--out", str(tmp_path), "--limit", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"python -m data_gen neos: error: --out: {tmp_path / 'results.jsonl'}:2: not a valid "
                              "result record")
    assert (tmp_path / "results.jsonl").read_bytes() == before
