"""Streaming the ``--kg`` JSON dump reader: entities/s, MB/s and peak RSS per published compression, against the
plain ``.json`` read in the same run (the baseline: what decompression costs on top of parsing).

The dump is the vendored real Wikidata sample (``data_gen/kg/samples``, provenance in its README: 1,704 entities of
a December 2014 dump, unchanged), written in the dump layout round after round to ``--mb`` megabytes of text; one
round (any ``--mb`` up to 16.9) is the sample itself. Repeats carry the same ids, so the kept graph stops growing
after the first round: RSS past it is the reader's streaming cost, and the kept graph's own cost is the peak RSS
over the process's RSS before the read (``kept``: the sample's 1,704 entities' labels and truthy triples). Each read
runs in its own process so its peak RSS is its own.

    PYTHONPATH=. .venv/bin/python bench/bench_kg_stream.py --mb 1      # the sample as published, once
    PYTHONPATH=. .venv/bin/python bench/bench_kg_stream.py              # ~100 MB of JSON text
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from neos_core.usage import OneLineParser, positive_float

SAMPLE = Path(__file__).parents[1] / "data_gen" / "kg" / "samples" / "wikidata-2014-sample.json.bz2"
COMPRESS = {".json": None, ".json.gz": gzip.open, ".json.bz2": bz2.open}


def real_entity_lines() -> list[str]:
    """The sample's entity lines, as stored (trailing commas and the array brackets dropped)."""
    with bz2.open(SAMPLE, "rt", encoding="utf-8") as text:
        return [s for s in (line.strip().rstrip(",") for line in text) if s not in ("", "[", "]")]


def write_dumps(folder: Path, megabytes: float) -> tuple[int, int]:
    """The repeated dump in every compression under ``folder``; returns (entities, bytes of text)."""
    lines = real_entity_lines()
    entities = size = 0
    handles = {suffix: (open_ or open)(folder / f"dump{suffix}", "wt", encoding="utf-8")
               for suffix, open_ in COMPRESS.items()}
    try:
        for h in handles.values():
            h.write("[\n")
        while size < megabytes * 1e6:
            for line in lines:
                text = ("" if entities == 0 else ",\n") + line
                for h in handles.values():
                    h.write(text)
                entities += 1
                size += len(text.encode())
        for h in handles.values():
            h.write("\n]\n")
    finally:
        for h in handles.values():
            h.close()
    return entities, size


def read_once(path: Path) -> None:
    """Child process: read ``path`` with the ``--kg`` reader, print seconds, peak RSS and what was kept."""
    from data_gen.neos.kg_world import read_graph

    before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # interpreter and imports
    start = time.perf_counter()
    graph = read_graph(path, progress=False)
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "peak_mib": peak_kib / 1024, "kept_mib": (peak_kib - before_kib) / 1024,
                      "triples": len(graph.triples) + len(graph.literals), "labels": len(graph.labels),
                      "malformed": graph.malformed}))


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python bench/bench_kg_stream.py", description="Entities/s and peak RSS of the --kg JSON "
                      "dump reader on the vendored real Wikidata sample repeated to a size, per compression, against "
                      "plain .json.")
    p.add_argument("--mb", type=positive_float, default=100.0, metavar="MB",
                   help="megabytes of JSON text to stream (default: 100)")
    p.add_argument("--read", type=Path, help=argparse.SUPPRESS)  # the child's job
    return p


def main() -> None:
    args = parser().parse_args()
    if args.read:
        read_once(args.read)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        entities, size = write_dumps(folder, args.mb)
        print(f"dump: {entities:,} real entity lines ({len(real_entity_lines())} distinct), {size / 1e6:.1f} MB "
              f"of text, {size / entities / 1e3:.1f} kB/entity; written in {time.perf_counter() - start:.1f}s")
        baseline = None
        for suffix in COMPRESS:
            path = folder / f"dump{suffix}"
            out = subprocess.run([sys.executable, __file__, "--read", str(path)], check=True, capture_output=True,
                                 text=True).stdout
            r = json.loads(out.splitlines()[-1])
            rate = entities / r["seconds"]
            baseline = baseline or rate
            print(f"{suffix:10s} {path.stat().st_size / 1e6:7.1f} MB stored: {rate:9,.0f} entities/s, "
                  f"{size / 1e6 / r['seconds']:6.1f} MB/s of text, peak RSS {r['peak_mib']:.0f} MiB "
                  f"({r['kept_mib']:.1f} over the process before the read), {r['triples']:,} triples and "
                  f"{r['labels']:,} labels kept, {r['malformed']} malformed; {rate / baseline:.2f}x plain .json")


if __name__ == "__main__":
    main()
