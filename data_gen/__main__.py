"""``python -m data_gen <command>``: ``neos`` (Neos task synthesis, see ``data_gen.neos.cli``), ``modalsearch``
(ModalSearch-Pipeline, see ``data_gen.modalsearch.cli``) or ``world`` (build/inspect the offline world, forwarded
to ``python -m data_gen.world``)."""

from __future__ import annotations

import argparse
import sys

from neos_core.usage import OneLineParser


def parser() -> argparse.ArgumentParser:
    from data_gen.modalsearch import flags as modalsearch_flags
    from data_gen.neos import flags as neos_flags

    p = OneLineParser(prog="python -m data_gen", description="Data generation: synthesize Neos or ModalSearch "
                      "training and benchmark tasks from the offline world, or build and inspect that world.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser, metavar="COMMAND")
    neos_flags.parser(sub.add_parser("neos", help="Neos evidence-dependent task synthesis",
                                     description=neos_flags.DESCRIPTION))
    modalsearch_flags.parser(sub.add_parser("modalsearch", help="ModalSearch-Pipeline: interleaved graph, paths, "
                                            "questions", description=modalsearch_flags.DESCRIPTION))
    sub.add_parser("world", help="build or inspect the offline world (python -m data_gen world --help)",
                   description="Forwarded to python -m data_gen.world.", add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["world"]:
        from data_gen.world.__main__ import main as world_main

        return world_main(argv[1:])
    args = parser().parse_args(argv)
    from data_gen.common.cli import input_error
    from data_gen.modalsearch import cli as modalsearch_cli
    from data_gen.neos import cli as neos_cli
    from neos_core.results import ResultLogError

    if args.out.exists() and not args.out.is_dir():  # before the world is loaded or a tool server started
        return input_error(args.command, f"--out: {args.out} is a file, not a directory")
    try:
        return {"neos": neos_cli.main, "modalsearch": modalsearch_cli.main}[args.command](args)
    except ResultLogError as err:  # a resumed --out whose results.jsonl has a bad line: nothing was appended
        return input_error(args.command, f"--out: {err}")


if __name__ == "__main__":
    sys.exit(main())
