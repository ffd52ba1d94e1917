"""An indexed triple store and the conjunctive-query solver behind the identifiability check (Neos Eq. 2).

``U_K(C, B) = {u | ∃z: z_out = u, ∀(v,r,w)∈C (z_v, r, z_w)∈K, ∀v∈B z_v = b_v}``. Terms starting with ``?`` are
variables, all others constants, in any of the three positions. Each step of the backtracking join picks the
constraint with the fewest candidate triples under the current assignment (read off the indexes), and once ``out``
is bound the rest of the query is only checked for existence, so a structure check touches a handful of triples
even on a world of half a million.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

VARIABLE_PREFIX = "?"

_EMPTY: frozenset[str] = frozenset()
_NO_INDEX: Mapping[str, frozenset[str]] = {}


class QueryError(ValueError):
    """A malformed query: the caller's bug, reported instead of answered."""


@dataclass(frozen=True, slots=True)
class Query:
    """One conjunctive query in :meth:`KG.solve`'s terms; structures compile to it."""

    constraints: tuple[tuple[str, str, str], ...]
    bindings: Mapping[str, str]
    out: str


def is_variable(term: str) -> bool:
    return term.startswith(VARIABLE_PREFIX)


class KG:
    """An immutable set of ``(subject, relation, object)`` triples over string terms.

    Objects may be literals (dates, numbers, names); mark them with ``literals`` so that later stages never try to
    identify or expand a literal as if it were an entity.
    """

    def __init__(
        self,
        sp: dict[str, dict[str, frozenset[str]]],
        op: dict[str, dict[str, frozenset[str]]],
        literals: frozenset[str],
    ) -> None:
        self._sp = sp  # subject -> relation -> objects
        self._op = op  # object -> relation -> subjects
        self._literals = literals
        # Relation-first views share the very same sets, so they cost dict slots only.
        self._ps: dict[str, dict[str, frozenset[str]]] = {}
        self._out_count: dict[str, int] = {}
        self._in_count: dict[str, int] = {}
        self._p_count: dict[str, int] = {}
        for s, by_rel in sp.items():
            self._out_count[s] = sum(len(objs) for objs in by_rel.values())
            for p, objs in by_rel.items():
                self._ps.setdefault(p, {})[s] = objs
                self._p_count[p] = self._p_count.get(p, 0) + len(objs)
        for o, by_rel in op.items():
            self._in_count[o] = sum(len(subs) for subs in by_rel.values())
        self._n_triples = sum(self._out_count.values())

    @classmethod
    def from_triples(cls, triples: Iterable[tuple[str, str, str]], literals: Iterable[str] = ()) -> KG:
        """Index ``triples`` (duplicates collapse). ``literals`` names object terms that are values, not entities."""
        sp: dict[str, dict[str, set[str]]] = {}
        op: dict[str, dict[str, set[str]]] = {}
        for i, triple in enumerate(triples):
            if isinstance(triple, (str, bytes)) or len(triple) != 3:
                raise ValueError(f"triple #{i} must be (subject, relation, object), got {triple!r}")
            for term in triple:
                if not isinstance(term, str) or not term:
                    raise ValueError(f"triple #{i} {triple!r}: terms must be non-empty strings")
                if is_variable(term):
                    raise ValueError(f"triple #{i} {triple!r}: {term!r} starts with {VARIABLE_PREFIX!r}, "
                                     "which marks query variables")
            s, p, o = triple
            sp.setdefault(s, {}).setdefault(p, set()).add(o)
            op.setdefault(o, {}).setdefault(p, set()).add(s)
        literal_set = frozenset(literals)
        for lit in sorted(literal_set):
            if lit in sp:
                raise ValueError(f"literal {lit!r} occurs as a subject; literals can only be objects")
            if lit not in op:
                raise ValueError(f"literal {lit!r} occurs in no triple")
        return cls(_freeze(sp), _freeze(op), literal_set)

    # -- Reading the graph ------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n_triples

    def __contains__(self, triple: object) -> bool:
        if not isinstance(triple, tuple) or len(triple) != 3:
            return False
        s, p, o = triple
        return o in self._sp.get(s, _NO_INDEX).get(p, _EMPTY)

    def terms(self) -> set[str]:
        """Every subject and object."""
        return self._sp.keys() | self._op.keys()

    def is_literal(self, term: str) -> bool:
        return term in self._literals

    def outgoing(self, subject: str) -> Mapping[str, frozenset[str]]:
        """Relation -> objects of the triples whose subject is ``subject``."""
        return self._sp.get(subject, _NO_INDEX)

    def incoming(self, obj: str) -> Mapping[str, frozenset[str]]:
        """Relation -> subjects of the triples whose object is ``obj``."""
        return self._op.get(obj, _NO_INDEX)

    def objects(self, subject: str, relation: str) -> frozenset[str]:
        return self._sp.get(subject, _NO_INDEX).get(relation, _EMPTY)

    def subjects(self, relation: str, obj: str) -> frozenset[str]:
        return self._op.get(obj, _NO_INDEX).get(relation, _EMPTY)

    def degree(self, term: str) -> int:
        """Triples that mention ``term`` as subject or object."""
        return self._out_count.get(term, 0) + self._in_count.get(term, 0)

    # -- Solving ----------------------------------------------------------------------------------------------------

    def solve(
        self,
        constraints: Iterable[tuple[str, str, str]],
        bindings: Mapping[str, str] | None,
        out: str,
        limit: int | None = None,
    ) -> set[str]:
        """Every value of ``out`` over the assignments that satisfy all constraints and bindings.

        ``limit`` stops after that many distinct answers: ``limit=2`` is all a uniqueness check needs.
        """
        patterns, env = _validate(constraints, bindings, out, limit)
        results: set[str] = set()
        self._collect(patterns, env, out, results, limit)
        return results

    def solve_query(self, query: Query, limit: int | None = None) -> set[str]:
        return self.solve(query.constraints, query.bindings, query.out, limit=limit)

    def _collect(self, pending: list[tuple[str, str, str]], env: dict[str, str], out: str, results: set[str],
                 limit: int | None) -> bool:
        """Add the answers reachable from ``env`` to ``results``; True once ``limit`` is reached."""
        if out in env:
            value = env[out]
            if value not in results and self._exists(pending, env):
                results.add(value)
            return limit is not None and len(results) >= limit
        pattern, rest = self._most_selective(pending, env)
        for new_vars in self._matches(pattern, env):
            stop = self._collect(rest, env, out, results, limit)
            for var in new_vars:
                del env[var]
            if stop:
                return True
        return False

    def _exists(self, pending: list[tuple[str, str, str]], env: dict[str, str]) -> bool:
        if not pending:
            return True
        pattern, rest = self._most_selective(pending, env)
        for new_vars in self._matches(pattern, env):
            found = self._exists(rest, env)
            for var in new_vars:
                del env[var]
            if found:
                return True
        return False

    def _most_selective(self, pending: list[tuple[str, str, str]], env: dict[str, str]
                        ) -> tuple[tuple[str, str, str], list[tuple[str, str, str]]]:
        best_i, best_cost = 0, -1
        for i, pattern in enumerate(pending):
            cost = self._cost(pattern, env)
            if best_cost < 0 or cost < best_cost:
                best_i, best_cost = i, cost
                if cost == 0:
                    break
        return pending[best_i], pending[:best_i] + pending[best_i + 1:]

    def _cost(self, pattern: tuple[str, str, str], env: Mapping[str, str]) -> int:
        """Upper bound on the triples :meth:`_matches` scans for ``pattern`` (0 = a check, or no match at all)."""
        s, p, o = (_value(t, env) for t in pattern)
        if s is not None and p is not None:
            return 0 if o is not None else len(self.objects(s, p))
        if p is not None and o is not None:
            return len(self.subjects(p, o))
        if s is not None:
            return len(self.outgoing(s)) if o is not None else self._out_count.get(s, 0)
        if o is not None:
            return self._in_count.get(o, 0)
        if p is not None:
            return self._p_count.get(p, 0)
        return self._n_triples

    def _matches(self, pattern: tuple[str, str, str], env: dict[str, str]) -> Iterator[list[str]]:
        """Bind ``pattern``'s free variables to each matching triple in turn; yields the variables it bound.

        The caller unbinds them before the generator resumes.
        """
        values = [_value(t, env) for t in pattern]
        for triple in self._scan(*values):
            bound: list[str] = []
            consistent = True
            for term, known, actual in zip(pattern, values, triple):
                if known is not None:
                    continue
                seen = env.get(term)
                if seen is None:
                    env[term] = actual
                    bound.append(term)
                elif seen != actual:  # the same variable twice in one triple
                    consistent = False
                    break
            if consistent:
                yield bound
            else:
                for var in bound:
                    del env[var]

    def _scan(self, s: str | None, p: str | None, o: str | None) -> Iterator[tuple[str, str, str]]:
        """Triples matching the known positions (None = any), read from the narrowest index."""
        if s is not None:
            by_rel = self.outgoing(s)
            if p is not None:
                objs = by_rel.get(p, _EMPTY)
                if o is not None:
                    if o in objs:
                        yield s, p, o
                else:
                    for obj in objs:
                        yield s, p, obj
            else:
                for rel, objs in by_rel.items():
                    if o is not None:
                        if o in objs:
                            yield s, rel, o
                    else:
                        for obj in objs:
                            yield s, rel, obj
        elif o is not None:
            by_rel = self.incoming(o)
            for rel, subs in (((p, by_rel.get(p, _EMPTY)),) if p is not None else by_rel.items()):
                for sub in subs:
                    yield sub, rel, o
        elif p is not None:
            for sub, objs in self._ps.get(p, _NO_INDEX).items():
                for obj in objs:
                    yield sub, p, obj
        else:
            for sub, by_rel in self._sp.items():
                for rel, objs in by_rel.items():
                    for obj in objs:
                        yield sub, rel, obj


