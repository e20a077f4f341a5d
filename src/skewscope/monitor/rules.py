"""``skewscope rules``: one Prometheus rule file (recording + alerting) per the diagnosis method.

Per dialect and level, recording rules put every unit against the median of its peers (same
``--group-by`` labels; at DP level also the same instance) on the method's heat signals, gate
near-idle groups out, and name the kind of skew from request-rate and tokens-per-request
ratios; the alerts' ``for:`` carries persistence, and a unit must also have been hot in at least
``persist_share`` of the look-back (``WindowPolicy.target_windows`` windows, the span the
diagnosis judges by default), so a burst never alerts. Every number comes from
``config.Thresholds`` and ``frame.WINDOWS``; metric names come from
the dialect tables through ``monitor.signals``. Names and labels are a contract:
docs/monitoring.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.errors import UsageError
from skewscope.frame import WINDOWS, Level
from skewscope.monitor.signals import Scope, levels, unit_expr
from skewscope.sources.dialects import DIALECTS

PREFIX = "skewscope"
HOT_ALERT = "SkewscopeHotUnit"
STARVED_ALERT = "SkewscopeStarvedUnit"
GAP_ALERT = "SkewscopeDPGapWidening"
ALERTS: tuple[str, ...] = (HOT_ALERT, STARVED_ALERT, GAP_ALERT)
KINDS: tuple[str, ...] = ("count", "weight", "capability", "unknown")

# Per-unit base records: record name -> canonical signal (its PromQL from monitor.signals).
BASE: dict[str, str] = {
    "requests:rate": "requests",
    "prompt_tokens:rate": "prompt_tokens",
    "generation_tokens:rate": "generation_tokens",
    "running:avg": "running",
    "waiting:avg": "waiting",
    "queue_wait_ms:mean": "queue_wait_mean_ms",
    "e2e_ms:mean": "e2e_mean_ms",
    "e2e_ms:p99": "e2e_p99_ms",
    "ttft_ms:p99": "ttft_p99_ms",
}
# Heat signals (as in analysis.detect): smoothed record -> its base record.
HEAT: dict[str, str] = {
    "requests": "requests:rate",
    "tokens": "tokens:rate",
    "running": "running:avg",
    "waiting": "waiting:avg",
    "queue_wait_ms": "queue_wait_ms:mean",
}


def duration(seconds: float) -> str:
    """A PromQL duration in the largest whole unit (``5m``, ``2h``, ``90s``, ``500ms``)."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise UsageError(f"durations must be positive, got {seconds:g} s")
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def rec(name: str) -> str:
    return f"{PREFIX}:{name}"


@dataclass(frozen=True)
class RuleOptions:
    dialects: tuple[str, ...] = tuple(DIALECTS)
    group_by: tuple[str, ...] = ("job", "model_name")
    selector: str = ""
    window_s: float = 300.0
    for_s: float | None = None  # default: min_consecutive windows
    thresholds: Thresholds = field(default_factory=lambda: DEFAULT_THRESHOLDS)

    @property
    def persistence_s(self) -> float:
        th = self.thresholds
        return self.for_s if self.for_s is not None else th.min_consecutive * self.window_s

    @property
    def lookback_s(self) -> float:
        return WINDOWS.target_windows * self.window_s

    @property
    def smooth_s(self) -> float:
        return self.thresholds.smooth_windows * self.window_s


def _lst(labels: tuple[str, ...]) -> str:
    return ", ".join(labels)


