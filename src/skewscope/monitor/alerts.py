"""The Skewscope* alerts on the recorded series (``skewscope rules``; a contract:
docs/monitoring.md, one runbook each in docs/runbooks/).

Persistence is judged over a horizon that fits paging: a unit must have been hot (starved) in
at least ``persist_share`` of its last ``alert_windows`` windows (the ``horizon``), and that must
hold for ``for:`` (``alert_for_windows`` windows by default). An instant flag would let a unit
flagged in 80 % of the evaluations restart ``for`` every few minutes; a share over the
diagnosis' 2 h look-back would need an hour of skew before the first page. A burst shorter than
the smoothing never makes the unit hot long enough. The look-back stays the span of the
``diagnose`` command the alert links to. Numbers are ``monitor.template`` tokens, as in
``monitor.records``.
"""

from __future__ import annotations

from typing import Any

from skewscope.monitor.records import LevelRules, lst, rec
from skewscope.monitor.signals import Scope
from skewscope.monitor.template import param

HOT_ALERT = "SkewscopeHotUnit"
STARVED_ALERT = "SkewscopeStarvedUnit"
GAP_ALERT = "SkewscopeDPGapWidening"
ALERTS: tuple[str, ...] = (HOT_ALERT, STARVED_ALERT, GAP_ALERT)
RUNBOOKS_DIR = "docs/runbooks"  # one <alert>.md per alert, linked by ``runbook_url``


def runbook_url(alert: str) -> str:
    return f"{param('runbook_url_base')}/{alert}.md"


def _selector_template(labels: tuple[str, ...]) -> tuple[str, str]:
    """A printf format and its arguments selecting the alert's own series (``query`` func)."""
    fmt = ",".join(f"{lab}=%q" for lab in labels)
    args = " ".join(f"$labels.{lab}" for lab in labels)
    return "{" + fmt + "}", args


def _ratio(name: str, labels: tuple[str, ...]) -> str:
    fmt, args = _selector_template(labels)
    return (
        f'{{{{ with printf "{rec(name)}{fmt}" {args} | query }}}}'
        f'{{{{ . | first | value | printf "%.2fx" }}}}{{{{ else }}}}n/a{{{{ end }}}}'
    )


def _driver(labels: tuple[str, ...]) -> str:
    """The heat signal that is highest for the alert's unit, from ``heat:signal``."""
    fmt, args = _selector_template(labels)
    return (
        f'{{{{ with printf "{rec("heat:signal")}{fmt}" {args} | query }}}}'
        f'{{{{ . | first | label "signal" }}}}{{{{ else }}}}its signals{{{{ end }}}}'
    )


def _diagnose_cmd(scope: Scope) -> str:
    matchers = ",".join(f'{lab}="{{{{ $labels.{lab} }}}}"' for lab in scope.group_by)
    sel = f" --selector '{{{matchers}}}'" if matchers else ""
    return (
        f"skewscope diagnose --prometheus {{{{ $externalURL }}}} "
        f"--last {param('lookback')} --level {scope.level.value}{sel}"
    )


def _unit_words(scope: Scope) -> str:
    rank = scope.rank_label
    if rank is None:
        return "instance {{ $labels.instance }}"
    return f"DP rank {{{{ $labels.{rank} }}}} of instance {{{{ $labels.instance }}}}"


