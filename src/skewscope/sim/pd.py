"""Prefill/decode disaggregated serving: a prefill pool computes each prompt and hands the
request to a decode pool that generates the rest.

A scenario with a ``[pd]`` table runs as two fleets: the first ``prefill_instances`` instances
take every arrival as a prefill-only request (its prompt, one output token), each request then
arrives at the decode pool when its first token is out (plus the KV transfer), with its prompt's
KV already computed (a decode instance pays ``decode_prefill_token_ms`` per prompt token to load
it instead of computing it) and the rest of its output to generate. Each pool has its own
router of the scenario's gateway policy; the two runs are one result (instances renamed in
fleet order), with each instance's pool in ``SimResult.meta["pools"]`` so the writers label
it as the dialect does (writers/metric_specs.py ``ROLE_LABELS``). The run knows nothing of the
detector: the pools are what the scenario says they are.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from skewscope.catalogue import DECODE, PREFILL
from skewscope.errors import SimulationError
from skewscope.sim.spec import PdSpec

if TYPE_CHECKING:
    from skewscope.sim.records import SimResult
    from skewscope.sim.spec import Scenario
    from skewscope.sim.workload import Workload


def pools_of(scenario: Scenario, pd: PdSpec) -> dict[str, str]:
    """Instance name -> pool: the first ``prefill_instances`` prefill, the rest decode."""
    return {
        scenario.instance_name(i): PREFILL if i < pd.prefill_instances else DECODE
        for i in range(scenario.instances)
    }


def _rename(unit: str, lo: int) -> str | None:
    """``inst-5/dp1`` in the fleet -> its name in the pool starting at ``lo`` (None: not in)."""
    inst, _, rank = unit.partition("/")
    i = int(inst.removeprefix("inst-")) - lo
    return None if i < 0 else (f"inst-{i}/{rank}" if rank else f"inst-{i}")


def _pool_scenario(sc: Scenario, lo: int, hi: int, decode: bool, pd: PdSpec) -> Scenario:
    """The fleet's instances [lo, hi) as a scenario of their own (names from inst-0)."""

    def fits(u: str | None) -> bool:
        return u is not None and int(u.split("/")[0].removeprefix("inst-")) < hi - lo

    def spec(s: Any) -> Any:
        return (
            dataclasses.replace(s, per_prefill_token_ms=pd.decode_prefill_token_ms) if decode else s
        )

    overrides = tuple(
        (u, spec(s)) for unit, s in sc.overrides if fits(u := _rename(unit, lo)) and u is not None
    )
    health = tuple(
        dataclasses.replace(h, instance=str(_rename(h.instance, lo)))
        for h in sc.health
        if fits(_rename(h.instance, lo))
    )
    gw = sc.gateway
    gateway = dataclasses.replace(
        gw,
        weights=None if gw.weights is None else gw.weights[lo:hi],
        pin_units=tuple(u - lo for u in gw.pin_units if lo <= u < hi),
    )
    return dataclasses.replace(
        sc,
        instances=hi - lo,
        rank=spec(sc.rank),
        overrides=overrides,
        health=health,
        gateway=gateway,
        dp_sizes=sc.dp_sizes[lo:hi],
        pd=None,
    )


def _subset(
    wl: Workload,
    keep: np.ndarray,
    arrival: np.ndarray,
    output: np.ndarray,
) -> Workload:
    order = np.argsort(arrival[keep], kind="stable")
    idx = np.flatnonzero(keep)[order]
    return dataclasses.replace(
        wl,
        arrival_s=arrival[idx],
        input_tokens=wl.input_tokens[idx],
        output_tokens=output[idx],
        tag=wl.tag[idx],
        session=wl.session[idx],
        instance_hint=None,
        rank_hint=None,
    )


def simulate_pd(
    scenario: Scenario,
    pd: PdSpec,
    run: Any,
    *,
    seed: int,
    duration: float,
    workload: Workload,
    **kw: Any,
) -> SimResult:
    """The scenario's fleet as a prefill pool and a decode pool (``run`` = ``engine.simulate``
    for one pool). ``workload``: the requests as the gateway sees them."""
    import polars as pl

    from skewscope.sim.records import START_S

    n_p = pd.prefill_instances
    if not 1 <= n_p < scenario.instances:
        raise SimulationError(
            f"[pd] prefill_instances must be in [1, {scenario.instances - 1}]"
            f" (the fleet has {scenario.instances} instances), got {n_p}"
        )
    ones = np.ones(len(workload), dtype=np.int64)
    pre = run(
        _pool_scenario(scenario, 0, n_p, False, pd),
        workload=dataclasses.replace(workload, output_tokens=ones),
        seed=seed,
        duration_s=duration,
        **kw,
    )
    first = pre.requests["first_token_s"].fill_null(np.nan).to_numpy() - START_S
    done = np.isfinite(first)
    rest = np.maximum(workload.output_tokens - 1, 1)
    handed = _subset(workload, done, first + pd.transfer_ms / 1000.0, rest)
    dec = run(
        _pool_scenario(scenario, n_p, scenario.instances, True, pd),
        workload=handed,
        seed=seed + 1,
        duration_s=duration,
        **kw,
    )
    names = {f"inst-{i}": f"inst-{i + n_p}" for i in range(scenario.instances - n_p)}
    ranks = [*pre.ranks, *(dataclasses.replace(r, instance=names[r.instance]) for r in dec.ranks)]

    def moved(df: pl.DataFrame | None, step_offset: int) -> pl.DataFrame | None:
        if df is None:
            return None
        out = df
        if "instance" in df.columns:
            out = out.with_columns(pl.col("instance").replace(names))
        if "step_id" in df.columns:
            out = out.with_columns(pl.col("step_id") + step_offset)
        return out

    offset = int(pre.steps["step_id"].max() or 0) + 1 if pre.steps.height else 0
    steps = pl.concat([pre.steps, moved(dec.steps, offset)])
    members = (
        None
        if pre.members is None or dec.members is None
        else pl.concat([pre.members, moved(dec.members, offset)])
    )
    requests = pl.concat([pre.requests, moved(dec.requests, 0)])
    stats = {
        k: pre.run_stats.get(k, 0.0) + dec.run_stats.get(k, 0.0)
        for k in {*pre.run_stats, *dec.run_stats}
    }
    if "kv_peak" in stats:
        stats["kv_peak"] = max(pre.run_stats.get("kv_peak", 0.0), dec.run_stats.get("kv_peak", 0.0))
    out: SimResult = dataclasses.replace(
        pre,
        ranks=ranks,
        requests=requests,
        steps=steps,
        members=members,
        truth=scenario.truth,
        end_s=max(pre.end_s, dec.end_s),
        run_stats=stats,
        meta={**pre.meta, "pools": pools_of(scenario, pd)},
        outputs=[*pre.outputs, *dec.outputs],
    )
    return out