class _Level:
    """The rules of one dialect at one level."""

    def __init__(self, scope: Scope, opts: RuleOptions) -> None:
        self.s = scope
        self.o = opts
        self.th = opts.thresholds
        self.d = scope.dialect.name
        self.lv = scope.level.value
        tags = ("level", "dialect")
        self.U = _lst((*scope.by, *tags))  # one unit
        self.P = _lst((*scope.peer_labels, *tags))  # one peer group
        self.rules: list[dict[str, Any]] = []
        self.have: set[str] = set()

    # -- helpers ------------------------------------------------------------------------
    def r(self, name: str) -> str:
        """A recorded series of this dialect and level."""
        return f'{rec(name)}{{level="{self.lv}", dialect="{self.d}"}}'

    def record(self, name: str, expr: str) -> None:
        self.rules.append(
            {"record": rec(name), "expr": expr, "labels": {"level": self.lv, "dialect": self.d}}
        )
        self.have.add(name)

    def peer_ref(self, x: str) -> str:
        """Per-unit reference of the unit's peers: the group median (groups of 3 or more), the
        other unit (groups of 2, where the median would include the unit itself)."""
        p = self.P
        return (
            f"((({x}) * 0 + on ({p}) group_left () quantile by ({p}) (0.5, {x}))"
            f" and on ({p}) (count by ({p}) ({x}) > 2))"
            f" or (sum by ({p}) ({x}) - on ({p}) group_right () ({x}))"
        )

    # -- records --------------------------------------------------------------------------
    def base(self) -> None:
        w = duration(self.o.window_s)
        for name, signal in BASE.items():
            expr = unit_expr(self.s, signal, w)
            if expr is not None:
                self.record(name, expr)
        if {"prompt_tokens:rate", "generation_tokens:rate"} <= self.have:
            self.record(
                "tokens:rate",
                f"{self.r('prompt_tokens:rate')} + {self.r('generation_tokens:rate')}",
            )

    def smoothed(self) -> None:
        sm = duration(self.o.smooth_s)
        for name, base in HEAT.items():
            if base in self.have:
                self.record(f"{name}:smoothed", f"avg_over_time({self.r(base)}[{sm}])")

    def activity(self) -> None:
        """A group is judged only with enough units and traffic (the diagnosis' gates)."""
        th, w_s, p = self.th, self.o.window_s, self.P
        units = f"count by ({p}) ({self.r('running:smoothed')}) >= {th.min_units}"
        if "requests:smoothed" in self.have:
            req = self.r("requests:smoothed")
            look = duration(self.o.lookback_s)
            units = f"count by ({p}) ({req}) >= {th.min_units}"
            per_window = f"avg by ({p}) ({req}) * {w_s:g} >= {th.min_requests_per_window:g}"
            total = (
                f"sum by ({p}) (avg_over_time({self.r('requests:rate')}[{look}]))"
                f" * {self.o.lookback_s:g} >= {th.min_requests_total}"
            )
            expr = f"({per_window}) and on ({p}) ({units}) and on ({p}) ({total})"
        else:  # no per-unit request counter at this level: judge on the running batch
            run = f"avg by ({p}) ({self.r('running:smoothed')}) >= {th.floor_running:g}"
            expr = f"({run}) and on ({p}) ({units})"
        self.record("group:active", f"clamp_max(clamp_min({expr}, 1), 1)")

    def floors(self) -> dict[str, str]:
        th = self.th
        req_floor = th.min_requests_per_window / self.o.window_s
        out = {
            "requests": f"{req_floor:g}",
            "running": f"{th.floor_running:g}",
            "waiting": f"{th.floor_waiting:g}",
            "queue_wait_ms": f"{th.floor_queue_wait_ms:g}",
        }
        if "tokens:smoothed" in self.have and "requests:smoothed" in self.have:
            tpr = f"{self.r('tokens:smoothed')} / {self.r('requests:smoothed')}"
            out["tokens"] = f"quantile by ({self.P}) (0.5, {tpr}) * {req_floor:g}"
        return out

    def ratios(self) -> None:
        floors = self.floors()
        parts = []
        for name in HEAT:
            if f"{name}:smoothed" not in self.have or name not in floors:
                continue
            x = self.r(f"{name}:smoothed")
            ref = self.peer_ref(x)
            floor = floors[name]
            if "quantile" in floor:  # a per-group floor: max(ref, floor) by matching
                vec = f"({floor})"
                ref = (
                    f"(({ref}) >= on ({self.P}) group_left () {vec})"
                    f" or (({ref}) * 0 + on ({self.P}) group_left () {vec})"
                )
            else:
                ref = f"clamp_min({ref}, {floor})"
            self.record(f"{name}:peer_ratio", f"{x} / ({ref})")
            parts.append(
                f'label_replace({self.r(name + ":peer_ratio")}, "signal", "{name}", "", "")'
            )
        self.record("heat:ratio", f"max by ({self.U}) ({' or '.join(parts)})")
        # the same, keeping which signal is highest (label ``signal``), for the annotations
        self.record("heat:signal", f"topk by ({self.U}) (1, {' or '.join(parts)})")
        self.record(
            "hot",
            f"({self.r('heat:ratio')} >= bool {self.th.hot_ratio:g})"
            f" and on ({self.P}) {self.r('group:active')}",
        )

    def starved(self) -> None:
        if "requests:smoothed" not in self.have:
            return
        th = self.th
        req = self.r("requests:smoothed")
        ratio = f"{req} / (({self.peer_ref(req)}) > 0)"
        if "running:smoothed" in self.have:
            run = self.r("running:smoothed")
            busy = f"{run} / clamp_min({self.peer_ref(run)}, {th.floor_running:g})"
            ratio = f"({ratio}) unless on ({self.U}) ({busy} >= {th.starved_busy_ratio:g})"
        self.record("requests:starved_ratio", ratio)
        self.record(
            "starved",
            f"({self.r('requests:starved_ratio')} < bool {th.starved_ratio:g})"
            f" and on ({self.P}) {self.r('group:active')}",
        )

    def kind(self) -> None:
        """count / weight / capability / unknown from ratios over the look-back, as the diagnosis
        classifies over its whole range (a short span lets a saturated unit's finished-request
        count wander and the kind label flip, which would restart the alert's ``for``)."""
        th, u = self.th, self.U
        span = duration(self.o.lookback_s)
        sus = {}
        for name in ("requests:rate", "prompt_tokens:rate", "generation_tokens:rate",
                     "e2e_ms:mean"):
            if name in self.have:
                sus[name] = f"avg_over_time({self.r(name)}[{span}])"
        branches: list[tuple[str, str]] = []
        if {"requests:rate", "prompt_tokens:rate", "generation_tokens:rate"} <= set(sus):
            n, pi, po = sus["requests:rate"], sus["prompt_tokens:rate"], sus[
                "generation_tokens:rate"]
            self.record("count:ratio", f"({n}) / ({self.peer_ref(n)})")
            per = f"(({n}) > 0)"  # no sample, not NaN, where no request finished
            tpr = {"input": f"({pi}) / {per}", "output": f"({po}) / {per}",
                   "total": f"(({pi}) + ({po})) / {per}"}
            for side, x in tpr.items():
                self.record(f"tokens_per_request_{side}:ratio", f"{x} / ({self.peer_ref(x)})")
            heavier = " or ".join(
                f'label_replace({self.r(f"tokens_per_request_{s}:ratio")}, "side", "{s}", "", "")'
                for s in tpr
            )
            self.record("tokens_per_request:ratio", f"max by ({u}) ({heavier})")
            c, k = self.r("count:ratio"), self.r("tokens_per_request_total:ratio")
            # share of the excess token load explained by more requests: (c-1) / (c*k-1)
            self.record("count:share", f"({c} - 1) / (({c} * on ({u}) {k} - 1) > 0)")
            share, hv = self.r("count:share"), self.r("tokens_per_request:ratio")
            branches += [
                ("count", f"{c} >= {th.count_ratio:g} and on ({u}) "
                          f"({share} >= {th.explain_share:g} or {c} == +Inf)"),
                ("weight", f"{hv} >= {th.weight_ratio:g} unless on ({u}) "
                           f"({share} > {th.explain_share:g})"),
            ]
            if "e2e_ms:mean" in sus:
                lat = sus["e2e_ms:mean"]
                self.record("latency:ratio", f"({lat}) / ({self.peer_ref(lat)})")
                branches.append(
                    ("capability", f"{self.r('latency:ratio')} >= {th.capability_ratio:g}"
                                   f" and on ({u}) {c} < {th.count_ratio:g}"
                                   f" and on ({u}) {hv} < {th.weight_ratio:g}")
                )
            branches.append(("count", f"{c} >= {th.count_ratio:g}"))
        branches.append(("unknown", self.r("heat:ratio")))
        self.record(
            "kind:now",
            f" or on ({u}) ".join(
                f'label_replace(count without () ({cond}), "kind", "{kind}", "", "")'
                for kind, cond in branches
            ),
        )
        # The alert's kind is the one named most often over the look-back: a label that flips
        # with noise would restart the alert's ``for`` each time. One 0/1 vote per kind a unit
        # can get, every evaluation, so the share is over the same samples for every kind.
        zero = f"({self.r('heat:ratio')} * 0)"
        now = self.r("kind:now")[:-1]  # the selector without its closing brace
        kinds = dict.fromkeys(k for k, _ in branches)
        self.record(
            "kind:vote",
            " or ".join(
                f'label_replace({now}, kind="{k}"}} or on ({u}) {zero}, "kind", "{k}", "", "")'
                for k in kinds
            ),
        )
        look = duration(self.o.lookback_s)
        self.record(
            "kind",
            f"count without () (topk by ({u}) (1, avg_over_time({self.r('kind:vote')}[{look}])))",
        )

    def gap(self) -> None:
        if self.s.level is not Level.DP or "running:smoothed" not in self.have:
            return
        run = self.r("running:smoothed")
        self.record("dp_gap:running", f"{run} - ({self.peer_ref(run)})")

    def build_records(self) -> list[dict[str, Any]]:
        self.base()
        if "running:avg" not in self.have:
            return []
        self.smoothed()
        self.activity()
        self.ratios()
        self.starved()
        self.kind()
        self.gap()
        return self.rules


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


