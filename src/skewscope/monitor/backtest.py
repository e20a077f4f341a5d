"""``skewscope backtest``: what a rule file's alerts would have done over a past range, with the
PromQL pushed down to the user's Prometheus and nothing deployed there.

Exactness. A live Prometheus evaluates a rule group every ``interval``: each recording rule
writes its samples at the evaluation instants, and the rules after it (alerts included) read
them at the same instant or, through range selectors and ``offset``, at earlier ones. Inlining
a record's expression into its readers is exact only with subqueries, and the generated rules
then grow to 700 KB per alert (a record read over a range inside one read over a range), too
big to send or evaluate. So the records are evaluated *level by level*, as ``promtool tsdb
create-blocks-from rules`` is meant to be run: level 0 (records that read no record) with
``query_range`` on the user's Prometheus at the multiples of ``step``; their samples are
written into a scratch TSDB (``backtest_tsdb``: ``promtool`` backfill, a local ``prometheus``
with a lookback delta of half a step, so a series that stopped being recorded is gone at the
next instant, as a live rule's stale marker makes it); then each next level is asked of the
scratch Prometheus, and finally the alerts (an alert that reads no record goes to the user's
Prometheus directly, and then no scratch TSDB is needed). The result equals a group evaluated
every ``step`` at multiples of ``step`` with its rules in dependency order (a live Prometheus
also shifts each group by a hash-derived fraction of its interval). Records above level 0 must
read recording rules only (the generated rules do).

``for:`` is applied here over the evaluation instants, as the rule manager does: a series
appearing is pending from that instant, fires at the first instant at least ``for`` later and
is resolved at the first instant it is absent (its label set includes the rule's labels, so a
changed ``kind`` is a new alert). The range is evaluated from ``start - for`` (the records from
further back, by the longest range or offset chain they are read with), so an alert already
firing at ``start`` is.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from skewscope.errors import InputError, SourceError, UsageError
from skewscope.monitor.alerts import STARVED_ALERT
from skewscope.monitor.backtest_score import STARVED_KIND
from skewscope.report.backtest_model import AlertEpisode
from skewscope.sources.dialects import DIALECTS

MAX_POINTS = 10_000  # per query_range (Prometheus refuses more than 11,000 per series)
UNIT_LABELS = ("alertname", "instance", "level", "kind", "severity", "dialect", "alertstate")
RANK_LABELS: tuple[str, ...] = tuple(
    dict.fromkeys(d.rank_label for d in DIALECTS.values() if d.rank_label is not None)
)
_DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
_DURATION_PART = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def prom_seconds(text: str, where: str) -> float:
    """A PromQL duration (``5m``, ``1h30m``) in seconds."""
    t = text.strip()
    if not _DURATION.match(t):
        raise InputError(f"{where}: expected a duration like 5m, got {text!r}")
    return sum(int(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(t))


@dataclass(frozen=True)
class Record:
    name: str
    expr: str
    labels: dict[str, str]


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_s: float
    labels: dict[str, str]
    group: str


@dataclass(frozen=True)
class RuleSet:
    records: dict[str, list[Record]]
    alerts: list[Alert]


def parse_rules(doc: Any, where: str) -> RuleSet:
    """A rule file's records and alerts (``groups: [{name, rules: [...]}]``, or a
    ``PrometheusRule`` object's ``spec``); a bad field is one InputError line."""
    if isinstance(doc, dict) and isinstance(doc.get("spec"), dict):
        doc = doc["spec"]
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise InputError(f"{where}: expected a Prometheus rule file with a 'groups' list")
    records: dict[str, list[Record]] = {}
    alerts: list[Alert] = []
    for g, group in enumerate(doc["groups"]):
        at = f"{where}: groups[{g}]"
        if not isinstance(group, dict) or not isinstance(group.get("rules"), list):
            raise InputError(f"{at}: expected an object with a 'rules' list")
        for n, rule in enumerate(group["rules"]):
            here = f"{at}.rules[{n}]"
            if not isinstance(rule, dict) or not isinstance(rule.get("expr"), str | int | float):
                raise InputError(f"{here}: expected a rule with an 'expr'")
            labels = rule.get("labels") or {}
            if not isinstance(labels, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
            ):
                raise InputError(f"{here}.labels: expected a map of strings")
            expr = str(rule["expr"])
            if isinstance(rule.get("record"), str):
                records.setdefault(rule["record"], []).append(
                    Record(rule["record"], expr, dict(labels))
                )
            elif isinstance(rule.get("alert"), str):
                if rule.get("keep_firing_for"):
                    raise InputError(f"{here}.keep_firing_for: not reproduced by backtest")
                for_s = prom_seconds(str(rule["for"]), f"{here}.for") if rule.get("for") else 0.0
                alerts.append(
                    Alert(rule["alert"], expr, for_s, dict(labels), str(group.get("name", g)))
                )
            else:
                raise InputError(f"{here}: expected a 'record' or an 'alert' name")
    if not alerts:
        raise InputError(f"{where}: no alerting rule to backtest")
    return RuleSet(records, alerts)


