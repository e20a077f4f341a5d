"""``skewscope mixin``: the rules and the dashboard as a monitoring mixin (jsonnet).

The mixin's jsonnet does the filling itself: ``rules/templates.json`` and
``alerts/templates.json`` hold the rule builder's template (``monitor.template``: every number a
``%(name)s`` parameter), ``config.libsonnet`` the settings, and ``lib/params.libsonnet`` computes
the parameters from ``_config`` exactly as ``RuleOptions.params`` does, so overriding a
threshold, the window or ``for`` in jsonnet changes the rules as ``--config`` / ``--window``
would. The dialects, group-by labels and selector shape the templates (which records exist,
the ``by (...)`` lists, the matchers): they are fixed when the mixin is written, and the jsonnet
refuses a ``_config`` that changes them (``lib.shaped``). The standard fields:
``prometheusRules`` (recording rules, group ``skewscope-<dialect>``), ``prometheusAlerts``
(group ``skewscope-<dialect>-alerts``), ``grafanaDashboards``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from skewscope.frame import WINDOWS
from skewscope.monitor.dashboard import UID, render_dashboard
from skewscope.monitor.dashboard_options import DashboardOptions
from skewscope.monitor.rules import RuleOptions, build_template
from skewscope.monitor.template import RULE_THRESHOLDS, to_format

JSONNET_DIR = Path(__file__).parent / "jsonnet"
STATIC: tuple[str, ...] = (
    "mixin.libsonnet",
    "lib/params.libsonnet",
    "rules/rules.libsonnet",
    "alerts/alerts.libsonnet",
    "dashboards/dashboards.libsonnet",
)
DASHBOARD_FILE = f"{UID}.json"


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def _config(opts: RuleOptions, dash: DashboardOptions) -> str:
    th = opts.thresholds
    lines = [
        "// The mixin's settings, written by `skewscope mixin`. Override them in jsonnet:",
        "//   (import 'mixin.libsonnet') + { _config+:: { thresholds+: { hot_ratio: 1.5 } } }",
        "{",
        "  _config+:: {",
        "    // These shape the rule templates and the dashboard: to change one, run",
        "    // `skewscope mixin` again (the mixin refuses a changed value).",
        f"    dialects: {json.dumps(list(opts.dialects))},",
        f"    groupBy: {json.dumps(list(opts.group_by))},",
        f"    selector: {json.dumps(opts.selector)},",
        "    // Filled into the templates by lib/params.libsonnet.",
        f"    windowSeconds: {opts.window_s!r},  // the rate window (rules --window)",
        f"    forSeconds: {json.dumps(opts.for_s)},  // null: alert_for_windows windows",
        f"    lookbackWindows: {WINDOWS.target_windows},  // the look-back, in windows",
        f"    runbookUrlBase: {json.dumps(opts.runbook_url_base)},",
        f"    dashboardTitle: {json.dumps(dash.title)},",
        "    // skewscope.config.Thresholds (docs/configuration.md): those the rules read.",
        "    thresholds: {",
        *(f"      {name}: {getattr(th, name)!r}," for name in RULE_THRESHOLDS),
        "    },",
        "  },",
        "}",
    ]
    return "\n".join(lines) + "\n"


def mixin_files(opts: RuleOptions, dash: DashboardOptions) -> dict[str, str]:
    """Path inside the mixin -> text. ``dash`` must read the same dialects, group-by labels
    and selector as ``opts`` (the mixin checks one shape for both)."""
    if (dash.dialects, dash.group_by, dash.selector) != (
        opts.dialects,
        opts.group_by,
        opts.selector,
    ):
        raise ValueError("the mixin's rules and dashboard must share their shape")
    template = build_template(opts)
    files = {name: (JSONNET_DIR / name).read_text(encoding="utf-8") for name in STATIC}
    files["config.libsonnet"] = _config(opts, dash)
    files["shape.json"] = _json(
        {"dialects": list(opts.dialects), "groupBy": list(opts.group_by), "selector": opts.selector}
    )
    for part, key in (("rules", "records"), ("alerts", "alerts")):
        files[f"{part}/templates.json"] = _json(
            [{"dialect": t["dialect"], "rules": to_format(t[key])} for t in template]
        )
    files[f"dashboards/{DASHBOARD_FILE}"] = render_dashboard(dash)
    return files


def write_mixin(out: str | Path, files: dict[str, str]) -> None:
    """Write the mixin folder whole (``atomic_folder``: nothing half-written is left)."""
    from skewscope.atomic import atomic_folder

    with atomic_folder(out) as tmp:
        for name, text in files.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
