"""The launcher's restart rule: crashes are rate-limited within a window, not counted for life."""

from fleetrl.orchestrate.local import RestartLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_restarts_until_more_than_limit_crashes_fall_in_the_window():
    clock = Clock()
    limiter = RestartLimiter(limit=3, window_s=60.0, clock=clock)
    for _ in range(3):
        assert limiter.crashed()
        clock.now += 10.0
    assert not limiter.crashed()  # the fourth crash within 60 s


def test_crashes_spread_over_a_long_run_never_stop_it():
    clock = Clock()
    limiter = RestartLimiter(limit=3, window_s=60.0, clock=clock)
    for _ in range(100):  # far more than any lifetime count would allow
        assert limiter.crashed()
        clock.now += 21.0  # at most 3 crashes within any 60 s


def test_old_crashes_leave_the_window():
    clock = Clock()
    limiter = RestartLimiter(limit=2, window_s=60.0, clock=clock)
    assert limiter.crashed() and limiter.crashed()
    clock.now += 60.0  # exactly one window later: the first two no longer count
    assert limiter.crashed() and limiter.crashed()
    assert not limiter.crashed()
    assert len(limiter.crashes) == 3


def test_default_limit_is_five_in_ten_minutes():
    clock = Clock()
    limiter = RestartLimiter(clock=clock)
    assert all(limiter.crashed() for _ in range(5))
    clock.now += 599.0
    assert not limiter.crashed()
