"""``poll_delays``: short first, doubling, capped; the tool server's lease wait and connect retries and the
learning-curve driver's start waits all poll on it."""

from itertools import islice

from neos_core.polling import poll_delays


def test_delays_double_from_the_first_up_to_the_ceiling_and_stay_there():
    assert list(islice(poll_delays(), 7)) == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert list(islice(poll_delays(0.01, 0.25), 6)) == [0.01, 0.02, 0.04, 0.08, 0.16, 0.25]