def load_rules(path: str | Path) -> RuleSet:
    """The rules of a Prometheus rule file (one InputError line naming the file on any fault)."""
    import yaml

    from skewscope.smallfile import read_small

    text = read_small(path, str(path))
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not YAML ({str(e).splitlines()[0]})") from None
    return parse_rules(doc, str(path))


# -- levels ---------------------------------------------------------------------------------


def _refs(expr: str, names: set[str]) -> list[tuple[str, float]]:
    """(record name, range + offset it is read with, in seconds) for each reference."""
    if not names:
        return []
    pat = re.compile(
        r"(?<![\w:])("
        + "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        + r")(?![\w:])(\{[^}]*\})?(\[[^\]]+\])?"
        r"(\s+offset\s+[0-9a-z]+)?"
    )
    out = []
    for m in pat.finditer(expr):
        reach = 0.0
        if m.group(3):
            reach += prom_seconds(m.group(3)[1:-1].split(":")[0], m.group(1))
        if m.group(4):
            reach += prom_seconds(m.group(4).split()[-1], m.group(1))
        out.append((m.group(1), reach))
    return out


@dataclass(frozen=True)
class Plan:
    """The records in levels (level 0 reads no record) and how far back of the first alert
    instant each level must be evaluated."""

    levels: list[list[Record]]
    back_s: dict[str, float]  # record name -> seconds before the alerts' first instant
    alert_refs: dict[str, bool]  # alert name -> reads a record


