"""Scenarios: a cluster, its routing, its workload and the ground truth a diagnosis must find.

Scenarios are TOML files (the built-ins ship in ``skewscope/sim/scenarios``); this module reads
them into frozen dataclasses with one-line ``SimulationError`` messages naming the file and key.
Defaults live only on the dataclasses: the reader takes each field's type and default from there,
so a new field needs no parser change.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import MISSING, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from skewscope.catalogue import Cause, Kind, Level, Verdict
from skewscope.errors import SimulationError
from skewscope.sim.limits import check_limits, units_problem
from skewscope.sim.policies import POLICIES, RoutingSpec, reads_load
from skewscope.sim.spec import GroundTruth, Health, PdSpec, RankSpec, Scenario
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


# --- TOML reading --------------------------------------------------------------------------

T = TypeVar("T")


class _Table:
    """A TOML table that remembers its file and dotted path, for one-line errors."""

    def __init__(self, data: dict[str, Any], src: str, path: str = "") -> None:
        self.data = data
        self.src = src
        self.path = path
        self.used: set[str] = set()

    def key(self, k: str) -> str:
        return f"{self.path}.{k}" if self.path else k

    def error(self, k: str, msg: str) -> SimulationError:
        return SimulationError(f"{self.src}: key '{self.key(k)}': {msg}")

    def has(self, k: str) -> bool:
        return k in self.data

    def get(self, k: str, typ: Any, default: Any = MISSING) -> Any:
        self.used.add(k)
        if k not in self.data:
            if default is MISSING:
                raise self.error(k, "required key is missing")
            return default
        return _coerce(self, k, self.data[k], typ)

    def table(self, k: str) -> _Table | None:
        self.used.add(k)
        v = self.data.get(k)
        if v is None:
            return None
        if not isinstance(v, dict):
            raise self.error(k, f"expected a table, got {type(v).__name__}")
        return _Table(v, self.src, self.key(k))

    def tables(self, k: str) -> list[_Table]:
        self.used.add(k)
        v = self.data.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            raise self.error(k, "expected an array of tables ([[...]])")
        return [_Table(x, self.src, f"{self.key(k)}[{n}]") for n, x in enumerate(v)]

    def done(self) -> None:
        extra = sorted(set(self.data) - self.used)
        if extra:
            raise self.error(extra[0], "unknown key")


INT64 = (-(2**63), 2**63 - 1)  # what a TOML integer may be (and a seed, as simulate --seed)


def _coerce(tbl: _Table, k: str, v: Any, typ: Any) -> Any:
    """Check a TOML value against a dataclass field type (ints are accepted for floats)."""
    origin = typing.get_origin(typ)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        return _coerce(tbl, k, v, args[0])
    if origin is tuple:
        if not isinstance(v, list):
            raise tbl.error(k, f"expected an array, got {type(v).__name__}")
        return tuple(_coerce(tbl, k, x, typing.get_args(typ)[0]) for x in v)
    if isinstance(v, int) and not isinstance(v, bool) and not INT64[0] <= v <= INT64[1]:
        # TOML integers are 64-bit; a larger one is no setting (and no float: 10**400)
        raise tbl.error(k, f"expected a 64-bit integer, got a {len(str(abs(v)))}-digit number")
    if typ is bool:
        ok = isinstance(v, bool)
    elif typ is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif typ is float:
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        v = float(v) if ok else v
        if ok and not math.isfinite(v):
            raise tbl.error(k, f"expected a finite number, got {v!r}")
    elif typ is str:
        ok = isinstance(v, str)
        bad = next((c for c in v if not c.isprintable()), None) if ok else None
        if bad is not None:  # a name is printed: an ESC sequence would drive the terminal
            raise tbl.error(
                k,
                f"expected printable text, got a control character "
                f"{bad.encode('unicode_escape').decode()}",
            )
    else:  # pragma: no cover - only the scalar types above appear in specs
        raise tbl.error(k, f"unsupported field type {typ}")
    if not ok:
        raise tbl.error(k, f"expected {typ.__name__}, got {type(v).__name__} {v!r}")
    return v


def _scalars(tbl: _Table, cls: type[T], base: T | None = None) -> T:
    """Read the scalar fields of dataclass ``cls`` from ``tbl``; unset fields come from ``base``
    (or the dataclass default)."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if base is not None:
            default = getattr(base, f.name)
        elif f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        kwargs[f.name] = tbl.get(f.name, hints[f.name], default)
    return cls(**kwargs)


def _require(tbl: _Table, k: str, ok: bool, msg: str) -> None:
    if not ok:
        raise tbl.error(k, msg)


