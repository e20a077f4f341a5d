"""Opt-in (``-m heavy``): at least 20 seeds per built-in scenario diagnosed against the
simulator's truth. The measured pass rates are recorded in docs/accuracy.md; this test keeps
them from regressing below the floor there."""

from __future__ import annotations

import pytest

from helpers.accuracy_sweep import sweep
from skewscope.sim.scenario import builtin_scenarios

SEEDS = range(1, 21)
MIN_PASS_RATE = 0.9  # docs/accuracy.md: every scenario measured at or above this


@pytest.mark.heavy
@pytest.mark.parametrize("name", sorted(builtin_scenarios()))
def test_seed_sweep_pass_rate(name: str) -> None:
    misses = sweep([name], SEEDS)[name]
    rate = 1.0 - len(misses) / len(SEEDS)
    assert rate >= MIN_PASS_RATE, misses
