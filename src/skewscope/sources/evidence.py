"""Evidence from the value tables the online sources produce; shared by Prometheus and scrape.

Both sources reduce their series to ``{signal: {(window_start_s, instance, dp_rank): value}}``
per level (``Values``); this module turns those tables into UnitFrames (rows only where a unit
has data, absent signals listed as missing), rescales KV usage reported in percent, notes units
that only reported NaN/Inf, and drops a DP level with nothing to compare inside an instance.
"""

from __future__ import annotations

import math
import operator
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping

from skewscope.catalogue import MetricType
from skewscope.frame import (
    SIGNAL_COLUMNS,
    Evidence,
    Level,
    UnitFrame,
    conform,
    dp_unit_id,
    empty_schema,
)
from skewscope.sources.dialects import ROLES, SIGNAL_SPECS, Alias, present_spellings

Key = tuple[float, str, int | None]
Values = dict[str, dict[Key, float]]


def clean(value: float) -> float | None:
    """NaN/inf (empty histogram window, 0/0 mean) is missing, never a number."""
    return value if math.isfinite(value) else None


def percent_units(tables: Iterable[Mapping[Key, float]]) -> set[tuple[str, int | None]]:
    """Units whose KV usage series is in percent: any value > 1 in any of ``tables``."""
    return {(key[1], key[2]) for table in tables for key, v in table.items() if v > 1.0}


def divide_units(
    table: Mapping[Key, float], units: set[tuple[str, int | None]]
) -> dict[Key, float]:
    return {k: (v / 100.0 if (k[1], k[2]) in units else v) for k, v in table.items()}


def unit_id(instance: str, dp_rank: int | None) -> str:
    """Instance id, or ``<instance>/dp<rank>`` for a DP rank."""
    return instance if dp_rank is None else dp_unit_id(instance, dp_rank)


def _key_order(key: Key) -> tuple[float, str, int]:
    t, inst, dp = key
    return (t, inst, -1 if dp is None else dp)


def _rows(
    tables: Mapping[str, Mapping[Key, float]],
) -> tuple[list[Key], Callable[[], dict[str, list[object]]]]:
    """(the keys of every table, in row order; each table's column in that order, None where
    it has no value for a key).

    Usually the tables hold the same keys in the same order (one range answer per signal, its
    series in the server's order) and the rest a few of them (bucket-bound marks): the row
    order is then found once and those columns are read by position, instead of hashing every
    (time, instance, rank) key of every table.
    """
    first = next(iter(tables.values()), {})
    order_of = list(first)
    same = {s for s, t in tables.items() if len(t) == len(first) and list(t) == order_of}
    if len(first) > 1 and all(t.keys() <= first.keys() for s, t in tables.items() if s not in same):
        order = sorted(range(len(order_of)), key=lambda i: _key_order(order_of[i]))
        keys = [order_of[i] for i in order]
        pick = operator.itemgetter(*order)
        return keys, lambda: {
            s: list(pick(list(t.values()))) if s in same else list(map(t.get, keys))
            for s, t in tables.items()
        }
    keys = sorted(set().union(*tables.values()), key=_key_order)
    return keys, lambda: {s: list(map(t.get, keys)) for s, t in tables.items()}


def assemble(
    level: Level,
    values: Values,
    *,
    aliases: Mapping[str, str],
    window_s: float,
    source: str,
    notes: Iterable[str] = (),
    pools: Mapping[str, str] | None = None,
) -> UnitFrame:
    """Build a UnitFrame: rows only where a unit has data; absent signals listed as missing.

    Units that are not present in every window (scale in/out, series that stop) get a note.
    ``pools``: instance -> its prefill/decode pool (sources/pools.py), on every row of it.
    """
    import polars as pl

    schema = empty_schema()
    tables = {s: t for s, t in values.items() if s in schema}
    keys, columns_of = _rows(tables)
    missing = tuple(s for s in SIGNAL_COLUMNS if not values.get(s))
    all_notes = list(notes)
    units = {(inst, dp): unit_id(inst, dp) for _, inst, dp in keys}
    per_unit = Counter(units[(inst, dp)] for _, inst, dp in keys)  # keys are unique
    windows = len({k[0] for k in keys})
    for unit, n in sorted(per_unit.items()):
        if n < windows:
            all_notes.append(
                f"{level.value} unit {unit} has data in {n} of {windows} windows "
                "(joined late, left early or its series stopped); rows only where present"
            )
    # one column at a time (a row per key, None where a signal has no value for it): Python
    # touches each value once, polars builds the frame; NaN/±Inf become null there (clean)
    columns: dict[str, list[object]] = {
        "window_start_s": [k[0] for k in keys],
        "unit": [units[(inst, dp)] for _, inst, dp in keys],
        "instance": [k[1] for k in keys],
        "dp_rank": [k[2] for k in keys],
    }
    columns.update(columns_of())
    if pools:
        columns["pool"] = [pools.get(k[1]) for k in keys]
    df = pl.DataFrame(columns, schema={c: schema[c] for c in columns})  # type: ignore[misc]
    finite = [pl.when(pl.col(s).is_finite()).then(pl.col(s)).alias(s) for s in tables]
    df = conform(df.with_columns(finite) if finite else df)
    return UnitFrame(
        df=df,
        level=level,
        window_s=window_s,
        source=source,
        aliases=dict(aliases),
        missing=missing,
        notes=tuple(all_notes),
    )


