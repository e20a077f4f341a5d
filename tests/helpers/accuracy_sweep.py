"""Seed sweep: every built-in scenario simulated with many seeds, written as msServiceProfiler
folders, diagnosed through the CLI and checked against the simulator's truth.

Run directly for the table in docs/accuracy.md
(``PYTHONPATH=src:tests python tests/helpers/accuracy_sweep.py [seeds]``);
``test_accuracy_sweep.py`` runs it as an opt-in heavy test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from helpers.truth import check_against_truth
from skewscope.cli import main
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.writers.profiler import write_profiler


def run_one(name: str, seed: int) -> str:
    """'' when the diagnosis equals the truth, else why not (first failed check)."""
    result = simulate(dataclasses.replace(builtin_scenarios()[name], seed=seed))
    with tempfile.TemporaryDirectory() as tmp:
        write_profiler(result, Path(tmp))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["diagnose", tmp, "--format", "json"])
    if code != 0:
        return f"exit {code}"
    doc: dict[str, Any] = json.loads(out.getvalue())
    try:
        check_against_truth(doc, result.truth.to_dict())
    except AssertionError as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]  # the check that failed
        return f"{doc['verdict']} {doc['hot_units']}: `{(frame.line or '')[:100]}`"
    return ""


def sweep(names: list[str], seeds: range) -> dict[str, list[tuple[int, str]]]:
    """{scenario: [(seed, failure reason)]} for every seed that missed the truth."""
    return {name: [(s, why) for s in seeds if (why := run_one(name, s))] for name in names}


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    seeds = range(1, n + 1)
    total = 0
    for name in sorted(builtin_scenarios()):
        misses = sweep([name], seeds)[name]
        total += n - len(misses)
        print(
            f"| {name} | {n - len(misses)}/{n} | "
            + "; ".join(f"seed {s}: {why}" for s, why in misses)
            + " |",
            flush=True,
        )
    print(f"total {total}/{n * len(builtin_scenarios())}")