def _diagnose_cmd(opts: RuleOptions, scope: Scope) -> str:
    matchers = ",".join(f'{lab}="{{{{ $labels.{lab} }}}}"' for lab in scope.group_by)
    sel = f" --selector '{{{matchers}}}'" if matchers else ""
    return (
        f"skewscope diagnose --prometheus {{{{ $externalURL }}}} "
        f"--last {duration(opts.lookback_s)} --level {scope.level.value}{sel}"
    )


def _unit_words(scope: Scope) -> str:
    rank = scope.rank_label
    if rank is None:
        return "instance {{ $labels.instance }}"
    return f"DP rank {{{{ $labels.{rank} }}}} of instance {{{{ $labels.instance }}}}"


def _alerts(lv: _Level, opts: RuleOptions) -> list[dict[str, Any]]:
    th, u, p, s = lv.th, lv.U, lv.P, lv.s
    labs = (*s.by, "level", "dialect")
    look = duration(opts.lookback_s)
    for_ = duration(opts.persistence_s)
    unit = _unit_words(s)
    cmd = _diagnose_cmd(opts, s)
    share = f"{th.persist_share:g}"
    static = {"severity": "warning", "level": lv.lv, "dialect": lv.d}
    history = duration(th.min_windows * opts.window_s)

    def judged(flag: str) -> str:
        """The unit has been judged for at least ``min_windows`` windows (the diagnosis' gate),
        so a share taken over a short history cannot fire: its flag existed that long ago
        (a time, not a sample count, so evaluation jitter cannot open or close the gate)."""
        return f"({lv.r(flag)} offset {history})"

    out: list[dict[str, Any]] = []
    hot = (
        f"(({lv.r('heat:ratio')} >= {th.hot_ratio:g})"
        f" and on ({p}) {lv.r('group:active')}"
        f" and on ({u}) (avg_over_time({lv.r('hot')}[{look}]) >= {share})"
        f" and on ({u}) {judged('hot')}"
    )
    if "starved" in lv.have:
        hot += f" unless on ({u}) (avg_over_time({lv.r('starved')}[{look}]) >= {share})"
    hot += f") * on ({u}) group_left (kind) {lv.r('kind')}"
    if "count:ratio" in lv.have:
        why = (
            f"requests {_ratio('count:ratio', labs)}, tokens per request "
            f"{_ratio('tokens_per_request:ratio', labs)}"
            + (f", latency {_ratio('latency:ratio', labs)}" if "latency:ratio" in lv.have
               else "")
            + " its peers'"
        )
    else:
        why = "no per-unit request counter at this level, so the kind is unknown"
    out.append({
        "alert": HOT_ALERT,
        "expr": hot,
        "for": for_,
        "labels": dict(static),
        "annotations": {
            "summary": f"{unit} runs hot: {{{{ $value | printf \"%.2f\" }}}}x the peer median "
                       f"on {_driver(labs)} ({{{{ $labels.kind }}}} skew)",
            "description": f"{unit} has been hot (>= {th.hot_ratio:g}x the peer median on a "
                           f"load or queue signal) for {for_} and in at least {share} of the "
                           f"last {look}: {why}. Full evidence: {cmd}",
        },
    })
    if "starved" in lv.have:
        out.append({
            "alert": STARVED_ALERT,
            "expr": (
                f"({lv.r('requests:starved_ratio')} < {th.starved_ratio:g})"
                f" and on ({p}) {lv.r('group:active')}"
                f" and on ({u}) (avg_over_time({lv.r('starved')}[{look}]) >= {share})"
                f" and on ({u}) {judged('starved')}"
            ),
            "for": for_,
            "labels": dict(static),
            "annotations": {
                "summary": f"{unit} gets {{{{ $value | printf \"%.2f\" }}}}x its peers' "
                           "requests while they are busy",
                "description": f"{unit} has served less than {th.starved_ratio:g}x the peer "
                               f"median request rate for {for_}: check its health check, "
                               f"service discovery and pool membership. Full evidence: {cmd}",
            },
        })
    if "dp_gap:running" in lv.have:
        trend = f"{th.trend_min_slope_share:g}"
        w_s = f"{opts.window_s:g}"
        tail = lv.r("e2e_ms:p99").replace(f'level="{lv.lv}"', 'level="instance"')
        if "e2e_ms:p99" not in lv.have:
            tail = lv.r("ttft_ms:p99").replace(f'level="{lv.lv}"', 'level="instance"')
        inst = _lst((*s.group_by, "instance", "dialect"))
        gap = lv.r("dp_gap:running")
        out.append({
            "alert": GAP_ALERT,
            "expr": (
                f"(deriv({gap}[{for_}]) * {w_s} / (avg_over_time({gap}[{for_}]) > 0) >= {trend})"
                f" and on ({u}) ({lv.r('heat:ratio')} >= {th.hot_ratio:g})"
                f" and on ({p}) {lv.r('group:active')}"
                f" and on ({inst}) (deriv({tail}[{for_}]) * {w_s}"
                f" / avg_over_time({tail}[{for_}]) >= {trend})"
            ),
            "for": for_,
            "labels": dict(static),
            "annotations": {
                "summary": f"the running-request gap of {unit} to its sibling ranks keeps "
                           "widening while the instance's P99 latency rises",
                "description": f"{unit}: the gap grows by {{{{ $value | printf \"%.2f\" }}}} of "
                               f"its mean per {w_s} s window (threshold {trend}) and the "
                               f"instance's P99 rises as well. Full evidence: {cmd}",
            },
        })
    return out


