"""truth.json: what a correct diagnosis of a simulated run must say, written beside its output.

Kept apart from the data files so a reader under test can never peek at it by accident, and
so every writer (profiler folders, OpenMetrics history, live) shares one ground truth.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skewscope.sim.records import SimResult


def truth_dict(result: SimResult) -> dict[str, Any]:
    """``GroundTruth.to_dict()`` plus the scenario meta (``meta``) and the run's shape
    (``run``: span, instances, units with prof_id), so a checker needs no other file."""
    d = result.truth.to_dict()
    d["meta"] = dict(result.meta)  # the scenario's own meta, untouched
    d["run"] = {
        "start_s": result.start_s,
        "end_s": result.end_s,
        "model_name": result.model_name,
        "instances": result.instances,
        "units": [
            {
                "instance": r.instance,
                "dp_rank": r.dp_rank,
                "prof_id": r.prof_id,
                "speed": r.speed,
                "total_blocks": r.total_blocks,
            }
            for r in result.ranks
        ],
    }
    return d


def write_truth(result: SimResult, out_dir: Path) -> Path:
    """Write ``out_dir/truth.json`` and return its path."""
    path = Path(out_dir) / "truth.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(truth_dict(result), indent=2, sort_keys=True, default=str) + "\n")
    return path
