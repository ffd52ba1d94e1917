"""Maximal runs of policy tokens in a response mask: the i-th run of 1s in a row is that trajectory's turn i.

Working on runs instead of tokens keeps per-token work to two streaming passes (find the boundaries, write the
output with one ``np.repeat``); everything else happens on the ~(bs x turns) runs.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class MaskRuns:
    """Row-major segments of a ``(bs, len)`` mask: each segment is a run of 1s or of 0s and never crosses a row."""

    shape: tuple[int, int]
    bounds: NDArray[np.int64]  # flat offsets: segment s covers [bounds[s], bounds[s + 1])
    is_run: NDArray[np.bool_]  # per segment: a run of policy tokens
    row: NDArray[np.int64]  # per run
    turn: NDArray[np.int64]  # per run: its 0-based index among its row's runs
    length: NDArray[np.int64]  # per run: tokens

    def turns_per_row(self) -> NDArray[np.int64]:
        return np.bincount(self.row, minlength=self.shape[0])

    def expand(self, run_values: NDArray, fill: float, dtype: type) -> NDArray:
        """``(bs, len)`` array with ``run_values[r]`` on the tokens of run r and ``fill`` elsewhere."""
        values = np.full(self.is_run.size, fill, dtype=dtype)
        values[self.is_run] = run_values
        return np.repeat(values, np.diff(self.bounds)).reshape(self.shape)


_CHUNK_BYTES = 4 << 20  # rows per pass: an int64 chunk of 4 MiB plus its bool copies stay in L2/L3


def _check(mask: NDArray) -> range:
    """The first row of each chunk of ``mask``."""
    if mask.ndim != 2:
        raise ValueError(f"response_mask must be 2-D (bs, response_len), got shape {mask.shape}")
    bs, length = mask.shape
    return range(0, bs, max(1, _CHUNK_BYTES // max(1, length * mask.itemsize)))


def _segments(mask: NDArray, first: int, rows: int) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Flat offsets of the segment starts in rows [first, first + rows), and which segments are runs of 1s."""
    chunk = mask[first : first + rows]
    policy = chunk if chunk.dtype == np.bool_ else chunk != 0
    boundary = np.empty(policy.shape, dtype=np.bool_)
    boundary[:, :1] = True  # every row starts a segment
    np.not_equal(policy[:, 1:], policy[:, :-1], out=boundary[:, 1:])
    local = np.flatnonzero(boundary)
    return local + first * mask.shape[1], policy.ravel()[local]


def _assemble(shape: tuple[int, int], parts: list[tuple[NDArray[np.int64], NDArray[np.bool_]]]) -> MaskRuns:
    bs, length = shape
    start = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    run = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=np.bool_)
    bounds = np.append(start, bs * length)
    run_starts = start[run]
    row = run_starts // max(length, 1)
    first_of_row = np.searchsorted(row, np.arange(bs))
    turn = np.arange(row.size) - first_of_row[row]
    return MaskRuns(
        shape=(bs, length),
        bounds=bounds,
        is_run=run,
        row=row,
        turn=turn,
        length=bounds[1:][run] - run_starts,
    )


def mask_runs(mask: NDArray) -> MaskRuns:
    """Runs of a 2-D mask (nonzero = policy token; any numeric or bool dtype).

    Rows go in chunks of a few MiB, so the mask is read from memory once: the ``!= 0`` test, the boundary test and
    the run starts of a chunk all work on cache-resident copies (on verl's int64 ``response_mask``, ~2x less CPU
    than a whole-batch bool mask first).
    """
    firsts = _check(mask)
    return _assemble(mask.shape, [_segments(mask, first, firsts.step) for first in firsts])


@dataclass(frozen=True)
class PendingRuns:
    """``mask_runs`` with its chunks running on an executor's threads (numpy releases the GIL in them)."""

    shape: tuple[int, int]
    chunks: list[Future]

    def result(self) -> MaskRuns:
        """Wait for the chunks and assemble the runs (equal to ``mask_runs`` of the same mask)."""
        return _assemble(self.shape, [chunk.result() for chunk in self.chunks])


def submit_mask_runs(mask: NDArray, executor: Executor) -> PendingRuns:
    """Start ``mask_runs(mask)`` on ``executor``; ``mask`` must stay unchanged until ``result()`` returns."""
    firsts = _check(mask)
    return PendingRuns(mask.shape, [executor.submit(_segments, mask, first, firsts.step) for first in firsts])
