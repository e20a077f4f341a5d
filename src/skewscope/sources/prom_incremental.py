"""``watch --prometheus`` without re-reading the past: the per-window tables of the windows already
read are kept, each run reads only the windows that closed since (and the few it read too soon
after they closed), and the Evidence is built from the kept tables exactly as a full read builds
it from the tables it fetched.

Windows sit on the grid anchored to the epoch (``prom_matrix.plan_windows``), so a window once
closed is the same window in every later range; the still open window is never read, by a full
read or by this one. A window is kept as read once it was read ``settle_s`` after it closed
(before that a scrape stamped just before its end may still be on its way); the newest settled
window is read again every run and compared with the kept one. The kept tables are dropped, and
the whole range read, when they cannot be trusted: the metric names change the queries, the
window changes, the server restarted (``/api/v1/status/runtimeinfo``, where the server has one),
the clock went back, nothing kept is in the range, or the window read again differs.

What stays approximate (documented in docs/monitoring.md): the notes on series without a usable
unit and on API warnings come from the windows read, and bucket-bound marks use the bucket bounds
the histogram showed in the windows read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from skewscope.errors import SourceError
from skewscope.frame import WINDOWS, Evidence, Level, WindowPolicy
from skewscope.settings import DEFAULT_LIMITS, SourceLimits
from skewscope.sources.auth import HttpAuth
from skewscope.sources.devices import DeviceMap, DeviceSeries
from skewscope.sources.evidence import Key, Values
from skewscope.sources.prom_matrix import plan_windows
from skewscope.sources.prometheus import (
    RangePlan,
    RangeTables,
    evidence_of,
    open_client,
    plan_range,
    range_window,
    read_tables,
)
from skewscope.sources.promql import normalise_selector

EPS = 1e-6  # window times are rounded to microseconds (prom_matrix.matrix_to_values)
SAME_REL = 1e-9  # a window read again is the kept one when every value agrees to this


@dataclass(frozen=True)
class ReadCost:
    """What one run read: windows fetched of the range's windows, and why it read them all."""

    windows_read: int
    windows: int
    full_reason: str = ""  # empty: an incremental read
    unchanged: bool = False  # no window new or changed: the previous Evidence is returned

    def line(self) -> str:
        if self.full_reason:
            return f"full read of {self.windows} windows: {self.full_reason}"
        return (
            f"incremental read: {self.windows_read} of {self.windows} windows read, "
            f"{self.windows - self.windows_read} kept"
            + ("; nothing changed, the previous evidence stands" if self.unchanged else "")
        )


@dataclass
class _Kept:
    """The tables of the windows read so far, and when each window (by its end) was read."""

    plan_key: tuple[object, ...]
    window_s: float
    server_start: str | None
    per_window: dict[Level, dict[str, ByWindow]]  # level -> signal -> window start -> values
    devices: dict[tuple[object, ...], DeviceSeries]
    read_at: dict[float, float] = field(default_factory=dict)  # window end -> instant read
    bad: list[tuple[float, list[str]]] = field(default_factory=list)  # (last window end, bad)

    @property
    def newest_end(self) -> float:
        return max(self.read_at)


def _device_id(s: DeviceSeries) -> tuple[object, ...]:
    return (s.exporter.name, s.target, tuple(sorted(s.labels.items())), s.role)


ByWindow = dict[float, dict[Key, float]]  # one signal's table, split by window start


def _by_window(table: dict[Key, float]) -> ByWindow:
    out: ByWindow = {}
    for key, v in table.items():
        part = out.get(key[0])
        if part is None:
            part = out[key[0]] = {}
        part[key] = v
    return out


def _split(tables: RangeTables) -> dict[Level, dict[str, ByWindow]]:
    return {
        level: {signal: _by_window(table) for signal, table in values.items()}
        for level, values in tables.per_level.items()
    }


def _flat(per_window: dict[Level, dict[str, ByWindow]]) -> dict[Level, Values]:
    """The kept tables as a read gives them: ``{level: {signal: {key: value}}}``."""
    out: dict[Level, Values] = {}
    for level, signals in per_window.items():
        out[level] = {}
        for signal, windows in signals.items():
            table: dict[Key, float] = {}
            for start in sorted(windows):
                table.update(windows[start])
            out[level][signal] = table
    return out


def _exact(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)


def _same(a: float, b: float) -> bool:
    """Equal to 1e-9: a server sums the series of ``sum by`` in no fixed order, so two reads of
    one window can differ in the last bits (seen on Prometheus with 4 ranks an instance); NaN (an
    empty histogram window) equals NaN."""
    return math.isclose(a, b, rel_tol=SAME_REL, abs_tol=1e-12) or (a != a and b != b)


