"""What every command line of the project shares: a parser whose usage errors are one line with exit code 2, and
checked value types whose messages name the flag (argparse prefixes ``argument --flag:``). Standard library only, and
below every package (``neos_core``), so the tool server uses it as the verl plugins and data generation do."""

from __future__ import annotations

import argparse
import json
import math
import socket


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line (``prog: error: --flag: why (see --help)``) and exit code 2; ``--help`` still shows
    the usage. Subcommands made with ``add_subparsers(parser_class=OneLineParser)`` behave the same."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def whole_number(minimum: int):
    """argparse ``type`` for a whole number >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


positive_int = whole_number(1)  # counts and budgets
nonnegative_int = whole_number(0)  # seeds


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse ``type`` for a number > 0 (durations, sizes, rates)."""
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def nonnegative_float(text: str) -> float:
    """argparse ``type`` for a number >= 0 (latencies, temperatures)."""
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def share(text: str) -> float:
    """argparse ``type`` for a share (a fraction) in [0, 1]."""
    value = _finite(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def port(text: str) -> int:
    """argparse ``type`` for a TCP port; 0 lets the system pick a free one."""
    value = whole_number(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, got {value}")
    return value


def int_list(text: str) -> list[int]:
    """argparse ``type`` for comma-separated whole numbers >= 1, e.g. ``1,8,64``."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 1, got {text!r}")
    return [positive_int(t) for t in items]


def subset(allowed):
    """argparse ``type`` for a comma-separated subset of ``allowed``, in the order given, e.g. ``sticky,cost_aware``."""

    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items or set(items) - set(allowed):
            raise argparse.ArgumentTypeError(f"expected a comma-separated subset of {','.join(allowed)}, got {text!r}")
        return items

    return parse


def json_object(text: str) -> dict:
    """argparse ``type`` for a JSON object given inline."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc.msg} at char {exc.pos})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    """A server command's listening socket, bound before the command loads anything (a world, a model): a busy port
    fails in a moment, not after minutes of loading. ``OSError`` names the address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock
