"""What-if report renderers (terminal, Markdown, JSON, HTML). They format; the numbers come
computed in ``WhatIfReport``, its notes as facts that ``phrases.note`` words (the JSON is
``document()``: ``to_dict()`` plus the notes' sentences, contract in docs/whatif.md)."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from typing import Any

from skewscope.report import fmt, phrases, whatif_phrases
from skewscope.report.whatif_model import (
    CLOSEST,
    EXACT,
    METRIC_KEYS,
    METRIC_LABELS,
    NONE,
    PolicyResult,
    RankingVerdict,
    WhatIfReport,
)

TABLE_KEYS: tuple[str, ...] = METRIC_KEYS


def value(key: str, v: float | None) -> str:
    """A predicted metric by its kind, through ``fmt`` (a latency in whole ms, the KV peak a
    share, throughput per second, a load a ratio)."""
    if v is None or not math.isfinite(v):
        return fmt.NOT_MEASURED
    if key.endswith("_ms"):
        return f"{fmt.count(v)} ms"
    if key == "kv_peak":
        return fmt.pct(v)
    if key == "throughput_rps":
        return f"{fmt.decimal(v, 2)}/s"
    return fmt.ratio(v)


change = fmt.change  # the gain and calibration error: a signed relative change


def describe(p: PolicyResult) -> str:
    """What a candidate replays, as a phrase."""
    return phrases.note(p.description)


def note_lines(r: WhatIfReport) -> list[str]:
    """The report's notes as sentences, in order."""
    return [phrases.note(n) for n in r.notes]


def document(r: WhatIfReport) -> dict[str, Any]:
    """The JSON report: ``to_dict()`` with each note both as a sentence (``notes``) and as its
    facts (``note_facts``), like the diagnose report; the inferred routing and each policy's
    description likewise (``inferred`` beside ``inferred_facts``, ``description`` beside
    ``description_facts``)."""
    d = r.to_dict()
    facts = d.pop("note_facts")
    out: dict[str, Any] = {}
    for key, value in d.items():
        if key == "inferred_facts":  # the words first, beside their facts
            out["inferred"] = {lvl: phrases.note(n) for lvl, n in r.inferred}
        out[key] = value
    for row, p in zip(out["policies"], r.policies, strict=True):
        row["description"] = describe(p)
    out["ranking"] = {
        "criterion": out["ranking"]["criterion"],
        "text": criterion_line(r),
        **{k: v for k, v in out["ranking"].items() if k != "criterion"},
    }
    return {**out, "notes": note_lines(r), "note_facts": facts}


def headline(r: WhatIfReport) -> str:
    """The verdict by the ranking's criterion (``r.ranking``): why the pick, or why none."""
    untrusted = "" if r.trusted else "UNTRUSTED (the replay does not match the evidence) — "
    g, gain = r.ranking, r.gain
    cur = whatif_phrases.spread(g.current_spread)
    hot = fmt.decimal(g.setting("hot_ratio"), 2)
    if g.verdict == RankingVerdict.BALANCED:
        return (
            f"{untrusted}Nothing to fix: the load is balanced (spread {cur}, under the hot "
            f"ratio {hot}) and no candidate cuts TTFT P99 by "
            f"{fmt.pct(g.setting('large_gain'))} or more."
        )
    if g.verdict == RankingVerdict.NO_FIX:
        return (
            f"{untrusted}No candidate fixes the skew: none cuts the load spread ({cur}) by "
            f"{fmt.pct(g.setting('min_spread_gain'))} without raising TTFT P99 by more "
            f"than {fmt.pct(g.setting('ttft_tolerance'))}; keep the routing and fix the "
            "cause the diagnosis names."
        )
    best = "Recommended" if r.trusted else "Best predicted"
    new = whatif_phrases.spread(r.policy(r.recommended).spread.value)
    if g.verdict == RankingVerdict.LATENCY_ONLY:
        return (
            f"{untrusted}The load is balanced (spread {cur}, under the hot ratio {hot}): no "
            f"skew to fix. {best} for tail latency only: {r.recommended} — TTFT P99 "
            f"{change(gain.get('ttft_p99_ms'))} (at least "
            f"{fmt.pct(g.setting('large_gain'))}), e.g. transient queues such as a burst "
            "that it spreads."
        )
    return (
        f"{untrusted}{best}: {r.recommended} — load spread {cur} → {new}, TTFT P99 "
        f"{change(gain.get('ttft_p99_ms'))}, queue wait P95 "
        f"{change(gain.get('queue_wait_p95_ms'))} against the current routing."
    )