class IncrementalPrometheus:
    """``load(start, end)`` like ``load_prometheus``, reading only what it does not keep."""

    def __init__(
        self,
        url: str,
        *,
        step_s: float | None = None,
        window_s: float | None = None,
        selector: str = "",
        dialect: str | None = None,
        auth: HttpAuth | None = None,
        timeout_s: float = 30,
        limits: SourceLimits = DEFAULT_LIMITS,
        windows: WindowPolicy = WINDOWS,
        max_workers: int = 4,
        device_selector: str = "",
        device_map: DeviceMap | None = None,
        debug: Callable[[str], None] | None = None,
        role_label: str = "",
    ) -> None:
        self.role_label = role_label  # the pool label (sources/pools.py), read every run
        self.client, self.url_note = open_client(url, auth=auth, timeout_s=timeout_s, limits=limits)
        self.step_s, self.window_s, self.windows = step_s, window_s, windows
        self.selector, self.device_selector = (
            normalise_selector(selector),
            normalise_selector(device_selector),
        )
        self.dialect, self.max_workers, self.device_map = dialect, max_workers, device_map
        self.settle_s = limits.watch_settle_s
        self.debug = debug
        self.kept: _Kept | None = None
        self.last: ReadCost | None = None
        self._previous: tuple[tuple[object, ...], Evidence] | None = None

    def close(self) -> None:
        self.client.close()

    def _server_start(self) -> str | None:
        """The server's start time, where it says (Prometheus does; others may not)."""
        try:
            data = self.client.get("/api/v1/status/runtimeinfo", {})
        except SourceError:
            return None
        start = data.get("startTime") if isinstance(data, dict) else None
        return start if isinstance(start, str) else None

    def _read(
        self, plan: RangePlan, first_t: float, last_t: float, w: float, dup_range_s: float
    ) -> RangeTables:
        return read_tables(
            self.client,
            plan,
            span=(first_t, last_t, w),
            selector=self.selector,
            device_selector=self.device_selector,
            max_workers=self.max_workers,
            duplicates_range_s=dup_range_s,
        )

    def _distrust(
        self, plan: RangePlan, w: float, server: str | None, first_t: float, last_t: float
    ) -> str:
        """Why the kept tables cannot serve this range ('' when they can)."""
        kept = self.kept
        if kept is None:
            return "nothing kept yet"
        if kept.window_s != w:
            return f"the window changed ({kept.window_s:g}s -> {w:g}s)"
        if kept.plan_key != plan.key:
            return "the metric names in the range change the queries"
        if kept.server_start is not None and server != kept.server_start:
            return f"the server restarted (start time {kept.server_start} -> {server})"
        if last_t < kept.newest_end - EPS:
            return "the clock went back before the newest kept window"
        if first_t > kept.newest_end + EPS:
            return "no kept window is in the range"
        return ""

    def load(self, start: float, end: float) -> Evidence:
        w = range_window(
            start, end, step_s=self.step_s, window_s=self.window_s, windows=self.windows
        )
        first_t, last_t, n = plan_windows(start, end, w, self.windows.max_windows)
        dup_range_s = max(last_t - first_t, w)
        self.client.warnings.clear()  # a full read starts with a new client: no old warnings
        plan = plan_range(
            self.client,
            start=start,
            end=end,
            selector=self.selector,
            dialect=self.dialect,
            window_s=w,
            device_selector=self.device_selector,
            url_note=self.url_note,
        )
        server = self._server_start()
        reason = self._distrust(plan, w, server, first_t, last_t)
        read_from = first_t
        if not reason:
            read_from, verify = self._plan_reads(first_t, last_t)
            tables = self._read(plan, read_from, last_t, w, dup_range_s)
            fresh = _split(tables)
            if verify is not None:
                reason = self._differs(fresh, round(verify - w, 6))
        if reason:
            read_from = first_t
            tables = self._read(plan, first_t, last_t, w, dup_range_s)
            fresh = _split(tables)
            self.kept = _Kept(plan.key, w, server, {lvl: {} for lvl in plan.levels}, {})
        assert self.kept is not None
        inputs = (
            first_t,
            last_t,
            plan.names,
            plan.notes,
            tuple(tables.notes),
            tuple(tables.bad),
            tuple(self.client.warnings),
            tuple(sorted(tables.device_aliases.items())),
        )
        same = (
            not reason
            and self._previous is not None
            and self._previous[0] == inputs
            and self._unchanged(fresh, tables)
        )
        self._merge(tables, fresh, first_t, read_from, last_t, end, w)
        self.last = ReadCost(round((last_t - read_from) / w) + 1, n, reason, same)
        if self.debug is not None:
            self.debug(self.last.line())
        if same and self._previous is not None:
            return self._previous[1]  # nothing changed: the very Evidence (watch reuses its report)
        merged = RangeTables(
            _flat(self.kept.per_window),
            list(self.kept.devices.values()),
            tables.device_aliases,
            self._bad(),
            tables.notes,
        )
        evidence = evidence_of(
            self.client,
            plan,
            merged,
            start=start,
            end=end,
            selector=self.selector,
            window_s=w,
            device_map=self.device_map,
            role_label=self.role_label,
        )
        self._previous = (inputs, evidence)
        return evidence

    def _unchanged(self, fresh: dict[Level, dict[str, ByWindow]], tables: RangeTables) -> bool:
        """Whether every window read holds exactly what is kept for it (no window new)."""
        assert self.kept is not None
        for level, signals in self.kept.per_window.items():
            new = fresh.get(level, {})
            starts = {t for windows in new.values() for t in windows}
            for signal in {*signals, *new}:
                kept = signals.get(signal, {})
                for t in starts:
                    a, b = kept.get(t, {}), new.get(signal, {}).get(t, {})
                    if a.keys() != b.keys() or not all(_exact(a[k], b[k]) for k in a):
                        return False
        for d in tables.devices:
            old = self.kept.devices.get(_device_id(d))
            if old is None or any(
                not _exact(old.values.get(t, math.nan), v) for t, v in d.values.items()
            ):
                return False
        return bool(fresh)

    def _plan_reads(self, first_t: float, last_t: float) -> tuple[float, float | None]:
        """(the first window end to read, the end of the settled window read again to check
        the kept one, or None): every window after the newest kept, every kept window read
        too soon after it closed, and the newest settled window before those."""
        assert self.kept is not None
        ends = sorted(e for e in self.kept.read_at if e >= first_t - EPS)
        soon = [e for e in ends if self.kept.read_at[e] < e + self.settle_s]
        read_from = min(soon) if soon else self.kept.newest_end + self.kept.window_s
        verify = max((e for e in ends if e < read_from - EPS), default=None)
        if verify is not None:
            read_from = verify
        return min(read_from, last_t), verify

    def _differs(self, fresh: dict[Level, dict[str, ByWindow]], start: float) -> str:
        """Why the window starting at ``start`` read again differs from the kept one ('')."""
        assert self.kept is not None
        changed = 0
        for level in dict.fromkeys([*self.kept.per_window, *fresh]):  # instance level first
            kept_level, read_level = self.kept.per_window.get(level, {}), fresh.get(level, {})
            for signal in sorted({*kept_level, *read_level}):
                a = kept_level.get(signal, {}).get(start, {})
                b = read_level.get(signal, {}).get(start, {})
                if a == b:  # the usual case, compared in C
                    continue
                if a.keys() != b.keys():
                    return (
                        f"the window at {start:.0f} read again has other units for "
                        f"{level.value} {signal} ({len(b)} where {len(a)} were kept)"
                    )
                changed += sum(not _same(a[k], b[k]) for k in a)
        if changed:
            return f"the window at {start:.0f} read again differs in {changed} values"
        return ""

    def _merge(
        self,
        tables: RangeTables,
        fresh: dict[Level, dict[str, ByWindow]],
        first_t: float,
        read_from: float,
        last_t: float,
        now: float,
        w: float,
    ) -> None:
        """Drop what left the range, replace the windows read, keep the rest."""
        kept = self.kept
        assert kept is not None
        lo, cut = first_t - w - EPS, read_from - w - EPS  # window starts: kept in [lo, cut)
        for level, signals in kept.per_window.items():
            new = fresh.get(level, {})
            merged: dict[str, ByWindow] = {}
            for signal in dict.fromkeys([*signals, *new]):
                windows = {t: part for t, part in signals.get(signal, {}).items() if lo <= t < cut}
                windows.update(new.get(signal, {}))
                if windows:
                    merged[signal] = windows
            kept.per_window[level] = merged
        read = {_device_id(d): d for d in tables.devices}
        devices: dict[tuple[object, ...], DeviceSeries] = {}
        for ident, series in [*read.items(), *kept.devices.items()]:
            if ident in devices:
                continue
            old = kept.devices.get(ident)
            values = {t: v for t, v in old.values.items() if lo <= t < cut} if old else {}
            values.update(read[ident].values if ident in read else {})
            if values:
                devices[ident] = replace(series, values=values)
        kept.devices = devices
        kept.read_at = {
            e: at for e, at in kept.read_at.items() if first_t - EPS <= e < read_from - EPS
        }
        for i in range(round((last_t - read_from) / w) + 1):
            kept.read_at[round(read_from + i * w, 6)] = now
        kept.bad = [(e, b) for e, b in kept.bad if e >= first_t - EPS and b]
        if tables.bad:
            kept.bad.append((last_t, tables.bad))

    def _bad(self) -> list[str]:
        """The series without a usable unit in the windows kept: each label set as often as the
        read that saw it most often (a series spanning several reads is one series)."""
        assert self.kept is not None
        most: dict[str, int] = {}
        for _, bad in self.kept.bad:
            for text in set(bad):
                most[text] = max(most.get(text, 0), bad.count(text))
        return [text for text, n in most.items() for _ in range(n)]
