"""How fast the fleet day is written (``skewscope.sim.day``): the full day (6 h of 16 x 2 DP
ranks + 2 joining, 15 s) or ``--short``, against a baseline in the same process — the same
number of samples written by ``fleet_history.openmetrics_chunks`` (the array writer the fleet
benchmark uses, values formatted in Python), for the same fleet shape and span.

    python benchmarks/bench_day.py [--short] [--dialect vllm|sglang] [--dir /tmp/skewscope-day]

Prints wall and CPU seconds, samples and MB per wall second of each, and the ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import time
from pathlib import Path

from fleet_history import Fleet, openmetrics_chunks
from skewscope.sim.day import DaySpec, write_day


def _timed(fn):  # type: ignore[no-untyped-def]
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--short", action="store_true")
    p.add_argument("--dialect", default="vllm", choices=("vllm", "sglang"))
    p.add_argument("--dir", type=Path, default=Path("/tmp/skewscope-day"))
    a = p.parse_args()
    spec = (DaySpec.short if a.short else DaySpec.full)(dialect=a.dialect)
    shutil.rmtree(a.dir, ignore_errors=True)
    files, wall, cpu = _timed(lambda: write_day(spec, a.dir / "day"))
    size = files.history.stat().st_size
    print(
        f"day ({spec.dialect}, {spec.hours:g} h, {spec.n_instances}x{spec.ranks}): "
        f"{files.samples:,} samples, {size / 1e6:,.0f} MB in {wall:.1f} s wall, {cpu:.1f} CPU s"
        f" -> {files.samples / wall:,.0f} samples/s, {size / 1e6 / wall:,.0f} MB/s"
    )
    # baseline: the fleet benchmark's writer, its fleet sized to about as many samples
    fleet = Fleet(instances=spec.n_instances, ranks=spec.ranks, span_s=spec.span_s)
    per_unit = 29  # fleet_history's series a unit
    scale = max(
        1, round(files.samples / (per_unit * fleet.instances * fleet.ranks * len(fleet.times)))
    )
    fleet = Fleet(instances=spec.n_instances * scale, ranks=spec.ranks, span_s=spec.span_s)
    base = a.dir / "baseline.om"

    def baseline() -> int:
        with base.open("w") as f:
            for chunk in openmetrics_chunks(fleet):
                f.write(chunk)
        return per_unit * fleet.instances * fleet.ranks * len(fleet.times)

    n, bwall, bcpu = _timed(baseline)
    bsize = base.stat().st_size
    print(
        f"baseline fleet_history ({fleet.instances}x{fleet.ranks}): {n:,} samples, "
        f"{bsize / 1e6:,.0f} MB in {bwall:.1f} s wall, {bcpu:.1f} CPU s -> {n / bwall:,.0f} "
        f"samples/s"
    )
    print(
        f"day writer: {files.samples / wall / (n / bwall):.2f}x the baseline's samples per "
        f"wall s; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB"
        f" ({os.cpu_count()} CPUs)"
    )
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