MATCH_WORDS: dict[str, str] = {
    EXACT: "the same algorithm",
    CLOSEST: "the nearest this stack ships",
    NONE: "not available on this stack",
}


def fix_title(r: WhatIfReport) -> str:
    """What the fix section is about: the recommended candidate and its predicted effect."""
    if not r.fix:
        return ""
    g = r.gain
    best = "To apply" if r.trusted else "To apply the best predicted (UNTRUSTED)"
    return (
        f"{best} {r.recommended} — predicted: load spread "
        f"{whatif_phrases.spread(r.ranking.current_spread)} → "
        f"{whatif_phrases.spread(r.policy(r.recommended).spread.value)}, TTFT P99 "
        f"{change(g.get('ttft_p99_ms'))}, queue wait P95 "
        f"{change(g.get('queue_wait_p95_ms'))}, E2E P99 {change(g.get('e2e_p99_ms'))}:"
    )


def fix_rows(r: WhatIfReport) -> list[tuple[str, str, str]]:
    """Per stack: its name (marked when the evidence came from it), the setting, the match."""
    return [
        (f.stack + (" (in use)" if f.in_use else ""), f.setting or "—", MATCH_WORDS[f.match])
        for f in r.fix
    ]


def criterion_line(r: WhatIfReport) -> str:
    return whatif_phrases.criterion(r.ranking)


def trust_line(r: WhatIfReport) -> str:
    if r.trusted:
        return "Calibration: the replay of the current routing reproduces the evidence."
    return (
        "Calibration: the replay of the current routing does NOT reproduce the evidence — "
        "do not trust the ranking."
    )


def calibration_lines(r: WhatIfReport) -> list[str]:
    out = []
    for row in r.calibration:
        err = "" if row.error is None else f", {change(row.error)}"
        flag = "" if row.ok else "  (too far)"
        out.append(
            f"{METRIC_LABELS[row.metric]} observed {value(row.metric, row.observed)}, "
            f"replayed {value(row.metric, row.replayed)}{err}{flag}"
        )
    return out


def scope(r: WhatIfReport) -> str:
    inferred = whatif_phrases.inferred(r.inferred)
    return (
        f"{fmt.name(r.source)}: {fmt.count(r.n_requests)} requests over "
        f"{fmt.count(r.duration_s)} s, {r.instances} instance(s) x {r.dp_ranks} DP rank(s). "
        f"Current routing — {inferred}."
    )


def rows(r: WhatIfReport) -> list[list[str]]:
    out = []
    for p in r.policies:
        mark = " *" if p.name == r.recommended else ""
        out.append(
            [
                p.name + mark,
                p.level,
                whatif_phrases.spread(p.spread.value),
                *(value(k, p.predicted.get(k)) for k in TABLE_KEYS),
            ]
        )
    return out


HEADER = ["policy", "level", "load spread", *(METRIC_LABELS[k] for k in TABLE_KEYS)]
# Narrow headers for the terminal (the Markdown table keeps the full labels).
SHORT_LABELS: dict[str, str] = {
    "max_over_median_load": "max/med",
    "min_over_median_load": "min/med",
    "queue_wait_p95_ms": "queue P95",
    "ttft_p99_ms": "TTFT P99",
    "e2e_p50_ms": "E2E P50",
    "e2e_p99_ms": "E2E P99",
    "kv_peak": "KV peak",
    "throughput_rps": "req/s",
}
SHORT_HEADER = ["policy", "level", "spread", *(SHORT_LABELS[k] for k in TABLE_KEYS)]


