"""The recording rules of one dialect at one level (``skewscope rules``, docs/monitoring.md).

Per dialect and level, the records put every unit against the median of its peers (same
``--group-by`` labels; at DP level also the same instance) on the method's heat signals, gate
near-idle groups out, and name the kind of skew from request-rate and tokens-per-request
ratios. Every number is a ``monitor.template`` token (a threshold of ``config.Thresholds`` or a
duration from the options), filled in by ``rules`` or by the jsonnet mixin; metric names come
from the dialect tables through ``monitor.signals``.
"""

from __future__ import annotations

from typing import Any

from skewscope.catalogue import COUNTED_SIGNALS, Kind
from skewscope.frame import Level
from skewscope.monitor.signals import Scope, unit_expr
from skewscope.monitor.template import THRESHOLD_TOKENS, param

PREFIX = "skewscope"
# The kinds the rules can name (the kind label); the analysis names more (catalogue.Kind).
KINDS: tuple[Kind, ...] = (Kind.COUNT, Kind.WEIGHT, Kind.CAPABILITY, Kind.UNKNOWN)

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


def rec(name: str) -> str:
    return f"{PREFIX}:{name}"


def lst(labels: tuple[str, ...]) -> str:
    return ", ".join(labels)


class LevelRules:
    """The rules of one dialect at one level."""

    def __init__(self, scope: Scope) -> None:
        self.s = scope
        self.th = THRESHOLD_TOKENS  # tokens: the values are filled in by ``fill``
        self.d = scope.dialect.name
        self.lv = scope.level.value
        tags = ("level", "dialect")
        self.U = lst((*scope.by, *tags))  # one unit
        self.P = lst((*scope.peer_labels, *tags))  # one peer group
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
        w = param("window")
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
        """The median of the span's evaluations, not their mean: a burst and the queue it
        leaves raise the window's rate for a third of the span, which a mean spreads over all of
        it (the rules' form of the diagnosis' ``outlasts_burst``)."""
        sm = param("smooth")
        for name, base in HEAT.items():
            if base in self.have:
                self.record(f"{name}:smoothed", f"quantile_over_time(0.5, {self.r(base)}[{sm}])")

    def activity(self) -> None:
        """A group is judged only with enough units and traffic (the diagnosis' gates)."""
        th, w_s, p = self.th, param("window_seconds"), self.P
        units = f"count by ({p}) ({self.r('running:smoothed')}) >= {th.min_units}"
        if "requests:smoothed" in self.have:
            req = self.r("requests:smoothed")
            look = param("lookback")
            units = f"count by ({p}) ({req}) >= {th.min_units}"
            per_window = f"avg by ({p}) ({req}) * {w_s} >= {th.min_requests_per_window}"
            total = (
                f"sum by ({p}) (avg_over_time({self.r('requests:rate')}[{look}]))"
                f" * {param('lookback_seconds')} >= {th.min_requests_total}"
            )
            expr = f"({per_window}) and on ({p}) ({units}) and on ({p}) ({total})"
        else:  # no per-unit request counter at this level: judge on the running batch
            run = f"avg by ({p}) ({self.r('running:smoothed')}) >= {th.floor_running}"
            expr = f"({run}) and on ({p}) ({units})"
        self.record("group:active", f"clamp_max(clamp_min({expr}, 1), 1)")

    def floors(self) -> dict[str, str]:
        th = self.th
        req_floor = param("request_floor")
        out = {
            "requests": f"{req_floor}",
            "running": f"{th.floor_running}",
            "waiting": f"{th.floor_waiting}",
            "queue_wait_ms": f"{th.floor_queue_wait_ms}",
        }
        if "tokens:smoothed" in self.have and "requests:smoothed" in self.have:
            tpr = f"{self.r('tokens:smoothed')} / {self.r('requests:smoothed')}"
            out["tokens"] = f"quantile by ({self.P}) (0.5, {tpr}) * {req_floor}"
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
            ratio = f"{x} / ({ref})"
            if name in COUNTED_SIGNALS:
                self.record(f"{name}:peer_ref", ref)
                ratio = self.significant(name, x, self.r(f"{name}:peer_ref"))
            self.record(f"{name}:peer_ratio", ratio)
            parts.append(
                f'label_replace({self.r(name + ":peer_ratio")}, "signal", "{name}", "", "")'
            )
        self.record("heat:ratio", f"max by ({self.U}) ({' or '.join(parts)})")
        # the same, keeping which signal is highest (label ``signal``), for the annotations
        self.record("heat:signal", f"topk by ({self.U}) (1, {' or '.join(parts)})")
        self.record(
            "hot",
            f"({self.r('heat:ratio')} >= bool {self.th.hot_ratio})"
            f" and on ({self.P}) {self.r('group:active')}",
        )

    def significant(self, name: str, x: str, ref: str) -> str:
        """The peer ratio of a counted signal, held at 1 where the unit's excess over its
        reference is within ``hot_noise_sigmas`` Poisson sigmas of the reference's count
        (requests over the smoothing span; running and waiting requests as they are): two DP
        ranks running 13 and 9 on average over a few minutes are 1.4x apart by chance. The
        alerts judge a horizon of a few windows, not the diagnosis' range, so chance must be
        ruled out in each window; the series stays present so the horizon's share is over
        every evaluation."""
        c = param("smooth_seconds") if name == "requests" else "1"
        u = self.U
        ratio = f"{x} / {ref}"
        sig = f"(({x} - {ref}) * {c} >= {self.th.hot_noise_sigmas} * sqrt({ref} * {c}))"
        return f"(({ratio}) and on ({u}) {sig}) or on ({u}) clamp_max({ratio}, 1)"

    def starved(self) -> None:
        if "requests:smoothed" not in self.have:
            return
        th = self.th
        req = self.r("requests:smoothed")
        ratio = f"{req} / (({self.peer_ref(req)}) > 0)"
        if "running:smoothed" in self.have:
            run = self.r("running:smoothed")
            busy = f"{run} / clamp_min({self.peer_ref(run)}, {th.floor_running})"
            ratio = f"({ratio}) unless on ({self.U}) ({busy} >= {th.starved_busy_ratio})"
        self.record("requests:starved_ratio", ratio)
        # 0 or 1 wherever the unit is judged, busy (no starved ratio) or not: the alerts'
        # history gate reads whether the flag existed ``min_windows`` ago, and a flag present
        # only while the unit is not busy would hold a starved unit back that long after onset
        self.record(
            "starved",
            f"(({self.r('requests:starved_ratio')} < bool {th.starved_ratio})"
            f" or on ({self.U}) ({req} * 0)) and on ({self.P}) {self.r('group:active')}",
        )

    def kind(self) -> None:
        """count / weight / capability / unknown from ratios over the alerts' horizon (the
        diagnosis classifies over its whole range, but over a 2 h look-back a fresh 20 min skew
        is diluted below every dead band and reads ``unknown``); the vote below keeps the label
        from flipping with noise inside that horizon."""
        th, u = self.th, self.U
        span = param("horizon")
        sus = {}
        for name in (
            "requests:rate",
            "prompt_tokens:rate",
            "generation_tokens:rate",
            "e2e_ms:mean",
        ):
            if name in self.have:
                sus[name] = f"avg_over_time({self.r(name)}[{span}])"
        branches: list[tuple[Kind, str]] = []
        if {"requests:rate", "prompt_tokens:rate", "generation_tokens:rate"} <= set(sus):
            n, pi, po = (
                sus["requests:rate"],
                sus["prompt_tokens:rate"],
                sus["generation_tokens:rate"],
            )
            self.record("count:ratio", f"({n}) / ({self.peer_ref(n)})")
            per = f"(({n}) > 0)"  # no sample, not NaN, where no request finished
            tpr = {
                "input": f"({pi}) / {per}",
                "output": f"({po}) / {per}",
                "total": f"(({pi}) + ({po})) / {per}",
            }
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
                (
                    Kind.COUNT,
                    f"{c} >= {th.count_ratio} and on ({u}) "
                    f"({share} >= {th.explain_share} or {c} == +Inf)",
                ),
                (
                    Kind.WEIGHT,
                    f"{hv} >= {th.weight_ratio} unless on ({u}) ({share} > {th.explain_share})",
                ),
            ]
            if "e2e_ms:mean" in sus:
                lat = sus["e2e_ms:mean"]
                self.record("latency:ratio", f"({lat}) / ({self.peer_ref(lat)})")
                branches.append(
                    (
                        Kind.CAPABILITY,
                        f"{self.r('latency:ratio')} >= {th.capability_ratio}"
                        f" and on ({u}) {c} < {th.count_ratio}"
                        f" and on ({u}) {hv} < {th.weight_ratio}",
                    )
                )
            branches.append((Kind.COUNT, f"{c} >= {th.count_ratio}"))
        branches.append((Kind.UNKNOWN, self.r("heat:ratio")))
        self.record(
            "kind:now",
            f" or on ({u}) ".join(
                f'label_replace(count without () ({cond}), "kind", "{kind}", "", "")'
                for kind, cond in branches
            ),
        )
        # The alert's kind is the one named most often over the horizon: a label that flips
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
        horizon = param("horizon")
        self.record(
            "kind",
            f"count without () (topk by ({u}) (1, avg_over_time({self.r('kind:vote')}"
            f"[{horizon}])))",
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
