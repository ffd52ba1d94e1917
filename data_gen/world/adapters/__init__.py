"""Source adapters of the world, in merge order.

Each adapter is a module exposing ``SOURCES`` (names of :data:`neos_core.world.sources.SPECS` it reads) and
``contribute(sources, size) -> Contribution``. Order matters twice: when two adapters give the same entity id the
first one's label, kind and description win, and when two pages want the same title the first keeps it bare
(later ones are qualified, Wikipedia style: ``Georgia_(us_state)``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

ADAPTERS: tuple[str, ...] = (
    "countries",
    "us_states",
    "cities",
    "kgeography",
    "logos",
    "wordnet",
    "stamps",
    "country_facts",
    "people",
    "wildlife",
    "landmarks",
    "elements",
    "organisations",
    "national_dishes",
    "religions",
    "scripts",
    "time_zones",
    "airports",
    "elevations",
    "former_currencies",
)


class AdapterError(ImportError):
    """An adapter named in a build is unknown or lacks SOURCES/contribute."""


def load_adapter(name: str) -> ModuleType:
    if name not in ADAPTERS:
        raise AdapterError(f"unknown adapter {name!r}; known: {', '.join(ADAPTERS)}")
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"{__name__}.{name}":
            raise AdapterError(f"adapter {name!r} is registered but data_gen/world/adapters/{name}.py is "
                               "missing") from exc
        raise
    for attr in ("SOURCES", "contribute"):
        if not hasattr(module, attr):
            raise AdapterError(f"adapter {name!r} does not define {attr}")
    return module
