"""Optional dependencies (the ``rllm`` and ``eval`` extras): a missing one is a one-line error with the install
command, not a traceback.

Python prints an uncaught exception under its traceback, and ``raise ... from e`` adds the original one too: some 26
lines above the one line a user needs. :func:`optional_import` raises :class:`MissingDependency` with no context,
and the first time it does, it wraps ``sys.excepthook`` so that an uncaught one prints as its one line; every other
exception prints as before, and code that catches ``ImportError`` (``pytest.importorskip``, fallbacks) still can.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType, TracebackType


class MissingDependency(ImportError):
    """An optional dependency is not installed; the message says how to install it (one line)."""


def optional_import(module: str, message: str) -> ModuleType:
    """``import module``; where ``module``'s own package is missing, :class:`MissingDependency` with ``message``. A
    missing dependency of that package is its installation's fault, not ours to explain: it propagates unchanged."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != module.split(".")[0]:
            raise
        _print_uncaught_in_one_line()
        raise MissingDependency(message, name=e.name) from None


def _print_uncaught_in_one_line() -> None:
    previous = sys.excepthook
    if getattr(previous, "one_line_missing_dependency", False):
        return

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if isinstance(exc, MissingDependency):
            print(f"{kind.__name__}: {exc}", file=sys.stderr)
        else:
            previous(kind, exc, tb)

    hook.one_line_missing_dependency = True  # type: ignore[attr-defined]
    sys.excepthook = hook