def plan(rules: RuleSet) -> Plan:
    names = set(rules.records)
    deps = {n: _refs(" ".join(r.expr for r in rs), names) for n, rs in rules.records.items()}
    level: dict[str, int] = {}

    def lvl(n: str, seen: tuple[str, ...] = ()) -> int:
        if n in seen:
            raise InputError(f"recording rule {n} reads itself through {' -> '.join(seen)}")
        if n not in level:
            level[n] = 1 + max((lvl(d, (*seen, n)) for d, _ in deps[n]), default=-1)
        return level[n]

    for n in names:
        lvl(n)
    back: dict[str, float] = {}

    def need(n: str, reach: float) -> None:
        if back.get(n, -1.0) >= reach:
            return
        back[n] = reach
        for d, r in deps[n]:
            need(d, reach + r)

    refs: dict[str, bool] = {}
    for a in rules.alerts:
        got = _refs(a.expr, names)
        refs[a.name] = refs.get(a.name, False) or bool(got)
        for d, r in got:
            need(d, r)
    levels: list[list[Record]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for n in sorted(names, key=lambda n: level[n]):
        levels[level[n]] += rules.records[n]
    return Plan(levels, back, refs)


# -- evaluation -------------------------------------------------------------------------------

Series = dict[float, float]  # evaluation instant -> value
QueryRange = Callable[[str, float, float, float], list[Any]]


def instants(start: float, end: float, step_s: float) -> list[float]:
    """The multiples of ``step_s`` in [start, end]."""
    first = math.ceil(start / step_s) * step_s
    n = math.floor((end - first) / step_s + 1e-9) + 1
    return [first + k * step_s for k in range(max(n, 0))]


def _matrix(
    query: QueryRange, expr: str, times: list[float], step_s: float
) -> dict[tuple[tuple[str, str], ...], Series]:
    out: dict[tuple[tuple[str, str], ...], Series] = {}
    for k in range(0, len(times), MAX_POINTS):
        chunk = times[k : k + MAX_POINTS]
        for s in query(expr, chunk[0], chunk[-1], step_s):
            labels = _labels_of(s)
            pts = out.setdefault(labels, {})
            for t, v in _values_of(s):
                pts[round(t, 3)] = v
    return out


def _labels_of(s: Any) -> tuple[tuple[str, str], ...]:
    metric = s.labels if hasattr(s, "labels") else s.get("metric", {})
    if not isinstance(metric, dict):
        raise SourceError("query_range returned a series without labels")
    return tuple(sorted((k, v) for k, v in metric.items() if k != "__name__"))


def _values_of(s: Any) -> Iterable[tuple[float, float]]:
    if hasattr(s, "times"):
        return zip((float(t) for t in s.times), (float(v) for v in s.values), strict=True)
    vals = s.get("values") if isinstance(s, dict) else None
    if not isinstance(vals, list):
        raise SourceError("query_range returned a series without values")
    return ((float(t), float(v)) for t, v in vals)


def firing_intervals(
    series: Series, times: list[float], for_s: float
) -> list[tuple[float, float, float]]:
    """(first firing instant, last firing instant, peak value) of one alert series, with the
    rule manager's pending -> firing -> resolved semantics over the evaluation ``times``."""
    out = []
    active_at: float | None = None
    fired: tuple[float, float, float] | None = None
    for t in times:
        v = series.get(round(t, 3))
        if v is None or math.isnan(v):
            if fired is not None:
                out.append(fired)
            active_at, fired = None, None
            continue
        if active_at is None:
            active_at = t
        if t - active_at >= for_s - 1e-9:
            fired = (fired[0], t, max(fired[2], v)) if fired else (t, t, v)
    if fired is not None:
        out.append(fired)
    return out


def unit_of(labels: dict[str, str]) -> tuple[str, str, str | None]:
    """(level, instance, rank) an alert names: the rank label of its dialect, else any."""
    d = DIALECTS.get(labels.get("dialect", ""))
    rank_labels = (d.rank_label,) if d is not None and d.rank_label else RANK_LABELS
    rank = next((labels[r] for r in rank_labels if r in labels), None)
    level = labels.get("level") or ("dp" if rank is not None else "instance")
    return level, labels.get("instance", ""), rank


def group_of(labels: dict[str, str]) -> str:
    return ",".join(
        f"{k}={v}"
        for k, v in sorted(labels.items())
        if k not in UNIT_LABELS and k not in RANK_LABELS
    )


class Tsdb(Protocol):
    """Where records are written and read back (``backtest_tsdb.ScratchTSDB``)."""

    def add(self, samples: list[tuple[dict[str, str], Series]]) -> None: ...

    def query(self, expr: str, start: float, end: float, step: float) -> list[Any]: ...


def record_levels(
    query: QueryRange, tsdb: Tsdb, p: Plan, first: float, end: float, step_s: float
) -> None:
    """Every record an alert reads, level by level, into ``tsdb`` (module docstring)."""
    for n, recs in enumerate(p.levels):
        src = query if n == 0 else tsdb.query
        samples: list[tuple[dict[str, str], Series]] = []
        for rec in recs:
            if rec.name not in p.back_s:
                continue  # read by no alert
            times = instants(first - p.back_s[rec.name], end, step_s)
            if not times:
                continue
            for labels, series in _matrix(src, rec.expr, times, step_s).items():
                samples.append(({**dict(labels), **rec.labels, "__name__": rec.name}, series))
        tsdb.add(samples)


def evaluate(
    query: QueryRange,
    rules: RuleSet,
    start: float,
    end: float,
    step_s: float,
    level: str | None = None,
    tsdb: Callable[[], AbstractContextManager[Tsdb]] | None = None,
) -> list[AlertEpisode]:
    """Every alert episode of ``rules`` that fires in [start, end], evaluated every ``step_s``
    (``query`` is the user's ``PromClient.query_range_series``; ``tsdb`` opens the scratch
    TSDB, needed only when an alert reads a recording rule)."""
    if end <= start:
        raise UsageError("backtest: the range is empty (end is not after start)")
    p = plan(rules)
    first = start - max(a.for_s for a in rules.alerts)
    with contextlib.ExitStack() as stack:
        scratch: Tsdb | None = None
        if any(p.alert_refs.values()):
            if tsdb is None:
                raise UsageError(
                    "backtest: the alerts read recording rules: a scratch TSDB is needed"
                )
            scratch = stack.enter_context(tsdb())
            record_levels(query, scratch, p, first, end, step_s)
        return _alerts(query, scratch, rules, p, start, end, step_s, level)


def _alerts(
    query: QueryRange,
    scratch: Tsdb | None,
    rules: RuleSet,
    p: Plan,
    start: float,
    end: float,
    step_s: float,
    level: str | None,
) -> list[AlertEpisode]:
    episodes: list[AlertEpisode] = []
    for alert in rules.alerts:
        src = scratch.query if scratch is not None and p.alert_refs[alert.name] else query
        times = instants(start - alert.for_s, end, step_s)
        if not times:
            continue
        for labels_t, series in _matrix(src, alert.expr, times, step_s).items():
            labels = {**dict(labels_t), **alert.labels, "alertname": alert.name}
            lv, inst, rank = unit_of(labels)
            if level is not None and lv != level:
                continue
            kind = STARVED_KIND if alert.name == STARVED_ALERT else labels.get("kind", "")
            for first, last, peak in firing_intervals(series, times, alert.for_s):
                if last < start:
                    continue
                episodes.append(
                    AlertEpisode(
                        alert=alert.name,
                        level=lv,
                        instance=inst,
                        dp_rank=rank,
                        kind=kind,
                        start=max(first, start),
                        end=last,
                        peak=peak,
                        group=group_of(labels),
                        labels=tuple(sorted(labels.items())),
                    )
                )
    episodes.sort(key=lambda a: (a.start, a.alert, a.labels))
    return episodes


def generated_rules(
    dialects: tuple[str, ...] | None = None,
    window_s: float = 300.0,
    for_s: float | None = None,
    **options: Any,
) -> RuleSet:
    """The rules ``skewscope rules`` writes with these options, parsed for ``evaluate``."""
    from skewscope.monitor.rules import RuleOptions, build_rules

    if dialects:
        options["dialects"] = dialects
    opts = RuleOptions(window_s=window_s, for_s=for_s, **options)
    return parse_rules(build_rules(opts), "generated rules")


def backtest_url(
    url: str,
    start: float,
    end: float,
    *,
    dialect: str | None = None,
    rules: RuleSet | None = None,
    window_s: float = 300.0,
    step_s: float = 60.0,
    level: str | None = None,
    timeout_s: float = 300.0,
    **options: Any,
) -> list[AlertEpisode]:
    """The alert episodes of ``rules`` (default: the generated rules of ``dialect`` with
    ``window_s`` and ``options``, as ``RuleOptions`` takes them) over [start, end] of the
    Prometheus at ``url`` (no credentials), evaluated every ``step_s``: the library form of
    ``skewscope backtest`` (the alert benchmark calls it)."""
    from skewscope.monitor.backtest_tsdb import scratch
    from skewscope.sources.prom_client import PromClient

    if rules is None:
        rules = generated_rules((dialect,) if dialect else None, window_s, **options)
    client = PromClient(url, timeout_s=timeout_s)
    try:
        return evaluate(
            client.query_range_series,
            rules,
            start,
            end,
            step_s,
            level=level,
            tsdb=lambda: scratch(step_s, timeout_s),
        )
    finally:
        client.close()
