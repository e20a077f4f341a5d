"""Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics) -> Evidence.

One ``label/__name__/values`` call finds which metric names exist (dialect and aliases), then one
``query_range`` per signal and level fetches every unit at once. Windows are aligned to
multiples of the window length since the epoch (as Grafana and VictoriaMetrics' cache do), so
the same range gives the same windows on every backend; only whole windows inside
[start, end] are used. Each evaluation at time t covers the window (t - W, t].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from skewscope.errors import SourceError, UsageError
from skewscope.frame import WINDOWS, Evidence, Level, WindowPolicy
from skewscope.settings import DEFAULT_LIMITS, SourceLimits
from skewscope.sources.auth import HttpAuth, normalise_url
from skewscope.sources.daemon_pool import DaemonPool
from skewscope.sources.device_exporters import resolve_devices
from skewscope.sources.devices import DeviceMap, DeviceSeries
from skewscope.sources.dialects import SIGNAL_SPECS, Alias, detect_dialect, get_dialect, resolve
from skewscope.sources.evidence import Values, build_evidence
from skewscope.sources.pools import resolve_pools
from skewscope.sources.prom_client import PromClient
from skewscope.sources.prom_devices import join_devices, read_device_series
from skewscope.sources.prom_duplicates import duplicate_notes
from skewscope.sources.prom_matrix import plan_windows
from skewscope.sources.prom_plan import Job, plan_jobs
from skewscope.sources.prom_span import empty_range_error
from skewscope.sources.prom_tables import load_tables
from skewscope.sources.promql import normalise_selector


@dataclass(frozen=True)
class RangePlan:
    """What the metric names of a range decide before any table is read: the dialect, the
    aliases per level, the queries, and the device exporters' names. ``key`` is the same for
    two ranges read by the same queries (an incremental watch keeps its tables while it is)."""

    names: tuple[str, ...]
    dialect: str
    resolved: dict[Level, dict[str, Alias]]
    levels: tuple[Level, ...]
    jobs: tuple[Job, ...]
    device_names: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def key(self) -> tuple[object, ...]:
        return (
            self.dialect,
            tuple(job.query for job in self.jobs),
            tuple(a.name for a in self.device_aliases()),
        )

    def device_aliases(self) -> list[Alias]:
        return [alias for _, _, alias in resolve_devices(list(self.device_names))]


@dataclass
class RangeTables:
    """The per-window tables one read fetched (engine signals and bucket-bound marks per level,
    device series), the series without a usable unit, and the read's own notes."""

    per_level: dict[Level, Values]
    devices: list[DeviceSeries]
    device_aliases: dict[str, str]
    bad: list[str]
    notes: list[str]


def plan_range(
    client: PromClient,
    *,
    start: float,
    end: float,
    selector: str,
    dialect: str | None,
    window_s: float,
    device_selector: str,
    url_note: str | None = None,
    shared_plan: bool = True,
) -> RangePlan:
    """Read the metric names of [start, end] and decide the queries (no sample is read);
    ``shared_plan=False``: the former per-level queries (``prom_plan``: the same tables)."""
    names = client.metric_names(start, end, selector)
    try:
        chosen = get_dialect(dialect) if dialect else get_dialect(detect_dialect(names))
    except SourceError as e:  # none in the range: does the server hold some elsewhen?
        raise empty_range_error(client, start, end, selector) or e from None
    resolved = {lvl: resolve(chosen, names, lvl) for lvl in (Level.INSTANCE, Level.DP)}
    notes = [f"dialect: {chosen.name} ({'given' if dialect else 'detected'})"]
    if url_note:
        notes.append(url_note)
    levels = [Level.INSTANCE]
    if resolved[Level.DP]:
        levels.append(Level.DP)
    jobs = plan_jobs(resolved, levels, window_s=window_s, selector=selector, shared=shared_plan)
    # the engine selector does not apply to device exporters: list their names apart
    dev_names = (
        client.metric_names(start, end, device_selector) if selector or device_selector else names
    )
    if not resolved[Level.INSTANCE] or not resolve_devices(dev_names):
        dev_names = []  # no engine to join devices to, or no device exporter
    return RangePlan(
        tuple(names),
        chosen.name,
        resolved,
        tuple(levels),
        tuple(jobs),
        tuple(dev_names),
        tuple(notes),
    )


def read_tables(
    client: PromClient,
    plan: RangePlan,
    *,
    span: tuple[float, float, float],
    selector: str,
    device_selector: str,
    max_workers: int = 4,
    duplicates_range_s: float | None = None,
) -> RangeTables:
    """Fetch ``plan``'s tables for the windows of ``span`` (first evaluation, last, window).
    With ``duplicates_range_s`` the units exported twice over that range (ending at the last
    evaluation) are noted too, checked beside the tables."""
    last_t = span[1]
    first = next(
        (
            plan.resolved[Level.INSTANCE][s.signal]
            for s in SIGNAL_SPECS
            if s.signal in plan.resolved[Level.INSTANCE]
        ),
        None,
    )
    notes: list[str] = []
    with DaemonPool(1) as side:  # beside the tables, not after them
        dup = (
            None
            if first is None or duplicates_range_s is None
            else side.submit(
                duplicate_notes,
                client,
                first,
                last_t=last_t,
                range_s=duplicates_range_s,
                selector=selector,
            )
        )
        per_level, bad, bound_notes = load_tables(
            client,
            list(plan.jobs),
            list(plan.levels),
            selector=selector,
            span=span,
            max_workers=max_workers,
        )
        notes += bound_notes + (dup.result() if dup is not None else [])
    devices, device_aliases = read_device_series(
        client, list(plan.device_names), span=span, device_selector=device_selector
    )
    return RangeTables(per_level, devices, device_aliases, bad, notes)


