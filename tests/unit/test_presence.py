"""When units came and went (analysis/presence.py), on frames with known truth: a restart, a
late join and a scale-in are no skew and the report says when; a unit that stops reporting
while hot is a finding, never balanced."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose
from skewscope.frame import Evidence
from skewscope.report.document import report_document

UNITS = ("a", "b", "c", "d")


def report(specs: dict[str, Spec], absent: tuple[str, int, int]) -> dict:  # type: ignore[type-arg]
    """24 windows of 10 s; ``absent`` = (unit, first window without it, first window back)."""
    frame = make_frame(specs, windows=24, source="prometheus")
    unit, lo, hi = absent
    w = (pl.col("window_start_s") - frame.df["window_start_s"].min()) / frame.window_s
    df = frame.df.filter(~((pl.col("unit") == unit) & (w >= lo) & (w < hi)))
    return report_document(diagnose(Evidence(instance=replace(frame, df=df))))


EVEN = {u: Spec() for u in UNITS}


@pytest.mark.parametrize(
    ("absent", "says"),
    [
        (("d", 8, 12), "d was absent from 2025-04-18 18:14:40 UTC and back at 2025-04-18 18:15:20"),
        (("d", 0, 10), "d joined at 2025-04-18 18:15:00 UTC"),
        (("a", 14, 24), "a stopped reporting at 2025-04-18 18:15:40 UTC (lost or scaled in)"),
    ],
)
def test_restart_join_and_scale_in_are_no_skew_and_are_said(
    absent: tuple[str, int, int], says: str
) -> None:
    doc = report(EVEN, absent)
    assert doc["verdict"] == "balanced" and doc["starved_units"] == [], doc["findings"]
    assert any(says in n for n in doc["notes"]), doc["notes"]


def test_a_cold_joiner_is_not_starved() -> None:
    cold = {**EVEN, "d": Spec(burst={10: 0.1, 11: 0.3, 12: 0.6})}
    doc = report(cold, ("d", 0, 10))
    assert doc["verdict"] == "balanced" and doc["starved_units"] == [], doc["findings"]


def test_a_unit_lost_while_hot_is_a_finding() -> None:
    """Hot for two windows (a burst), then gone for the last ten: before, the range read
    balanced (its hot run too short to persist, its absent windows not judged)."""
    doc = report({**EVEN, "a": Spec(burst={12: 2.5, 13: 2.5})}, ("a", 14, 24))
    assert doc["verdict"] == "imbalanced" and doc["hot_units"] == ["a"]
    (f,) = doc["findings"]
    assert f["kind"] == "lost" and f["severity"] == "high"
    assert f["facts"]["absent_windows"] == 10 and f["root_causes"][0]["key"] == "unit_lost"
    assert "a was lost at 2025-04-18 18:15:40 UTC while hot" in f["summary"]
    assert not any(t.startswith("a ran hot") for t in doc["transient"])