def alerts(lv: LevelRules) -> list[dict[str, Any]]:
    """The Skewscope* alerts of one dialect and level, on its recorded series."""
    th, u, p, s = lv.th, lv.U, lv.P, lv.s
    labs = (*s.by, "level", "dialect")
    horizon = param("horizon")
    for_ = param("for")
    unit = _unit_words(s)
    cmd = _diagnose_cmd(s)
    share = th.persist_share
    static = {"severity": "warning", "level": lv.lv, "dialect": lv.d}
    history = param("history")

    def judged(flag: str) -> str:
        """The unit has been judged for at least ``min_windows`` windows (the diagnosis' gate),
        so a share taken over a short history cannot fire: its flag existed that long ago
        (a time, not a sample count, so evaluation jitter cannot open or close the gate)."""
        return f"({lv.r(flag)} offset {history})"

    out: list[dict[str, Any]] = []
    # the value: the highest heat over the horizon (the unit need not be hot at this very
    # evaluation, only in most of the horizon)
    hot = (
        f"(max_over_time({lv.r('heat:ratio')}[{horizon}])"
        f" and on ({p}) {lv.r('group:active')}"
        f" and on ({u}) (avg_over_time({lv.r('hot')}[{horizon}]) >= {share})"
        f" and on ({u}) {judged('hot')}"
    )
    if "starved" in lv.have:
        hot += f" unless on ({u}) (avg_over_time({lv.r('starved')}[{horizon}]) >= {share})"
    hot += f") * on ({u}) group_left (kind) {lv.r('kind')}"
    if "count:ratio" in lv.have:
        why = (
            f"requests {_ratio('count:ratio', labs)}, tokens per request "
            f"{_ratio('tokens_per_request:ratio', labs)}"
            + (f", latency {_ratio('latency:ratio', labs)}" if "latency:ratio" in lv.have else "")
            + " its peers'"
        )
    else:
        why = "no per-unit request counter at this level, so the kind is unknown"
    out.append(
        {
            "alert": HOT_ALERT,
            "expr": hot,
            "for": for_,
            "labels": dict(static),
            "annotations": {
                "summary": f'{unit} runs hot: up to {{{{ $value | printf "%.2f" }}}}x the peer '
                f"median on {_driver(labs)} ({{{{ $labels.kind }}}} skew)",
                "description": f"{unit} has been hot (>= {th.hot_ratio}x the peer median on a "
                f"load or queue signal) in at least {share} of the last {horizon}, "
                f"for {for_}: {why}. Full evidence: {cmd}",
                "runbook_url": runbook_url(HOT_ALERT),
            },
        }
    )
    if "starved" in lv.have:
        out.append(
            {
                "alert": STARVED_ALERT,
                "expr": (
                    f"avg_over_time({lv.r('requests:starved_ratio')}[{horizon}])"
                    f" and on ({p}) {lv.r('group:active')}"
                    f" and on ({u}) (avg_over_time({lv.r('starved')}[{horizon}]) >= {share})"
                    f" and on ({u}) {judged('starved')}"
                ),
                "for": for_,
                "labels": dict(static),
                "annotations": {
                    "summary": f'{unit} gets {{{{ $value | printf "%.2f" }}}}x its peers\' '
                    "requests while they are busy",
                    "description": f"{unit} has served less than {th.starved_ratio}x the peer "
                    f"median request rate in at least {share} of the last "
                    f"{horizon}, for {for_}: check its health check, "
                    f"service discovery and pool membership. Full evidence: {cmd}",
                    "runbook_url": runbook_url(STARVED_ALERT),
                },
            }
        )
    if "dp_gap:running" in lv.have:
        trend = th.trend_min_slope_share
        w_s = param("window_seconds")
        tail = lv.r("e2e_ms:p99").replace(f'level="{lv.lv}"', 'level="instance"')
        if "e2e_ms:p99" not in lv.have:
            tail = lv.r("ttft_ms:p99").replace(f'level="{lv.lv}"', 'level="instance"')
        inst = lst((*s.group_by, "instance", "dialect"))
        gap = lv.r("dp_gap:running")
        out.append(
            {
                "alert": GAP_ALERT,
                "expr": (
                    f"(deriv({gap}[{horizon}]) * {w_s} / (avg_over_time({gap}[{horizon}]) > 0)"
                    f" >= {trend})"
                    f" and on ({u}) ({lv.r('heat:ratio')} >= {th.hot_ratio})"
                    f" and on ({p}) {lv.r('group:active')}"
                    f" and on ({inst}) (deriv({tail}[{horizon}]) * {w_s}"
                    f" / avg_over_time({tail}[{horizon}]) >= {trend})"
                ),
                "for": for_,
                "labels": dict(static),
                "annotations": {
                    "summary": f"the running-request gap of {unit} to its sibling ranks keeps "
                    "widening while the instance's P99 latency rises",
                    "description": f'{unit}: the gap grows by {{{{ $value | printf "%.2f" }}}} of '
                    f"its mean per {w_s} s window (threshold {trend}) and the "
                    f"instance's P99 rises as well. Full evidence: {cmd}",
                    "runbook_url": runbook_url(GAP_ALERT),
                },
            }
        )
    return out
