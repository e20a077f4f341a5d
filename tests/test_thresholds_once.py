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
    "compare.py": {95, 99},  # p95 / p99: the figures' names
    "spread.py": {0.5, 0.9, 3},  # median / p90: the spread's names; 3: the rank after 3 roles
    "timeline.py": {3},  # three bands (median, min, max)
}


def test_no_literal_threshold_in_the_analysis() -> None:
    found = []
    for path in sorted(ANALYSIS.glob("*.py")):
        allowed = STRUCTURAL | ALLOWED.get(path.name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and type(node.value) in (int, float)
                    and node.value not in allowed):
                found.append(f"{path.name}:{node.lineno}: {node.value}")
    assert not found, "move these into config.Thresholds:\n" + "\n".join(found)
