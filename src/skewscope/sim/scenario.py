"""Scenarios: a cluster, its routing, its workload and the ground truth a diagnosis must find.

Scenarios are TOML files (the built-ins ship in ``skewscope/sim/scenarios``); this module reads
them into frozen dataclasses with one-line ``SimulationError`` messages naming the file and key.
Defaults live only on the dataclasses: the reader takes each field's type and default from there,
so a new field needs no parser change.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from skewscope.catalogue import Cause, Kind, Level, Verdict
from skewscope.errors import SimulationError
from skewscope.sim.limits import check_limits, units_problem
from skewscope.sim.policies import POLICIES, RoutingSpec, reads_load
from skewscope.sim.spec import GroundTruth, Health, PdSpec, RankSpec, Scenario
from skewscope.sim.toml_table import INT64, Table, require, scalars
from skewscope.sim.workload import (
    BUILTIN_TRACES,
    Burst,
    LengthDist,
    OnOff,
    RequestClass,
    TraceSpec,
    WorkloadSpec,
)
from skewscope.smallfile import load_toml

VERDICTS: tuple[Verdict, ...] = tuple(Verdict)
LEVELS: tuple[Level, ...] = tuple(Level)
CAUSES: tuple[Cause, ...] = tuple(Cause)
# The kinds a scenario's truth may name: those a simulated cause produces.
KINDS: tuple[Kind, ...] = (
    Kind.COUNT,
    Kind.WEIGHT,
    Kind.CAPABILITY,
    Kind.STALE_LOAD,
    Kind.PD_IMBALANCE,
)
SIDES = ("input", "output")
ARRIVALS = ("poisson", "onoff", "trace")
DISTS = ("lognormal", "pareto", "fixed")


def _read_rank(tbl: Table, base: RankSpec) -> RankSpec:
    spec = scalars(tbl, RankSpec, base)
    for k in ("max_running", "token_budget", "block_size", "total_blocks"):
        require(tbl, k, getattr(spec, k) >= 1, "must be >= 1")
    for k in ("fixed_ms", "per_prefill_token_ms", "per_decode_seq_ms"):
        require(tbl, k, getattr(spec, k) >= 0, "must be >= 0")
    require(tbl, "fixed_ms", spec.fixed_ms > 0, "must be > 0 (steps must take time)")
    require(tbl, "speed", spec.speed > 0, "must be > 0")
    return spec


def _read_length(tbl: Table | None, base: LengthDist) -> LengthDist:
    if tbl is None:
        return base
    d = scalars(tbl, LengthDist, base)
    tbl.done()
    require(tbl, "dist", d.dist in DISTS, f"must be one of {', '.join(DISTS)}")
    require(tbl, "min", 1 <= d.min <= d.max, "need 1 <= min <= max")
    require(tbl, "median", d.median > 0, "must be > 0")
    require(tbl, "sigma", d.sigma >= 0, "must be >= 0")
    require(tbl, "scale", d.scale > 0, "must be > 0")
    require(tbl, "alpha", d.alpha > 0, "must be > 0")
    return d


def _read_workload(tbl: Table, duration: float) -> WorkloadSpec:
    base = WorkloadSpec()
    arrival = tbl.get("arrival", str, base.arrival)
    require(tbl, "arrival", arrival in ARRIVALS, f"must be one of {', '.join(ARRIVALS)}")
    rate = tbl.get("rate", float, base.rate)
    require(tbl, "rate", rate >= 0, "must be >= 0")
    inp = _read_length(tbl.table("input"), base.input)
    out = _read_length(tbl.table("output"), base.output)
    classes = []
    for ct in tbl.tables("class"):
        tag = ct.get("tag", str)
        share = ct.get("share", float)
        require(ct, "share", 0 < share <= 1, "must be in (0, 1]")
        require(ct, "tag", tag != "", "must not be empty")
        classes.append(
            RequestClass(
                tag,
                share,
                _read_length(ct.table("input"), inp),
                _read_length(ct.table("output"), out),
            )
        )
        ct.done()
    require(tbl, "class", sum(c.share for c in classes) <= 1.0 + 1e-9, "shares sum above 1")
    burst = onoff = trace = None
    if (bt := tbl.table("burst")) is not None:
        burst = scalars(bt, Burst)
        bt.done()
        require(bt, "multiplier", burst.multiplier >= 1, "must be >= 1")
        require(bt, "duration_s", burst.duration_s > 0, "must be > 0")
        require(bt, "start_s", 0 <= burst.start_s < duration, "must lie inside the run")
    if (ot := tbl.table("onoff")) is not None:
        onoff = scalars(ot, OnOff)
        ot.done()
        require(ot, "on_s", onoff.on_s > 0 and onoff.off_s >= 0, "need on_s > 0, off_s >= 0")
        require(ot, "off_factor", 0 <= onoff.off_factor <= 1, "must be in [0, 1]")
    if (tt := tbl.table("trace")) is not None:
        trace = scalars(tt, TraceSpec)
        tt.done()
        require(
            tt,
            "format",
            trace.format in (None, "azure", "mooncake"),
            "must be 'azure' or 'mooncake'",
        )
        require(tt, "time_scale", trace.time_scale > 0, "must be > 0")
        src_dir = Path(tbl.src).parent
        if trace.source not in BUILTIN_TRACES and not Path(trace.source).is_absolute():
            trace = TraceSpec(
                str(src_dir / trace.source),
                trace.format,
                trace.time_scale,
                trace.max_input,
                trace.max_output,
            )
        require(
            tt,
            "source",
            trace.source in BUILTIN_TRACES or Path(trace.source).is_file(),
            f"no such trace file or built-in trace ({', '.join(BUILTIN_TRACES)})",
        )
    require(
        tbl,
        "arrival",
        arrival != "trace" or trace is not None,
        "'trace' needs a [workload.trace] table",
    )
    require(
        tbl,
        "arrival",
        arrival != "onoff" or onoff is not None,
        "'onoff' needs a [workload.onoff] table",
    )
    require(
        tbl,
        "class",
        arrival != "trace" or not classes,
        "request classes cannot be combined with trace replay",
    )
    sessions = tbl.get("sessions", int, base.sessions)
    heavy = tbl.get("heavy_session_share", float, base.heavy_session_share)
    require(tbl, "sessions", sessions >= 0, "must be >= 0")
    require(tbl, "heavy_session_share", 0 <= heavy <= 1, "must be in [0, 1]")
    tbl.done()
    return WorkloadSpec(
        arrival, rate, inp, out, tuple(classes), burst, onoff, trace, sessions, heavy
    )


def _read_routing(tbl: Table | None, n_units: int, names: list[str]) -> RoutingSpec:
    if tbl is None:
        return RoutingSpec()
    policy = tbl.get("policy", str, "round_robin")
    require(tbl, "policy", policy in POLICIES, f"must be one of {', '.join(POLICIES)}")
    weights = tbl.get("weights", tuple[float, ...], None)
    if weights is not None:
        require(tbl, "weights", len(weights) == n_units, f"needs {n_units} values")
        require(tbl, "weights", all(w > 0 for w in weights), "all weights must be > 0")
        require(tbl, "weights", policy == "weighted", "only used by policy 'weighted'")
    pin_tag = tbl.get("pin_tag", str, None)
    tbl.used.add("pin_units")
    raw = tbl.data.get("pin_units", [])
    if not isinstance(raw, list):
        raise tbl.error("pin_units", "expected an array")
    pins: list[int] = []
    for v in raw:
        if isinstance(v, str) and v in names:
            pins.append(names.index(v))
        elif isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n_units:
            pins.append(v)
        else:
            raise tbl.error(
                "pin_units",
                f"{v!r} is not a unit here ({names[0]}..{names[-1]} or 0..{n_units - 1})",
            )
    require(
        tbl, "pin_units", bool(pins) == (pin_tag is not None), "pin_tag and pin_units go together"
    )
    share = tbl.get("pin_share", float, 1.0)
    require(tbl, "pin_share", 0 <= share <= 1, "must be in [0, 1]")
    counted = tbl.get("pin_counted", bool, True)
    publish = tbl.get("publish_s", float, 0.0)
    require(tbl, "publish_s", math.isfinite(publish) and publish >= 0, "must be >= 0")
    require(
        tbl,
        "publish_s",
        publish == 0 or reads_load(RoutingSpec(policy)),
        f"only for a policy that reads load (not {policy!r})",
    )
    local = tbl.get("local_accounting", bool, False)
    require(tbl, "local_accounting", not local or publish > 0, "needs publish_s > 0")
    tbl.done()
    return RoutingSpec(policy, weights, pin_tag, tuple(pins), share, counted, publish, local)


def _read_truth(tbl: Table, name: str, units: set[str]) -> GroundTruth:
    t = GroundTruth(
        scenario=name,
        verdict=tbl.get("verdict", str),
        level=tbl.get("level", str, Level.INSTANCE),
        hot_units=tbl.get("hot_units", tuple[str, ...], ()),
        idle_units=tbl.get("idle_units", tuple[str, ...], ()),
        kind=tbl.get("kind", str, None),
        weight_side=tbl.get("weight_side", str, None),
        root_cause=tbl.get("root_cause", str, None),
        kv_exhausted=tbl.get("kv_exhausted", bool, False),
        description=tbl.get("description", str, ""),
        rotating_units=tbl.get("rotating_units", tuple[str, ...], ()),
    )
    tbl.done()
    require(tbl, "verdict", t.verdict in VERDICTS, f"must be one of {', '.join(VERDICTS)}")
    require(tbl, "level", t.level in LEVELS, f"must be one of {', '.join(LEVELS)}")
    require(tbl, "kind", t.kind in (None, *KINDS), f"must be one of {', '.join(KINDS)}")
    require(tbl, "weight_side", t.weight_side in (None, *SIDES), "must be 'input' or 'output'")
    require(
        tbl,
        "weight_side",
        (t.weight_side is not None) == (t.kind == Kind.WEIGHT),
        "is required for kind 'weight' and only for it",
    )
    require(
        tbl, "root_cause", t.root_cause in (None, *CAUSES), f"must be one of {', '.join(CAUSES)}"
    )
    require(
        tbl,
        "rotating_units",
        bool(t.rotating_units) == (t.kind == Kind.STALE_LOAD),
        "is required for kind 'stale_load' and only for it",
    )
    for k, us in (
        ("hot_units", t.hot_units),
        ("idle_units", t.idle_units),
        ("rotating_units", t.rotating_units),
    ):
        bad = [u for u in us if u not in units]
        require(tbl, k, not bad, f"unknown unit {bad[0] if bad else ''!r}")
    return t


def scenario_from_toml(data: dict[str, Any], source: str, default_name: str = "") -> Scenario:
    """Build a Scenario from parsed TOML; ``source`` names the file in error messages."""
    top = Table(data, source)
    name = top.get("name", str, default_name or Path(source).stem)
    duration = top.get("duration_s", float, 180.0)
    require(top, "duration_s", duration > 0, "must be > 0")
    seed = top.get("seed", int, 1)
    require(top, "seed", 0 <= seed <= INT64[1], "must be in [0, 2**63 - 1]")
    model = top.get("model_name", str, "sim-llama-8b")
    cl = top.table("cluster") or Table({}, source, "cluster")
    n_inst = cl.get("instances", int, 4)
    n_dp = cl.get("dp_ranks", int, 1)
    require(cl, "instances", n_inst >= 1, "must be >= 1")
    require(cl, "dp_ranks", n_dp >= 1, "must be >= 1")
    too_big = units_problem(n_inst, n_dp)
    require(cl, "instances", too_big is None, too_big or "")
    rt = cl.table("rank")
    rank = RankSpec()
    if rt is not None:
        rank = _read_rank(rt, rank)
        rt.done()
    names = [f"inst-{i}" for i in range(n_inst)]
    probe = Scenario(
        name,
        "",
        GroundTruth(name, Verdict.BALANCED, Level.INSTANCE),
        instances=n_inst,
        dp_ranks=n_dp,
    )
    units = probe.unit_ids()
    overrides: list[tuple[str, RankSpec]] = []
    for ot in cl.tables("override"):
        unit = ot.get("unit", str)
        require(ot, "unit", unit in units, f"unknown unit {unit!r}")
        overrides.append((unit, _read_rank(ot, _override_base(unit, overrides, rank))))
        ot.done()
    health: list[Health] = []
    for ht in cl.tables("health"):
        h = scalars(ht, Health)
        ht.done()
        require(ht, "instance", h.instance in names, f"unknown instance {h.instance!r}")
        require(ht, "fail_at_s", h.join_at_s < h.fail_at_s, "must be after join_at_s")
        health.append(h)
    cl.done()
    gateway = _read_routing(top.table("gateway"), n_inst, names)
    dispatcher = _read_routing(top.table("dispatcher"), n_dp, [str(d) for d in range(n_dp)])
    wt = top.table("workload") or Table({}, source, "workload")
    workload = _read_workload(wt, duration)
    tt = top.table("truth")
    if tt is None:
        raise top.error("truth", "required table is missing")
    truth = _read_truth(tt, name, units)
    summary = top.get("summary", str, "")
    pt, pd = top.table("pd"), None
    if pt is not None:
        pd = scalars(pt, PdSpec)
        pt.done()
        require(
            pt,
            "prefill_instances",
            1 <= pd.prefill_instances < n_inst,
            f"must be in [1, {n_inst - 1}] (prefill instances first, then decode)",
        )
        for k in ("transfer_ms", "decode_prefill_token_ms"):
            require(pt, k, math.isfinite(getattr(pd, k)) and getattr(pd, k) >= 0, "must be >= 0")
    top.done()
    sc = Scenario(
        name,
        summary,
        truth,
        duration,
        seed,
        n_inst,
        n_dp,
        rank,
        tuple(overrides),
        tuple(health),
        gateway,
        dispatcher,
        workload,
        model,
        source,
        pd=pd,
    )
    check_limits(sc, keep_steps=False)  # the least a run holds; keeping its steps: the caller
    if not summary:
        sc = dataclasses.replace(sc, summary=default_summary(sc))
    return sc


def _override_base(unit: str, overrides: list[tuple[str, RankSpec]], rank: RankSpec) -> RankSpec:
    """An override starts from the cluster's rank spec (or an earlier override of the same
    instance, so ``inst-0`` then ``inst-0/dp1`` compose)."""
    inst = unit.split("/")[0]
    base = rank
    for u, s in overrides:
        if u in (unit, inst):
            base = s
    return base


def default_summary(sc: Scenario) -> str:
    t = sc.truth
    what = t.verdict if t.verdict != Verdict.IMBALANCED else f"{t.kind or ''} skew".strip()
    return (
        f"{sc.instances}x{sc.dp_ranks} units, {sc.workload.describe()}, {sc.duration_s:g} s: {what}"
    )


def read_scenario_file(path: Path) -> Scenario:
    """A scenario TOML file: read by the one small-file reader (a regular UTF-8 file, bounded
    in size and nesting), then checked field by field; anything else is one line, exit 5."""
    data = load_toml(path, str(path), error=SimulationError)
    return scenario_from_toml(data, str(path))


@cache
def _builtins() -> tuple[Scenario, ...]:
    folder = resources.files("skewscope.sim") / "scenarios"
    out = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            out.append(read_scenario_file(Path(str(entry))))
    return tuple(out)


def builtin_scenarios() -> dict[str, Scenario]:
    """The shipped scenarios by name (one per classification row and root cause)."""
    return {s.name: s for s in _builtins()}


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a scenario TOML file by path."""
    builtins = builtin_scenarios()
    if name_or_path in builtins:
        return builtins[name_or_path]
    # prefill/decode scenarios (sim/pd.py): kept apart from the accuracy set, whose scoring is
    # per hot unit; their truth is a pool finding or a unit inside one pool
    pd_file = resources.files("skewscope.sim") / "scenarios" / "pd" / f"{name_or_path}.toml"
    if pd_file.is_file():
        return read_scenario_file(Path(str(pd_file)))
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.exists():  # a FIFO, device or folder is refused by the reader, by kind
            raise SimulationError(f"{path}: no such scenario file")
        return read_scenario_file(path)
    raise SimulationError(
        f"unknown scenario {name_or_path!r}; built-ins: {', '.join(sorted(builtins))}"
    )