def render_markdown(r: WhatIfReport, *, width: int | None = None, color: bool = False) -> str:
    out = [
        "# skewscope what-if",
        "",
        f"**{headline(r)}**",
        "",
        criterion_line(r),
        "",
        scope(r),
        "",
        "## Predictions",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|---|---|" + "---:|" * (len(HEADER) - 2),
    ]
    out += ["| " + " | ".join(row) + " |" for row in rows(r)]
    out += [
        "",
        "`*` recommended. " + "; ".join(f"`{p.name}`: {describe(p)}" for p in r.policies),
        "",
    ]
    if r.fix:
        out += ["## The fix", "", fix_title(r), "", "| stack | setting | match |", "|---|---|---|"]
        out += [
            f"| {a} | `{b}` | {c} |" if b != "—" else f"| {a} | — | {c} |"
            for a, b, c in fix_rows(r)
        ]
        out += [""]
    out += ["## Calibration", "", trust_line(r), ""]
    out += [f"- {line}" for line in calibration_lines(r)]
    if r.notes:
        out += ["", "## Notes", ""] + [f"- {fmt.clean(n)}" for n in note_lines(r)]
    return "\n".join(out) + "\n"


def render_terminal(r: WhatIfReport, *, width: int | None = None, color: bool = False) -> str:
    """Fits any width from 80 columns up, like the diagnose report: the predictions table splits
    into several (each repeating the policy column) rather than cut a number."""
    from rich.console import Console
    from rich.panel import Panel
    from rich.text import Text

    from skewscope.report.terminal import DEFAULT_WIDTH, MIN_WIDTH, column_tables

    w = max(width or DEFAULT_WIDTH, MIN_WIDTH)
    console = Console(
        record=True,
        width=w,
        file=io.StringIO(),
        force_terminal=color,
        color_system="standard" if color else None,
    )
    style = (
        "bold red"
        if not r.trusted
        else ("bold green" if r.recommended != r.current_policy else "bold")
    )
    console.print(Panel(Text(headline(r), style=style), title="skewscope what-if"))
    console.print(Text(criterion_line(r)))
    console.print(Text(scope(r), style="dim"))
    console.print(Text("Predicted by replaying the evidence", style="bold"))
    table = rows(r)
    cols = [(head, [row[i] for row in table]) for i, head in enumerate(SHORT_HEADER) if i > 0]
    styles = [
        "bold green" if p.name == r.recommended and p.name != r.current_policy else ""
        for p in r.policies
    ]
    for part in column_tables("policy", [row[0] for row in table], cols, w, styles):
        console.print(part)
    if r.fix:
        console.print(Text(fix_title(r), style="bold"))
        for a, b, c in fix_rows(r):
            console.print(Text(f"  {a}: {fmt.clean(b)} ({c})"))
    console.print(Text(trust_line(r), style="green" if r.trusted else "bold red"))
    for line in calibration_lines(r):
        console.print(Text(f"  {line}", style="dim" if "too far" not in line else "red"))
    for p in r.policies:
        line = f"· {fmt.clean(p.name)}: {fmt.clean(describe(p))}"
        console.print(Text(line, style="dim"))
    for n in note_lines(r):
        console.print(Text(f"note: {fmt.clean(n)}", style="yellow"))
    return console.export_text(styles=color)


def step_line(r: WhatIfReport) -> str:
    """The fitted step law and limits, one line."""
    m = r.step_model
    return (
        f"step = {fmt.decimal(m['fixed_ms'], 1)} ms + "
        f"{fmt.decimal(m['per_prefill_token_ms'], 4)} ms/prefill token + "
        f"{fmt.decimal(m['per_decode_seq_ms'], 3)} ms/decode sequence; batch ceiling "
        f"{fmt.count(m['max_running'])}, token budget {fmt.count(m['token_budget'])}, KV "
        f"blocks of {fmt.count(m['block_size'])} tokens"
    )


def render_html(r: WhatIfReport, *, width: int | None = None, color: bool = False) -> str:
    """One self-contained page (like the diagnose report): tables, bar charts per policy and
    the load share per unit, drawn from the embedded JSON."""
    import sys

    from skewscope.report import html

    return html.page(
        "whatif.html.j2", "skewscope what-if", document(r), r=r, w=sys.modules[__name__]
    )


def render_json(r: WhatIfReport, *, width: int | None = None, color: bool = False) -> str:
    return json.dumps(document(r), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


RENDER: dict[str, Callable[..., str]] = {
    "terminal": render_terminal,
    "markdown": render_markdown,
    "json": render_json,
    "html": render_html,
}
