"""Renderers of a backtest (``skewscope backtest``): text, Markdown, HTML and JSON of the
``report.backtest_model.Backtest`` the evaluation produced. They format, never compute: every
figure (episodes, alerts per day, the score's precision, recall, delays) is the model's."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from typing import Any

from skewscope.report import fmt
from skewscope.report.backtest_model import AlertEpisode, Backtest

HEAD = ("alert", "level", "unit", "kind", "start", "end", "lasted", "peak")
SCORE_ROWS = (
    ("episodes", "truth episodes"),
    ("detected", "detected"),
    ("missed", "missed"),
    ("alerts", "alert episodes"),
    ("false_alerts", "false alerts"),
    ("precision", "precision"),
    ("recall", "recall"),
    ("f1", "F1"),
    ("median_delay_s", "median delay"),
    ("p90_delay_s", "p90 delay"),
    ("false_alerts_per_day", "false alerts per day"),
    ("kind_correct", "kind correct"),
)


def _unit(a: AlertEpisode) -> str:
    return fmt.name(a.instance if a.dp_rank is None else f"{a.instance}/dp{a.dp_rank}")


def _row(a: AlertEpisode) -> list[str]:
    return [
        fmt.name(a.alert),
        a.level,
        _unit(a),
        fmt.name(a.kind or "—"),
        fmt.when(a.start),
        fmt.when(a.end),
        fmt.minutes(a.duration_s),
        fmt.decimal(a.peak, 2),
    ]


def _figure(key: str, v: Any) -> str:
    if v is None:
        return "—"
    if key.endswith("_delay_s"):
        return fmt.minutes(v)
    if key in ("precision", "recall", "f1"):
        return fmt.decimal(v, 3)
    if key == "false_alerts_per_day":
        return fmt.decimal(v, 2)
    return str(v)


def _score_pairs(bt: Backtest) -> list[tuple[str, str]]:
    if bt.score is None:
        return []
    d = bt.score.as_dict()
    return [(label, _figure(key, d[key])) for key, label in SCORE_ROWS]


def _scope(bt: Backtest) -> str:
    return (
        f"{fmt.name(bt.source)}, {fmt.span(bt.start, bt.end)}, evaluated every "
        f"{fmt.seconds(bt.step_s)}; rules: {fmt.clean(bt.rules)}"
    )


def text(bt: Backtest) -> str:
    lines = [f"Backtest of {_scope(bt)}", ""]
    rows = [list(HEAD)] + [_row(a) for a in bt.episodes]
    if bt.episodes:
        widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]
        lines += [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
        ]
    else:
        lines.append("No alert would have fired.")
    if bt.per_day:
        lines += ["", "Alert episodes per day, per group:"]
        lines += [
            f"  {fmt.name(g) or '(no group labels)'}: {fmt.decimal(v, 2)}"
            for g, v in bt.per_day.items()
        ]
    pairs = _score_pairs(bt)
    if pairs:
        lines += ["", "Against the episodes file:"]
        lines += [f"  {k}: {v}" for k, v in pairs]
        assert bt.score is not None
        for m in bt.score.as_dict()["matches"]:
            got = (
                f"first firing {fmt.when(m['first_firing'])}, kind {m['alert_kind'] or '—'}"
                if m["detected"]
                else "missed"
            )
            lines.append(f"  - {fmt.name(m['id'])} ({m['kind']}): {got}")
    lines += [f"note: {fmt.clean(n)}" for n in bt.notes]
    return "\n".join(lines) + "\n"


def markdown(bt: Backtest) -> str:
    def md(c: str) -> str:
        return c.replace("|", "\\|")

    out = [f"# Backtest\n\n{md(_scope(bt))}\n"]
    if bt.episodes:
        out.append("| " + " | ".join(HEAD) + " |")
        out.append("|" + "---|" * len(HEAD))
        out += ["| " + " | ".join(md(c) for c in _row(a)) + " |" for a in bt.episodes]
    else:
        out.append("No alert would have fired.")
    if bt.per_day:
        out += ["\n## Alert episodes per day, per group\n", "| group | per day |", "|---|---|"]
        out += [
            f"| {md(fmt.name(g)) or '—'} | {fmt.decimal(v, 2)} |" for g, v in bt.per_day.items()
        ]
    pairs = _score_pairs(bt)
    if pairs:
        out += ["\n## Against the episodes file\n", "| figure | value |", "|---|---|"]
        out += [f"| {k} | {v} |" for k, v in pairs]
    out += [f"\n> {md(fmt.clean(n))}" for n in bt.notes]
    return "\n".join(out) + "\n"


def html_page(bt: Backtest) -> str:
    e = html.escape

    def table(head: list[str], rows: list[list[str]]) -> str:
        th = "".join(f"<th>{e(h)}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
        return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"

    parts = [f"<h1>Backtest</h1><p>{e(_scope(bt))}</p>"]
    parts.append(
        table(list(HEAD), [_row(a) for a in bt.episodes])
        if bt.episodes
        else "<p>No alert would have fired.</p>"
    )
    if bt.per_day:
        parts.append(
            "<h2>Alert episodes per day, per group</h2>"
            + table(
                ["group", "per day"],
                [[fmt.name(g), fmt.decimal(v, 2)] for g, v in bt.per_day.items()],
            )
        )
    pairs = _score_pairs(bt)
    if pairs:
        parts.append(
            "<h2>Against the episodes file</h2>"
            + table(["figure", "value"], [list(p) for p in pairs])
        )
    parts += [f"<p class=note>{e(fmt.clean(n))}</p>" for n in bt.notes]
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}"
    )
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>skewscope backtest</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
    )


def as_json(bt: Backtest) -> str:
    doc = {
        "start": bt.start,
        "end": bt.end,
        "step_s": bt.step_s,
        "source": bt.source,
        "rules": bt.rules,
        "episodes": [
            {
                "alert": a.alert,
                "level": a.level,
                "instance": a.instance,
                "dp_rank": a.dp_rank,
                "kind": a.kind,
                "start": a.start,
                "end": a.end,
                "peak": a.peak if math.isfinite(a.peak) else None,
                "group": a.group,
                "labels": dict(a.labels),
            }
            for a in bt.episodes
        ],
        "alerts_per_day": bt.per_day,
        "score": bt.score.as_dict() if bt.score is not None else None,
        "notes": list(bt.notes),
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


RENDERERS: dict[str, Callable[[Backtest], str]] = {
    "text": text,
    "json": as_json,
    "markdown": markdown,
    "html": html_page,
}