def build_rules(opts: RuleOptions) -> dict[str, Any]:
    """The rule file as a dict (``{"groups": [...]}``), one group per dialect."""
    groups = []
    for name in opts.dialects:
        dialect = DIALECTS[name]
        rules: list[dict[str, Any]] = []
        alerts: list[dict[str, Any]] = []
        for level in levels(dialect):
            lv = _Level(Scope(dialect, level, opts.group_by, opts.selector), opts)
            records = lv.build_records()
            if records:
                rules += records
                alerts += _alerts(lv, opts)
        if rules:  # a dialect without a running gauge per unit (llm-d's router) has none
            groups.append({"name": f"skewscope-{name}", "rules": rules + alerts})
    if not groups:
        raise UsageError(
            f"rules: {', '.join(opts.dialects)} exposes no running-request gauge per unit "
            "(a router's queue only): nothing to compare"
        )
    return {"groups": groups}


def render_rules(opts: RuleOptions) -> str:
    """The rule file as YAML text."""
    import yaml

    changed = opts.thresholds.overridden()
    values = opts.thresholds.as_dict()
    said = (" (--config: " + ", ".join(f"{k} = {values[k]:g}" for k in changed) + ")"
            if changed else "")
    head = (
        "# Generated by `skewscope rules`: peer-median recording rules and the Skewscope* alerts."
        f"\n# Thresholds from skewscope.config.Thresholds{said}; see docs/monitoring.md.\n"
    )
    body: str = yaml.safe_dump(build_rules(opts), sort_keys=False, width=1_000_000)
    return head + body
