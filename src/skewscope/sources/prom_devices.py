"""The device exporters' series of a range (``device_exporters``) and their join to the engine
units by host (``devices``)."""

from __future__ import annotations

from skewscope.frame import Level
from skewscope.sources.device_exporters import resolve_devices
from skewscope.sources.devices import (
    SIGNAL_OF_ROLE,
    DeviceMap,
    DeviceSeries,
    EngineInstance,
    device_values,
    engines_from_keys,
    merge_values,
)
from skewscope.sources.dialects import Alias
from skewscope.sources.evidence import Values
from skewscope.sources.prom_client import PromClient
from skewscope.sources.prom_matrix import device_series
from skewscope.sources.promql import duration, series_selector


def _engines(
    label_sets: list[dict[str, str]], per_level: dict[Level, Values], alias: Alias
) -> list[EngineInstance]:
    """Engine instances (ranks from the DP tables, labels from their series) for the join."""
    labels: dict[str, dict[str, str]] = {}
    for ls in label_sets:
        inst = ls.get("instance", "")
        if inst:
            labels.setdefault(inst, ls)
    found = engines_from_keys(
        [*per_level.get(Level.INSTANCE, {}).values(), *per_level.get(Level.DP, {}).values()]
    )
    return [EngineInstance(e.instance, e.ranks, labels.get(e.instance, {})) for e in found]


def read_device_series(
    client: PromClient, names: list[str], *, span: tuple[float, float, float], device_selector: str
) -> tuple[list[DeviceSeries], dict[str, str]]:
    """The device exporters' per-window series over ``span`` (first evaluation, last, window)
    and the signal -> alias names read; ``([], {})`` when no exporter is found."""
    first_t, last_t, w = span
    series: list[DeviceSeries] = []
    aliases: dict[str, str] = {}
    for role, exporter, alias in resolve_devices(names):
        sel = series_selector(alias.name, alias, device_selector)
        result = client.query_range(f"avg_over_time({sel}[{duration(w)}])", first_t, last_t, w)
        for got in device_series(result, exporter, role, w, client.where):
            scaled = {t: v * alias.scale for t, v in got.values.items()}
            series.append(DeviceSeries(exporter, got.target, got.labels, role, scaled))
        signal = SIGNAL_OF_ROLE[role]
        aliases[signal] = "|".join(filter(None, (aliases.get(signal), alias.name)))
    return series, aliases


def join_devices(
    client: PromClient,
    series: list[DeviceSeries],
    engine_alias: Alias | None,
    per_level: dict[Level, Values],
    *,
    start: float,
    end: float,
    selector: str,
    device_map: DeviceMap | None,
) -> tuple[dict[Level, Values], list[str]]:
    """The engine tables with the device signals joined to their units, and the join's notes."""
    if not series or engine_alias is None:
        return per_level, []
    match = series_selector(engine_alias.name, engine_alias, selector)
    engines = _engines(client.series(match, start, end), per_level, engine_alias)
    tables, notes = device_values(series, engines, device_map)
    out = dict(per_level)
    for level, values in tables.items():
        if level in out:
            out[level] = merge_values(out[level], values)
    return out, notes
