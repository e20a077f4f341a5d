"""``skewscope dashboard --format perses``: the Grafana dashboard's panels as a Perses dashboard.

Built from the Grafana model ``monitor.dashboard`` makes, so both show the same panels with
the same queries in the same places: each Grafana row becomes a Perses ``Grid`` layout, each
time-series panel a ``TimeSeriesChart`` with one ``PrometheusTimeSeriesQuery`` per target
(legend format as ``seriesNameFormat``), and the group-by labels and ``instance`` become
``PrometheusLabelValuesVariable`` list variables (multi-value, All = ``.*``, as in Grafana).
The project's default Prometheus datasource is used; Perses has no annotations, so the alerts
are not drawn.
"""

from __future__ import annotations

import json
import re
from typing import Any

from skewscope.monitor.dashboard import UID, build_dashboard, variable_labels
from skewscope.monitor.dashboard_options import DashboardOptions

# Grafana unit -> Perses format unit
UNITS: dict[str, str] = {
    "reqps": "requests/sec",
    "short": "decimal",
    "ms": "milliseconds",
    "percentunit": "percent-decimal",
}
PROJECT = "skewscope"


def _key(title: str, n: int) -> str:
    return f"{re.sub(r'[^a-z0-9]+', '-', title.lower()).strip('-')}-{n}"


def _panel(p: dict[str, Any]) -> dict[str, Any]:
    defaults = p.get("fieldConfig", {}).get("defaults", {})
    chart: dict[str, Any] = {
        "legend": {"position": "bottom", "mode": "table", "values": ["mean", "max"]},
        "yAxis": {"format": {"unit": UNITS[defaults.get("unit", "short")]}},
    }
    steps = [s for s in defaults.get("thresholds", {}).get("steps", []) if s["value"] is not None]
    if steps:  # the hot_ratio line of the max/median panels
        chart["thresholds"] = {
            "mode": "absolute",
            "defaultColor": "green",
            "steps": [{"value": s["value"], "color": s["color"]} for s in steps],
        }
    return {
        "kind": "Panel",
        "spec": {
            "display": {"name": p["title"], "description": p.get("description", "")},
            "plugin": {"kind": "TimeSeriesChart", "spec": chart},
            "queries": [
                {
                    "kind": "TimeSeriesQuery",
                    "spec": {
                        "plugin": {
                            "kind": "PrometheusTimeSeriesQuery",
                            "spec": {
                                "query": t["expr"],
                                "seriesNameFormat": t.get("legendFormat", ""),
                            },
                        }
                    },
                }
                for t in p.get("targets", [])
            ],
        },
    }


def _variables(opts: DashboardOptions, grafana: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    queries = {v["name"]: v["query"] for v in grafana["templating"]["list"] if v["type"] == "query"}
    for lab in variable_labels(opts):
        # Grafana's label_values({matchers}, label): the same matchers, as a series selector
        matchers = queries[lab][len("label_values(") : -len(f", {lab})")]
        out.append(
            {
                "kind": "ListVariable",
                "spec": {
                    "name": lab,
                    "display": {"name": lab, "hidden": False},
                    "allowAllValue": True,
                    "allowMultiple": True,
                    "customAllValue": ".*",
                    "defaultValue": "$__all",
                    "sort": "alphabetical-asc",
                    "plugin": {
                        "kind": "PrometheusLabelValuesVariable",
                        "spec": {"labelName": lab, "matchers": [matchers]},
                    },
                },
            }
        )
    return out


def build_perses(opts: DashboardOptions) -> dict[str, Any]:
    """The Perses dashboard (``kind: Dashboard``) of the same panels as the Grafana one."""
    grafana = build_dashboard(opts)
    panels: dict[str, Any] = {}
    layouts: list[dict[str, Any]] = []
    row_y = 0
    for p in grafana["panels"]:
        if p["type"] == "row":
            row_y = p["gridPos"]["y"] + p["gridPos"]["h"]
            layouts.append(
                {
                    "kind": "Grid",
                    "spec": {
                        "display": {"title": p["title"], "collapse": {"open": True}},
                        "items": [],
                    },
                }
            )
            continue
        key = _key(p["title"], len(panels))
        panels[key] = _panel(p)
        pos = p["gridPos"]
        layouts[-1]["spec"]["items"].append(
            {
                "x": pos["x"],
                "y": pos["y"] - row_y,
                "width": pos["w"],
                "height": pos["h"],
                "content": {"$ref": f"#/spec/panels/{key}"},
            }
        )
    return {
        "kind": "Dashboard",
        "metadata": {"name": UID, "project": PROJECT},
        "spec": {
            "display": {"name": grafana["title"], "description": grafana.get("description", "")},
            "duration": grafana["time"]["from"].removeprefix("now-"),
            "refreshInterval": grafana["refresh"],
            "variables": _variables(opts, grafana),
            "panels": panels,
            "layouts": layouts,
        },
    }


def render_perses(opts: DashboardOptions) -> str:
    return json.dumps(build_perses(opts), indent=2) + "\n"
