"""Size limits a scenario is checked against before anything is allocated.

A typo such as ``rate = 1e12`` or ``instances = 1e9`` must be one clear error naming the key, not
gigabytes eaten before a MemoryError. The limits are generous for real studies (the benchmark's
hour of 8 x 4 ranks at 64 req/s is well inside) and documented in docs/simulator.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skewscope.errors import SimulationError

if TYPE_CHECKING:
    from skewscope.sim.spec import Scenario

MAX_DURATION_S = 7 * 86400.0  # simulated seconds in one run
MAX_UNITS = 1024  # instances x dp_ranks
MAX_REQUESTS = 2_000_000  # expected arrivals: rate x duration (+ burst extra); ~200 B each
# Memory a run may hold: its request state and tables, plus its step table when the tables are
# kept (a streamed run holds one time chunk of steps: ``engine.CHUNK_ROWS``).
MAX_RUN_BYTES = 4 * 2**30
REQUEST_BYTES = 200  # one request's state and table row
STEP_BYTES = 160  # one kept step row (18 columns)
# Engine steps of a run that streams its steps (Σ ranks duration / step time): its memory is
# bounded, its time is not (~1 M steps per CPU s; issue 14's goal hour is ~74 M at most).
MAX_STREAMED_STEPS = 1_000_000_000
MAX_TOKENS = 10_000_000  # tokens in one request's prompt or output (the longest contexts: ~10M)
MAX_BLOCK_SIZE = 1024  # tokens per KV block (a rank keeps one counter per block offset)


def units_problem(instances: int, dp_ranks: int) -> str | None:
    """Why a cluster of this size is refused, or None (checked before unit ids are built)."""
    if instances * dp_ranks <= MAX_UNITS:
        return None
    return (
        f"{instances} instances x {dp_ranks} dp_ranks = {instances * dp_ranks} ranks, "
        f"above the limit of {MAX_UNITS}"
    )


def expected_requests(sc: Scenario) -> float:
    """Mean number of synthetic arrivals in the run (trace replay is bounded by its file)."""
    w = sc.workload
    if w.arrival == "trace":
        return 0.0
    n = w.rate * sc.duration_s
    if w.burst is not None:
        n += w.rate * (w.burst.multiplier - 1.0) * min(w.burst.duration_s, sc.duration_s)
    return n


def check_limits(sc: Scenario, keep_steps: bool = True) -> None:
    """Refuse a scenario whose size would exhaust memory or time (limits above, named once).

    ``keep_steps=False``: the run streams its steps (``simulate(on_steps=...)``)."""
    src = sc.source
    if sc.duration_s > MAX_DURATION_S:
        raise SimulationError(
            f"{src}: key 'duration_s': {sc.duration_s:g} s is above the limit "
            f"of {MAX_DURATION_S:g} s (7 days)"
        )
    if (units := units_problem(sc.instances, sc.dp_ranks)) is not None:
        raise SimulationError(f"{src}: key 'cluster.instances': {units}")
    n = expected_requests(sc)
    if n > MAX_REQUESTS:
        raise SimulationError(
            f"{src}: key 'workload.rate': rate x duration_s = {n:,.0f} "
            f"expected requests, above the limit of {MAX_REQUESTS:,}"
        )
    w = sc.workload
    lengths = [("workload.input", w.input.max), ("workload.output", w.output.max)]
    for k, c in enumerate(w.classes):
        lengths += [
            (f"workload.class[{k}].input", c.input.max),
            (f"workload.class[{k}].output", c.output.max),
        ]
    if w.trace is not None:
        lengths += [
            ("workload.trace.max_input", w.trace.max_input),
            ("workload.trace.max_output", w.trace.max_output),
        ]
    for key, most in lengths:
        if most > MAX_TOKENS:
            shown = key if key.startswith("workload.trace") else f"{key}.max"
            raise SimulationError(
                f"{src}: key '{shown}': {most:,} tokens is above the limit of "
                f"{MAX_TOKENS:,} per request"
            )
    where = [("cluster.rank", sc.rank)] + [
        (f"cluster.override (unit {u})", s) for u, s in sc.overrides
    ]
    for key, spec in where:
        if spec.block_size > MAX_BLOCK_SIZE:
            raise SimulationError(
                f"{src}: key '{key}.block_size': {spec.block_size} is above "
                f"the limit of {MAX_BLOCK_SIZE}"
            )
    if not keep_steps and (steps := max_steps(sc)) > MAX_STREAMED_STEPS:
        raise SimulationError(
            f"{src}: key 'cluster.rank.fixed_ms': ranks x duration_s / step "
            f"time allows {steps:,.0f} engine steps, above the limit of "
            f"{MAX_STREAMED_STEPS:,} (shorten the run or use fewer ranks)"
        )
    need = run_bytes(sc, keep_steps)
    if need > MAX_RUN_BYTES:
        raise SimulationError(
            f"{src}: key 'cluster.rank.fixed_ms': ranks x duration_s / step "
            f"time allows {max_steps(sc):,.0f} engine steps; with "
            f"{n:,.0f} requests the run would hold ~{need / 2**30:.1f} GiB, "
            f"above the limit of {MAX_RUN_BYTES / 2**30:g} GiB (shorten the "
            "run or use fewer ranks)"
        )


def max_steps(sc: Scenario) -> float:
    """Engine steps if every rank were busy throughout: sum over ranks of duration / step."""
    return sum(
        sc.duration_s / (s.fixed_ms * s.speed / 1000.0)
        for s in (sc.rank_spec(i, d) for i in range(sc.instances) for d in range(sc.dp_ranks))
    )


def run_bytes(sc: Scenario, keep_steps: bool = True) -> float:
    """Memory the run holds at most: requests, and every step when its table is kept."""
    steps = max_steps(sc) if keep_steps else 0.0
    return expected_requests(sc) * REQUEST_BYTES + steps * STEP_BYTES
