"""The README's demo tour: a real server subprocess, one scripted session, every scripted tool answers 200."""

from tool_server import tour


def test_tour_calls_every_scripted_tool_and_registers_fetch_and_crop(small_world, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert tour.main(["--world", str(small_world)]) == 0
    assert list(tmp_path.iterdir()) == []  # no ./mei.jsonl left where it ran (there was, before 2026-12-06)
    out = capsys.readouterr().out
    assert "question image registered as ['img_1']" in out
    for name, _ in tour.SCRIPT:
        assert f"== {name}(" in out, name
    assert "HTTP 4" not in out and "HTTP 5" not in out
    assert "img_2 320x240" in out  # the flag, in request order after the question image
    assert "img_3 109x240" in out  # 0..340 of 1000 across 320 px wide -> 108.8 -> 109 px
    assert "[visual_match] https://neos-world.invalid/media/map_fra.png" in out  # the question image itself


def test_tour_refuses_a_directory_that_is_no_world(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        tour.main(["--world", str(tmp_path)])
    assert "is not a built world" in capsys.readouterr().err
