import pytest

from data_gen.world.__main__ import main


def test_summary_prints_counts_licenses_facts_and_hash(small_world, capsys):
    assert main(["summary", str(small_world)]) == 0
    out = capsys.readouterr().out
    assert "France — capital — Paris" in out and "Japan — capital — Tokyo" in out
    assert "world-countries 5.1.0 (npm): ODbL-1.0" in out and "content hash " in out


def test_bad_arguments_fail_clearly(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["build", "--size", "huge", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "invalid choice: 'huge'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["build", "--size", "small", "--out", str(tmp_path), "--adapters", "countries,nope"])
    assert "unknown ['nope']" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["summary", str(tmp_path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "error: WORLD: " in err and "manifest.json is missing" in err
    assert err.count("\n") == 1