def _value(term: str, env: Mapping[str, str]) -> str | None:
    """The constant a term stands for under ``env``, or None while it is a free variable."""
    return env.get(term) if is_variable(term) else term


def _freeze(index: dict[str, dict[str, set[str]]]) -> dict[str, dict[str, frozenset[str]]]:
    return {key: {rel: frozenset(vals) for rel, vals in by_rel.items()} for key, by_rel in index.items()}


def _check_term(term: object, where: str) -> str:
    if not isinstance(term, str):
        raise QueryError(f"{where}: terms must be strings, got {type(term).__name__} {term!r}")
    if not term or term == VARIABLE_PREFIX:
        raise QueryError(f"{where}: empty term {term!r} (a variable needs a name after {VARIABLE_PREFIX!r})")
    return term


def _validate(constraints: Iterable[tuple[str, str, str]], bindings: Mapping[str, str] | None, out: str,
              limit: int | None) -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    if isinstance(constraints, (str, bytes)):
        raise QueryError("constraints must be a sequence of (subject, relation, object) triples, not a string")
    patterns: list[tuple[str, str, str]] = []
    variables: set[str] = set()
    for i, constraint in enumerate(constraints):
        if not isinstance(constraint, (tuple, list)) or len(constraint) != 3:
            raise QueryError(f"constraint #{i} must be a (subject, relation, object) triple, got {constraint!r}")
        pattern = tuple(_check_term(t, f"constraint #{i} {constraint!r}") for t in constraint)
        variables.update(t for t in pattern if is_variable(t))
        patterns.append(pattern)  # type: ignore[arg-type]
    env: dict[str, str] = {}
    for var, value in (bindings or {}).items():
        _check_term(var, "binding")
        _check_term(value, f"binding {var!r}")
        if not is_variable(var):
            raise QueryError(f"binding key {var!r} is not a variable (variables start with {VARIABLE_PREFIX!r})")
        if is_variable(value):
            raise QueryError(f"binding {var!r} -> {value!r}: a variable can only be bound to a constant")
        if var not in variables and var != out:
            raise QueryError(f"binding for {var!r}, which occurs in no constraint")
        env[var] = value
    _check_term(out, "out")
    if not is_variable(out):
        raise QueryError(f"out {out!r} must be a variable (variables start with {VARIABLE_PREFIX!r})")
    if out not in variables and out not in env:
        raise QueryError(f"out {out!r} is unbound: it occurs in no constraint and has no binding")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise QueryError(f"limit must be a positive integer or None, got {limit!r}")
    return patterns, env