def _read_rank(tbl: _Table, base: RankSpec) -> RankSpec:
    spec = _scalars(tbl, RankSpec, base)
    for k in ("max_running", "token_budget", "block_size", "total_blocks"):
        _require(tbl, k, getattr(spec, k) >= 1, "must be >= 1")
    for k in ("fixed_ms", "per_prefill_token_ms", "per_decode_seq_ms"):
        _require(tbl, k, getattr(spec, k) >= 0, "must be >= 0")
    _require(tbl, "fixed_ms", spec.fixed_ms > 0, "must be > 0 (steps must take time)")
    _require(tbl, "speed", spec.speed > 0, "must be > 0")
    return spec


def _read_length(tbl: _Table | None, base: LengthDist) -> LengthDist:
    if tbl is None:
        return base
    d = _scalars(tbl, LengthDist, base)
    tbl.done()
    _require(tbl, "dist", d.dist in DISTS, f"must be one of {', '.join(DISTS)}")
    _require(tbl, "min", 1 <= d.min <= d.max, "need 1 <= min <= max")
    _require(tbl, "median", d.median > 0, "must be > 0")
    _require(tbl, "sigma", d.sigma >= 0, "must be >= 0")
    _require(tbl, "scale", d.scale > 0, "must be > 0")
    _require(tbl, "alpha", d.alpha > 0, "must be > 0")
    return d


def _read_workload(tbl: _Table, duration: float) -> WorkloadSpec:
    base = WorkloadSpec()
    arrival = tbl.get("arrival", str, base.arrival)
    _require(tbl, "arrival", arrival in ARRIVALS, f"must be one of {', '.join(ARRIVALS)}")
    rate = tbl.get("rate", float, base.rate)
    _require(tbl, "rate", rate >= 0, "must be >= 0")
    inp = _read_length(tbl.table("input"), base.input)
    out = _read_length(tbl.table("output"), base.output)
    classes = []
    for ct in tbl.tables("class"):
        tag = ct.get("tag", str)
        share = ct.get("share", float)
        _require(ct, "share", 0 < share <= 1, "must be in (0, 1]")
        _require(ct, "tag", tag != "", "must not be empty")
        classes.append(
            RequestClass(
                tag,
                share,
                _read_length(ct.table("input"), inp),
                _read_length(ct.table("output"), out),
            )
        )
        ct.done()
    _require(tbl, "class", sum(c.share for c in classes) <= 1.0 + 1e-9, "shares sum above 1")
    burst = onoff = trace = None
    if (bt := tbl.table("burst")) is not None:
        burst = _scalars(bt, Burst)
        bt.done()
        _require(bt, "multiplier", burst.multiplier >= 1, "must be >= 1")
        _require(bt, "duration_s", burst.duration_s > 0, "must be > 0")
        _require(bt, "start_s", 0 <= burst.start_s < duration, "must lie inside the run")
    if (ot := tbl.table("onoff")) is not None:
        onoff = _scalars(ot, OnOff)
        ot.done()
        _require(ot, "on_s", onoff.on_s > 0 and onoff.off_s >= 0, "need on_s > 0, off_s >= 0")
        _require(ot, "off_factor", 0 <= onoff.off_factor <= 1, "must be in [0, 1]")
    if (tt := tbl.table("trace")) is not None:
        trace = _scalars(tt, TraceSpec)
        tt.done()
        _require(
            tt,
            "format",
            trace.format in (None, "azure", "mooncake"),
            "must be 'azure' or 'mooncake'",
        )
        _require(tt, "time_scale", trace.time_scale > 0, "must be > 0")
        src_dir = Path(tbl.src).parent
        if trace.source not in BUILTIN_TRACES and not Path(trace.source).is_absolute():
            trace = TraceSpec(
                str(src_dir / trace.source),
                trace.format,
                trace.time_scale,
                trace.max_input,
                trace.max_output,
            )
        _require(
            tt,
            "source",
            trace.source in BUILTIN_TRACES or Path(trace.source).is_file(),
            f"no such trace file or built-in trace ({', '.join(BUILTIN_TRACES)})",
        )
    _require(
        tbl,
        "arrival",
        arrival != "trace" or trace is not None,
        "'trace' needs a [workload.trace] table",
    )
    _require(
        tbl,
        "arrival",
        arrival != "onoff" or onoff is not None,
        "'onoff' needs a [workload.onoff] table",
    )
    _require(
        tbl,
        "class",
        arrival != "trace" or not classes,
        "request classes cannot be combined with trace replay",
    )
    sessions = tbl.get("sessions", int, base.sessions)
    heavy = tbl.get("heavy_session_share", float, base.heavy_session_share)
    _require(tbl, "sessions", sessions >= 0, "must be >= 0")
    _require(tbl, "heavy_session_share", 0 <= heavy <= 1, "must be in [0, 1]")
    tbl.done()
    return WorkloadSpec(
        arrival, rate, inp, out, tuple(classes), burst, onoff, trace, sessions, heavy
    )