QUANTILE_NOTE = (
    "percentiles (p95/p99) are estimated from histogram buckets with linear interpolation inside "
    "a bucket, as PromQL histogram_quantile does; they are only as fine as the bucket bounds"
)


def nonfinite_notes(values: Values, level: Level) -> list[str]:
    """Units whose counter or gauge signal was only ever NaN/±Inf: say so, they are missing.

    (Histogram signals are NaN in any window without observations, which is not news.)
    """
    only_bad: dict[str, list[str]] = defaultdict(list)
    for spec in SIGNAL_SPECS:
        if ROLES[spec.role].kind is MetricType.HISTOGRAM or spec.signal not in values:
            continue
        if all(map(math.isfinite, values[spec.signal].values())):
            continue  # the usual case, checked in one C loop
        seen: dict[tuple[str, int | None], bool] = {}
        for (_, inst, dp), v in values[spec.signal].items():
            seen[(inst, dp)] = seen.get((inst, dp), False) or math.isfinite(v)
        for unit, any_finite in seen.items():
            if not any_finite:
                only_bad[unit_id(*unit)].append(spec.signal)
    return [
        f"{level.value} unit {unit} reported only NaN/Inf for {', '.join(signals)}; "
        "those values are missing for it (not zero, not under-loaded)"
        for unit, signals in sorted(only_bad.items())
    ]


def build_evidence(
    inst_values: Values,
    dp_values: Values | None,
    *,
    resolved: Mapping[str, Alias],
    names: Iterable[str],
    window_s: float,
    source: str,
    notes: Iterable[str] = (),
    dp_resolved: Mapping[str, Alias] | None = None,
    extra_aliases: Mapping[str, str] | None = None,
    pools: Mapping[str, str] | None = None,
) -> Evidence:
    """Turn per-level value tables into Evidence; shared by the Prometheus and scrape paths.

    ``resolved`` are the instance-level aliases, ``dp_resolved`` the DP-level ones (default:
    the instance aliases that carry a DP label).

    KV usage reported in percent is rescaled per unit; the DP frame is dropped (with a note)
    when no instance shows more than one rank, because there is nothing to compare inside it.
    """
    names = set(names)
    all_notes = list(notes)
    aliases = {sig: present_spellings(a, names) for sig, a in resolved.items()}
    aliases.update(extra_aliases or {})  # device exporters (devices.py)
    if any(s.over_time == "quantile" and s.signal in resolved for s in SIGNAL_SPECS):
        all_notes.append(QUANTILE_NOTE)

    def fix_percent(values: Values, level: Level) -> Values:
        kv = [values.get("kv_usage", {}), values.get("kv_usage_max", {})]
        units = percent_units(kv)
        if not units:
            return values
        all_notes.append(
            f"KV usage of {len(units)} {level.value} unit(s) was reported in percent "
            f"({', '.join(sorted(unit_id(*u) for u in units))}); divided by 100"
        )
        out = dict(values)
        for sig in ("kv_usage", "kv_usage_max"):
            if sig in out:
                out[sig] = divide_units(out[sig], units)
        return out

    all_notes += nonfinite_notes(inst_values, Level.INSTANCE)
    inst_values = fix_percent(inst_values, Level.INSTANCE)
    dp_frame = None
    if dp_values is not None:
        ranks: dict[str, set[int]] = defaultdict(set)
        for _, inst, dp in set().union(*dp_values.values()):
            if dp is not None:
                ranks[inst].add(dp)
        if ranks and max(len(r) for r in ranks.values()) >= 2:
            all_notes += nonfinite_notes(dp_values, Level.DP)
            dp_values = fix_percent(dp_values, Level.DP)
            if dp_resolved is None:
                dp_resolved = {s: a for s, a in resolved.items() if a.per_rank}
            dp_aliases = {
                s: present_spellings(a, names) for s, a in dp_resolved.items() if dp_values.get(s)
            }
            dp_aliases.update({s: a for s, a in (extra_aliases or {}).items() if dp_values.get(s)})
            dp_frame = assemble(
                Level.DP,
                dp_values,
                aliases=dp_aliases,
                window_s=window_s,
                source=source,
                pools=pools,
            )
        else:
            all_notes.append("no instance shows more than one DP rank; DP level skipped")
    inst_frame = assemble(
        Level.INSTANCE,
        inst_values,
        aliases=aliases,
        window_s=window_s,
        source=source,
        pools=pools,
    )
    return Evidence(instance=inst_frame, dp=dp_frame, notes=tuple(all_notes))
