"""Every threshold of the analysis lives in config.Thresholds: no number in analysis/ decides a
verdict on its own. Only structural constants are allowed there (0, 1, a pair, unit
conversions, percentile names, a float tolerance)."""

from __future__ import annotations

import ast
from pathlib import Path

import skewscope.analysis

ANALYSIS = Path(skewscope.analysis.__file__).parent
STRUCTURAL = {0, 1, -1, 2, 1000, 3600, 1e-12}  # 3600: seconds per hour
ALLOWED: dict[str, set[float]] = {
    "chance.py": {12},  # the variance of rounding to a whole count, 1/12: arithmetic, no verdict
    "compare.py": {95, 99},  # p95 / p99: the figures' names
    "detect.py": {8},  # numpy sums 8 or more terms pairwise (smooth keeps its exact sums)
    "significance.py": {22},  # permutation slices of 2^22 cells: memory per copy, no verdict
    "spread.py": {0.5, 0.9, 3},  # median / p90: the spread's names; 3: the rank after 3 roles
    "timeline.py": {3},  # three bands (median, min, max)
}


def test_no_literal_threshold_in_the_analysis() -> None:
    found = []
    for path in sorted(ANALYSIS.glob("*.py")):
        allowed = STRUCTURAL | ALLOWED.get(path.name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Constant)
                and type(node.value) in (int, float)
                and node.value not in allowed
            ):
                found.append(f"{path.name}:{node.lineno}: {node.value}")
    assert not found, "move these into config.Thresholds:\n" + "\n".join(found)


def test_every_threshold_is_read_by_the_analysis() -> None:
    # Thresholds hold what the analysis judges with, nothing else: a setting only a source or
    # the command line reads belongs in settings.SourceLimits (sources never import config).
    # The alert rules are the same method in PromQL: what only they read (their persistence
    # horizon) is judged with too.
    import dataclasses

    from skewscope.config import DEFAULT_THRESHOLDS
    from skewscope.monitor.template import RULE_THRESHOLDS

    text = "\n".join(p.read_text() for p in ANALYSIS.glob("*.py"))
    read = {name for name in DEFAULT_THRESHOLDS.as_dict() if f".{name}" in text}
    if ".impact_floors" in text:  # read together, through the one mapping
        read |= {f"impact_floor_{k}" for k in DEFAULT_THRESHOLDS.impact_floors}
    read |= set(RULE_THRESHOLDS)
    fields = {f.name for f in dataclasses.fields(DEFAULT_THRESHOLDS)}
    assert fields - read == set(), "thresholds the analysis never reads"