def _read_routing(tbl: _Table | None, n_units: int, names: list[str]) -> RoutingSpec:
    if tbl is None:
        return RoutingSpec()
    policy = tbl.get("policy", str, "round_robin")
    _require(tbl, "policy", policy in POLICIES, f"must be one of {', '.join(POLICIES)}")
    weights = tbl.get("weights", tuple[float, ...], None)
    if weights is not None:
        _require(tbl, "weights", len(weights) == n_units, f"needs {n_units} values")
        _require(tbl, "weights", all(w > 0 for w in weights), "all weights must be > 0")
        _require(tbl, "weights", policy == "weighted", "only used by policy 'weighted'")
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
    _require(
        tbl, "pin_units", bool(pins) == (pin_tag is not None), "pin_tag and pin_units go together"
    )
    share = tbl.get("pin_share", float, 1.0)
    _require(tbl, "pin_share", 0 <= share <= 1, "must be in [0, 1]")
    counted = tbl.get("pin_counted", bool, True)
    publish = tbl.get("publish_s", float, 0.0)
    _require(tbl, "publish_s", math.isfinite(publish) and publish >= 0, "must be >= 0")
    _require(
        tbl,
        "publish_s",
        publish == 0 or reads_load(RoutingSpec(policy)),
        f"only for a policy that reads load (not {policy!r})",
    )
    local = tbl.get("local_accounting", bool, False)
    _require(tbl, "local_accounting", not local or publish > 0, "needs publish_s > 0")
    tbl.done()
    return RoutingSpec(policy, weights, pin_tag, tuple(pins), share, counted, publish, local)


def _read_truth(tbl: _Table, name: str, units: set[str]) -> GroundTruth:
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
    _require(tbl, "verdict", t.verdict in VERDICTS, f"must be one of {', '.join(VERDICTS)}")
    _require(tbl, "level", t.level in LEVELS, f"must be one of {', '.join(LEVELS)}")
    _require(tbl, "kind", t.kind in (None, *KINDS), f"must be one of {', '.join(KINDS)}")
    _require(tbl, "weight_side", t.weight_side in (None, *SIDES), "must be 'input' or 'output'")
    _require(
        tbl,
        "weight_side",
        (t.weight_side is not None) == (t.kind == Kind.WEIGHT),
        "is required for kind 'weight' and only for it",
    )
    _require(
        tbl, "root_cause", t.root_cause in (None, *CAUSES), f"must be one of {', '.join(CAUSES)}"
    )
    _require(
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
        _require(tbl, k, not bad, f"unknown unit {bad[0] if bad else ''!r}")
    return t


def scenario_from_toml(data: dict[str, Any], source: str, default_name: str = "") -> Scenario:
    """Build a Scenario from parsed TOML; ``source`` names the file in error messages."""
    top = _Table(data, source)
    name = top.get("name", str, default_name or Path(source).stem)
    duration = top.get("duration_s", float, 180.0)
    _require(top, "duration_s", duration > 0, "must be > 0")
    seed = top.get("seed", int, 1)
    _require(top, "seed", 0 <= seed <= INT64[1], "must be in [0, 2**63 - 1]")
    model = top.get("model_name", str, "sim-llama-8b")
    cl = top.table("cluster") or _Table({}, source, "cluster")
    n_inst = cl.get("instances", int, 4)
    n_dp = cl.get("dp_ranks", int, 1)
    _require(cl, "instances", n_inst >= 1, "must be >= 1")
    _require(cl, "dp_ranks", n_dp >= 1, "must be >= 1")
    too_big = units_problem(n_inst, n_dp)
    _require(cl, "instances", too_big is None, too_big or "")
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
        _require(ot, "unit", unit in units, f"unknown unit {unit!r}")
        overrides.append((unit, _read_rank(ot, _override_base(unit, overrides, rank))))
        ot.done()
    health: list[Health] = []
    for ht in cl.tables("health"):
        h = _scalars(ht, Health)
        ht.done()
        _require(ht, "instance", h.instance in names, f"unknown instance {h.instance!r}")
        _require(ht, "fail_at_s", h.join_at_s < h.fail_at_s, "must be after join_at_s")
        health.append(h)
    cl.done()
    gateway = _read_routing(top.table("gateway"), n_inst, names)
    dispatcher = _read_routing(top.table("dispatcher"), n_dp, [str(d) for d in range(n_dp)])
    wt = top.table("workload") or _Table({}, source, "workload")
    workload = _read_workload(wt, duration)
    tt = top.table("truth")
    if tt is None:
        raise top.error("truth", "required table is missing")
    truth = _read_truth(tt, name, units)
    summary = top.get("summary", str, "")
    pt, pd = top.table("pd"), None
    if pt is not None:
        pd = _scalars(pt, PdSpec)
        pt.done()
        _require(
            pt,
            "prefill_instances",
            1 <= pd.prefill_instances < n_inst,
            f"must be in [1, {n_inst - 1}] (prefill instances first, then decode)",
        )
        for k in ("transfer_ms", "decode_prefill_token_ms"):
            _require(pt, k, math.isfinite(getattr(pd, k)) and getattr(pd, k) >= 0, "must be >= 0")
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
