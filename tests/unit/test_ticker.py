"""The scrape loops' one ticker on a ManualClock: rounds of scripted length against the grid."""

from __future__ import annotations

import threading

from skewscope.clock import ManualClock
from skewscope.sources.ticker import Ticker


def run(round_s: float, count: int) -> tuple[list[float], list[float], Ticker]:
    """Tick ``count`` times at 5 s, each round taking ``round_s``: (yielded offsets, clock
    time at which each round started, the ticker)."""
    clock = ManualClock(1000.0)
    ticker = Ticker(5.0, clock)
    got, started = [], []
    for t in ticker.ticks(count):
        got.append(t)
        started.append(clock.time())
        clock.advance(round_s)
    return got, started, ticker


def test_rounds_within_their_slot_tick_on_the_grid() -> None:
    got, started, ticker = run(1.0, 4)
    assert ticker.t0 == 1000.0
    assert got == [0.0, 5.0, 10.0, 15.0] and started == [1000.0, 1005.0, 1010.0, 1015.0]
    assert ticker.skipped == 0


def test_a_round_that_outlasts_its_slot_skips_the_ticks_it_missed() -> None:
    """7 s rounds on a 5 s grid: tick 1 starts 2 s late (under half an interval: run, stamped
    with its nominal 5.0), tick 2 would start 4 s late (skipped), tick 3 is on time again."""
    got, started, ticker = run(7.0, 7)
    assert got == [0.0, 5.0, 15.0, 20.0, 30.0]
    assert started == [1000.0, 1007.0, 1015.0, 1022.0, 1030.0]
    assert ticker.skipped == 2
    assert ticker.elapsed() == 37.0


def test_a_round_over_two_slots_long_skips_every_tick_it_held() -> None:
    """12 s rounds: tick 1 (7 s late) skipped, tick 2 (2 s late) run; ticks 3 and 4 (9 s,
    4 s late) skipped, tick 5 waited for."""
    got, started, ticker = run(12.0, 6)
    assert got == [0.0, 10.0, 25.0] and started == [1000.0, 1012.0, 1025.0]
    assert ticker.skipped == 3


def test_a_set_stop_event_ends_the_ticks() -> None:
    clock = ManualClock(0.0)
    stop = threading.Event()
    ticker = Ticker(1.0, clock)
    got = []
    for t in ticker.ticks(until=stop):
        got.append(t)
        if t == 2.0:
            stop.set()
    assert got == [0.0, 1.0, 2.0]
