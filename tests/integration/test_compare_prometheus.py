"""``skewscope compare --prometheus``: two ranges of one real Prometheus (the stationary history
of online_history: the same skew in both halves, so nothing converged and nothing got worse)."""

from __future__ import annotations

import json

import pytest

from helpers.online_history import SPAN, T0, WINDOW
from skewscope.cli import main


def test_compare_two_prometheus_ranges(
    prometheus_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    half = SPAN // 2
    args = [
        "compare",
        "--prometheus",
        prometheus_url,
        "--selector",
        '{job="vllm-dp"}',
        "--step",
        f"{WINDOW}s",
        "--level",
        "instance",
        "--before-start",
        str(T0),
        "--before-end",
        str(T0 + half),
        "--after-start",
        str(T0 + half),
        "--after-end",
        str(T0 + SPAN),
    ]
    assert main([*args, "--format", "json", "--fail-on", "worse"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["before"]["source"] == doc["after"]["source"] == "prometheus"
    assert doc["before"]["windows"] >= 6 and doc["after"]["windows"] >= 6
    assert doc["before"]["hot_units"] == doc["after"]["hot_units"] == ["a:8000"]
    req = {s["signal"]: s for s in doc["signals"]}["requests_per_s"]
    # a gets 2x the requests of b in both halves (exactly, by construction of the history)
    assert req["before"]["hot_peer_ratio"] == pytest.approx(2.0, rel=0.05)
    assert req["after"]["hot_peer_ratio"] == pytest.approx(2.0, rel=0.05)
    assert req["verdict"] == "unchanged"
    assert doc["verdict"] == "unchanged"  # tokens/s even in both halves is no progress
    # still imbalanced after the "fix": the imbalanced gate trips
    assert main([*args, "--fail-on", "imbalanced"]) == 6