def evidence_of(
    client: PromClient,
    plan: RangePlan,
    tables: RangeTables,
    *,
    start: float,
    end: float,
    selector: str,
    window_s: float,
    device_map: DeviceMap | None,
    role_label: str = "",
) -> Evidence:
    """The Evidence of ``tables`` (read, or kept and merged, for the range [start, end]); each
    unit's prefill/decode pool from the series carrying the role label (sources/pools.py)."""
    notes = [*plan.notes, *tables.notes]
    if tables.bad:
        notes.append(
            f"skipped {len(tables.bad)} series without a usable instance or DP label "
            f"(e.g. {sorted(set(tables.bad))[0]})"
        )
    if not tables.per_level[Level.INSTANCE]:
        if not plan.names:
            raise empty_range_error(client, start, end, selector) or SourceError(
                f"{client.where} holds no samples in this range; widen it or check the selector"
            )
        raise SourceError(
            f"{client.where} has {plan.dialect} metric names but no samples "
            "in whole windows of the range; widen the range or check the selector"
        )
    engine_alias = next(iter(plan.resolved[Level.INSTANCE].values()), None)
    per_level, device_notes = join_devices(
        client,
        tables.devices,
        engine_alias,
        tables.per_level,
        start=start,
        end=end,
        selector=selector,
        device_map=device_map,
    )
    notes += device_notes
    pools, pool_notes = resolve_pools(
        plan.dialect,
        role_label,
        lambda role: [
            (labels, "")
            for labels in client.series(
                "{" + ",".join(p for p in (f'{role.label}!=""', selector) if p) + "}", start, end
            )
        ],
    )
    notes += pool_notes
    notes.extend(dict.fromkeys(client.warnings))
    return build_evidence(
        per_level[Level.INSTANCE],
        per_level.get(Level.DP),
        resolved=plan.resolved[Level.INSTANCE],
        dp_resolved=plan.resolved[Level.DP],
        extra_aliases=tables.device_aliases,
        names=plan.names,
        window_s=window_s,
        source="prometheus",
        notes=notes,
        pools=pools,
    )


def open_client(
    url: str, *, auth: HttpAuth | None, timeout_s: float, limits: SourceLimits
) -> tuple[PromClient, str | None]:
    """A client for ``url`` (checked) and the note on how the URL was normalised."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"timeout must be a positive number of seconds, got {timeout_s}")
    url, url_note = normalise_url(url, "--prometheus")
    return PromClient(
        url, auth=auth, timeout_s=timeout_s, max_bytes=limits.max_query_bytes
    ), url_note


def load_prometheus(
    url: str,
    *,
    start: float,
    end: float,
    step_s: float | None = None,
    selector: str = "",
    dialect: str | None = None,
    auth: HttpAuth | None = None,
    timeout_s: float = 30,
    window_s: float | None = None,
    limits: SourceLimits = DEFAULT_LIMITS,
    windows: WindowPolicy = WINDOWS,
    max_workers: int = 4,
    device_selector: str = "",
    device_map: DeviceMap | None = None,
    role_label: str = "",
    shared_plan: bool = True,
) -> Evidence:
    """Load per-window, per-unit signals for [start, end] (epoch seconds) from a Prometheus API.

    The window equals the query step (default: ``windows.choose``), so windows tile the range.
    ``role_label``: the label naming each unit's prefill/decode pool (default: the dialect's,
    sources/pools.py). ``shared_plan=False`` sends the former per-level queries (``prom_plan``).
    """
    w = range_window(start, end, step_s=step_s, window_s=window_s, windows=windows)
    first_t, last_t, _ = plan_windows(start, end, w, windows.max_windows)
    sel, dev_sel = normalise_selector(selector), normalise_selector(device_selector)
    client, url_note = open_client(url, auth=auth, timeout_s=timeout_s, limits=limits)
    try:
        plan = plan_range(
            client,
            start=start,
            end=end,
            selector=sel,
            dialect=dialect,
            window_s=w,
            device_selector=dev_sel,
            url_note=url_note,
            shared_plan=shared_plan,
        )
        tables = read_tables(
            client,
            plan,
            span=(first_t, last_t, w),
            selector=sel,
            device_selector=dev_sel,
            max_workers=max_workers,
            duplicates_range_s=max(last_t - first_t, w),
        )
        return evidence_of(
            client,
            plan,
            tables,
            start=start,
            end=end,
            selector=sel,
            window_s=w,
            device_map=device_map,
            role_label=role_label,
        )
    finally:
        client.close()


def range_window(
    start: float,
    end: float,
    *,
    step_s: float | None,
    window_s: float | None,
    windows: WindowPolicy = WINDOWS,
) -> float:
    """The window of a read of [start, end]: the step (or window) given, else the policy's."""
    if end <= start:
        raise UsageError("end must be after start")
    if step_s is not None and window_s is not None and abs(step_s - window_s) > 1e-9:
        raise UsageError("step and window must be equal (windows must tile the range)")
    return window_s or step_s or windows.choose(end - start)
