"""Progress lines of an MEI SFT run (the warm start's hundreds of steps, an online update's few), so that whoever
watches it can tell whether it finishes in the time they have.

``train_mei`` drives the steps itself (one ``train_batch`` call per optimiser step, whose loss it already fetches), so
a line costs no device synchronisation: it only formats numbers the loop already holds. A line is printed at every
``every``-th step (by default a twentieth of the run), after ``interval_s`` seconds without one, and at the last step;
then one summary line. Lines go to stdout, flushed: the warm start has no logging set up, and in the trainer the
driver's stdout is what the console and the job log show.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

LINES_PER_RUN = 20
INTERVAL_S = 30.0


def print_flushed(line: str) -> None:
    print(line, flush=True)


def clock_text(seconds: float) -> str:
    """``H:MM:SS`` (``-`` for an unknown duration)."""
    if not math.isfinite(seconds):
        return "-"
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


@dataclass(slots=True)
class StepProgress:
    """Counts the steps of one SFT run of ``total`` steps (``steps_per_epoch`` a pass over the data) and prints its
    progress lines through ``emit``."""

    label: str  # e.g. "MEI v0 SFT"
    total: int
    steps_per_epoch: int
    every: int = 0  # a line every this many steps; 0: ceil(total / LINES_PER_RUN)
    interval_s: float = INTERVAL_S  # ... or after this many seconds without a line
    emit: Callable[[str], None] = print_flushed
    clock: Callable[[], float] = time.perf_counter
    done: int = 0
    tokens: int = 0
    losses: list[float] = field(default_factory=list)
    _start: float = 0.0
    _last_time: float = 0.0
    _last_step: int = 0
    _last_tokens: int = 0

    def __post_init__(self) -> None:
        if self.total < 1 or self.steps_per_epoch < 1:
            raise ValueError(f"need total >= 1 and steps_per_epoch >= 1, got {self.total}, {self.steps_per_epoch}")
        self.every = self.every or math.ceil(self.total / LINES_PER_RUN)
        self._start = self._last_time = self.clock()

    def step(self, loss: float, tokens: int) -> None:
        """One optimiser step done: its loss (already on the host) and its real tokens."""
        self.done += 1
        self.tokens += tokens
        self.losses.append(loss)
        now = self.clock()
        if self.done % self.every == 0 or self.done == self.total or now - self._last_time >= self.interval_s:
            self._line(now)

    def _line(self, now: float) -> None:
        steps = self.done - self._last_step
        interval = now - self._last_time
        elapsed = now - self._start
        rate = (self.tokens - self._last_tokens) / interval if interval > 0 else math.inf
        eta = elapsed / self.done * (self.total - self.done)
        epoch = (self.done - 1) // self.steps_per_epoch + 1
        epochs = math.ceil(self.total / self.steps_per_epoch)
        mean = sum(self.losses[-steps:]) / steps
        self.emit(f"{self.label} step {self.done}/{self.total} (epoch {epoch}/{epochs}): loss {mean:.4f} "
                  f"(mean of {steps} step{'s' if steps > 1 else ''}), {rate:,.0f} tokens/s, "
                  f"elapsed {clock_text(elapsed)}, ETA {clock_text(eta)}")
        self._last_time, self._last_step, self._last_tokens = now, self.done, self.tokens

    def finish(self) -> float:
        """Print the summary line; returns the run's seconds."""
        seconds = self.clock() - self._start
        rate = self.tokens / seconds if seconds > 0 else math.inf
        per_step = seconds / self.done if self.done else math.nan
        mean = sum(self.losses) / len(self.losses) if self.losses else math.nan
        last = self.losses[-1] if self.losses else math.nan
        self.emit(f"{self.label} done: {self.done}/{self.total} steps in {clock_text(seconds)} "
                  f"({per_step:.2f} s/step), loss {mean:.4f} mean, {last:.4f} last, {rate:,.0f} tokens/s")
        return seconds
