"""Reading the Unicode CLDR data the babel package ships, shared by the ``scripts`` and ``time_zones`` adapters.

babel keeps CLDR as pickles (``babel/global.dat``, ``babel/locale-data/en.dat``); they are read without importing
babel, with an unpickler that builds no class outside the standard containers (babel's own classes, which the English
locale's date and number patterns use, become empty stand-ins), so the fetched package runs no code.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

SOURCE = "babel"
GLOBAL = Path("babel/global.dat")
ENGLISH = Path("babel/locale-data/en.dat")


class _Stand_in:
    """What a babel class in a CLDR pickle becomes. Its two methods must exist and do nothing: unpickling calls the
    class with the pickled arguments and then hands it the pickled state, and both are dropped."""

    def __init__(self, *_: object) -> None:
        pass

    def __setstate__(self, _: object) -> None:
        pass


class _CldrUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] == "babel":
            return type(name, (_Stand_in,), {})
        raise pickle.UnpicklingError(f"CLDR pickle refers to {module}.{name}, not a babel class")


def load_cldr(path: Path) -> dict[str, Any]:
    """One of babel's CLDR pickles, read without running its code."""
    with path.open("rb") as fh:
        return _CldrUnpickler(fh).load()
