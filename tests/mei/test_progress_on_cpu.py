"""Progress lines of an MEI SFT run: which steps print, what the numbers are (hand-computed), on a scripted clock."""

from __future__ import annotations

import re

import pytest

from verl_ext.mei.progress import StepProgress, clock_text


class ScriptedClock:
    """A clock the test advances by hand (no timed assertions)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_every_twentieth_of_the_run_and_at_the_end():
    lines: list[str] = []
    clock = ScriptedClock()
    p = StepProgress("MEI v0 SFT", total=45, steps_per_epoch=3, emit=lines.append, clock=clock)
    assert p.every == 3  # ceil(45 / 20)
    for k in range(1, 46):
        clock.now += 2.0  # 2 s a step, 100 tokens a step
        p.step(loss=float(k), tokens=100)
    assert [int(re.search(r"step (\d+)/45", line)[1]) for line in lines] == list(range(3, 46, 3))
    # step 6: epoch 2 of 15, mean loss of steps 4..6 = 5, 300 tokens in 6 s, 12 s elapsed, 39 steps x 2 s to go
    assert lines[1] == ("MEI v0 SFT step 6/45 (epoch 2/15): loss 5.0000 (mean of 3 steps), 50 tokens/s, "
                        "elapsed 0:00:12, ETA 0:01:18")
    assert lines[-1].endswith("elapsed 0:01:30, ETA 0:00:00")
    clock.now += 1.0
    assert p.finish() == pytest.approx(91.0)
    assert lines[-1] == "MEI v0 SFT done: 45/45 steps in 0:01:31 (2.02 s/step), loss 23.0000 mean, 45.0000 last, " \
                        "49 tokens/s"


def test_slow_steps_print_after_the_interval_and_the_last_step_always():
    lines: list[str] = []
    clock = ScriptedClock()
    p = StepProgress("MEI v1 SFT", total=7, steps_per_epoch=7, every=5, interval_s=30.0, emit=lines.append,
                     clock=clock)
    for seconds in (10.0, 25.0, 1.0, 1.0, 1.0, 40.0, 1.0):  # 35 s after step 2; step 5 by count; 40 s; the last
        clock.now += seconds
        p.step(loss=0.5, tokens=10)
    assert [int(re.search(r"step (\d)/7", line)[1]) for line in lines] == [2, 5, 6, 7]
    assert "(mean of 2 steps)" in lines[0] and "(mean of 1 step)" in lines[2]


def test_clock_text():
    assert (clock_text(0.4), clock_text(59.6), clock_text(3_725.0)) == ("0:00:00", "0:01:00", "1:02:05")
    assert clock_text(float("inf")) == "-"
