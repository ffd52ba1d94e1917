"""The KG layer of Neos task synthesis: an indexed triple store with Eq. 2's solver, distinguishing sets,
backward expansion into identification DAGs, and identifiable reasoning structures. Free of verl imports."""

from data_gen.kg.dag import Dag, Edge, ExpansionConfig, expand
from data_gen.kg.distinguish import DistinguishingConfig, Fact, NotDistinguishable, distinguishing_set
from data_gen.kg.graph import KG, Query, QueryError, is_variable
from data_gen.kg.structures import (
    MULTIPLE_ENDPOINTS,
    UNRESOLVED,
    WRONG_ENDPOINT,
    Enumeration,
    Structure,
    StructureConfig,
    enumerate_structures,
    identifiability,
)

__all__ = [
    "KG", "Query", "QueryError", "is_variable",
    "DistinguishingConfig", "Fact", "NotDistinguishable", "distinguishing_set",
    "Dag", "Edge", "ExpansionConfig", "expand",
    "Enumeration", "Structure", "StructureConfig", "enumerate_structures", "identifiability",
    "MULTIPLE_ENDPOINTS", "UNRESOLVED", "WRONG_ENDPOINT",
]
