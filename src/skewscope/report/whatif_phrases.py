"""What-if notes into sentences: the words of the replay's assumptions and of what it left out.

``whatif`` may not import the report, so it hands its notes over as ``Note(WhatifNoteCode,
figures)``; this table words them (``phrases.note`` reads it beside the diagnosis' own), and
every number goes through ``fmt``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from skewscope.notes import Note
from skewscope.notes import WhatifNoteCode as W
from skewscope.report import fmt
from skewscope.report.whatif_model import Ranking

NOT_CALIBRATED = "the simulator's default ranks are used, so the replay is not calibrated"


def spread(v: float | None) -> str:
    """A persistent load spread (``report.whatif_model.Spread.value``): a ratio, or the idle unit
    that makes it unbounded."""
    if v is None:
        return fmt.NOT_MEASURED
    if v == float("inf"):
        return "a unit idle"
    return fmt.ratio(v)


def criterion(g: Ranking) -> str:
    """How the recommendation was picked (every format states it: docs/whatif.md, Ranking)."""
    hot = fmt.decimal(g.setting("hot_ratio"), 2)
    held = (
        f"held in {fmt.pct(g.setting('persist_share'))} of "
        f"{fmt.seconds(g.setting('window_s'))} windows"
    )
    tput = f"throughput within {fmt.pct(g.setting('throughput_tolerance'))}"
    base = (
        f"Ranking: skew first, then TTFT P99. The current routing's load spread (worst "
        f"unit's max/median or median/min load, {held}) is {spread(g.current_spread)}"
    )
    if g.skewed:
        return (
            f"{base}, at or above the hot ratio {hot}: a candidate must cut it by at least "
            f"{fmt.pct(g.setting('min_spread_gain'))} without raising TTFT P99 by more "
            f"than {fmt.pct(g.setting('ttft_tolerance'))} ({tput}); the lowest TTFT P99 "
            "of those is recommended."
        )
    return (
        f"{base}, under the hot ratio {hot}: nothing to fix unless a candidate cuts TTFT "
        f"P99 by at least {fmt.pct(g.setting('large_gain'))} and keeps the spread under "
        f"{hot} ({tput})."
    )


def _service_model(v: Mapping[str, Any]) -> str:
    budget = {
        "": "",
        "histogram": "; online: the batch from the mean running gauge, the budget from the "
        "tokens-per-step histogram's highest bucket",
        "default": "; online: the batch from the mean running gauge; no tokens-per-step "
        "histogram, so the budget is the simulator's default "
        f"{fmt.count(v['default_budget'])} (assumed)",
    }[v["budget"]]
    return (
        f"service model: step = {fmt.decimal(v['fixed_ms'], 1)} ms + "
        f"{fmt.decimal(v['per_prefill_token_ms'], 4)} ms/prefill token + "
        f"{fmt.decimal(v['per_decode_seq_ms'], 3)} ms/decode sequence, batch ceiling "
        f"{fmt.count(v['max_running'])} and token budget {fmt.count(v['token_budget'])} "
        f"(highest seen {fmt.count(v['max_batch_seen'])} and "
        f"{fmt.count(v['max_tokens_seen'])}, rounded up{budget}), KV blocks of "
        f"{fmt.count(v['block_size'])} tokens (assumed)"
    )


def _lengths(v: Mapping[str, Any]) -> str:
    what = v["what"]
    if v["histogram"]:
        return (
            f"{what} lengths drawn from the {what}-length histograms (each bucket its "
            "share), scaled toward the token counters' mean inside their buckets"
        )
    return (
        f"no {what}-length histogram: every request of a unit has the unit's mean {what} "
        "length over the range (the token counters')"
    )


def _routing(n: Note) -> str:
    hot = n.values.get("correlated")
    if hot:  # whatif/correlation.py: request weight tied to the unit
        return (
            _routing(Note(n.code, {k: v for k, v in n.values.items() if k != "correlated"}))
            + "; but no modelled policy: placement correlated with request length ("
            + ", ".join(fmt.name(u) for u in hot)
            + " gets the long requests)"
        )
    if n.code == W.ROUTING_EQUAL:
        return "round_robin-like (inferred: equal request counts)"
    shares = list(n.values["shares"])
    if len(shares) > SHARES_LISTED:  # a fleet: its largest shares, not one per unit
        ranked = sorted(shares, key=lambda s: -s[1])  # stable: ties in unit order
        rest = len(shares) - SHARES_LISTED
        parts = ", ".join(f"{fmt.name(u)} {fmt.pct(v)}" for u, v in ranked[:SHARES_LISTED])
        return (
            f"weighted (inferred from unequal request shares of {fmt.count(len(shares))} "
            f"units; the {SHARES_LISTED} largest: {parts}; {fmt.count(rest)} more at most "
            f"{fmt.pct(ranked[SHARES_LISTED][1])} each)"
        )
    parts = ", ".join(f"{fmt.name(u)} {fmt.pct(v)}" for u, v in shares)
    return f"weighted (inferred from unequal request shares: {parts})"


def _weights(weights: list[float]) -> str:
    """Each weight, or for a fleet their range (one per unit would fill the report)."""
    if len(weights) <= SHARES_LISTED:
        return ", ".join(fmt.decimal(w, 2) for w in weights)
    ranked = sorted(weights)
    return (
        f"{fmt.count(len(weights))} units, {fmt.decimal(ranked[0], 4)} to "
        f"{fmt.decimal(ranked[-1], 4)}, median {fmt.decimal(ranked[len(ranked) // 2], 4)}"
    )


# Shares a phrase lists one by one (as many as the diagnosis report's per-unit table).
SHARES_LISTED = 20


def inferred(levels: Iterable[tuple[str, Note]]) -> str:
    """What the current routing looks like at each level, one phrase."""
    return "; ".join(f"{lvl}: {_routing(n)}" for lvl, n in levels)


WHATIF_NOTES: dict[W, Callable[[Mapping[str, Any]], str]] = {
    W.NOT_REPRODUCED: lambda v: (
        "the replay of the current routing does not reproduce the evidence "
        f"({', '.join(v['metrics']) or 'uncalibrated service model'}): do not trust the "
        "ranking"
    ),
    W.FEW_TIMED_STEPS: lambda v: (
        f"too few timed steps in batch.csv to calibrate the service model: {NOT_CALIBRATED}"
    ),
    W.NO_ITL_HISTOGRAM: lambda v: (
        "no inter-token latency histogram with enough decoding windows to calibrate the "
        f"service model: {NOT_CALIBRATED}"
    ),
    W.SERVICE_MODEL: _service_model,
    W.LIGHT_LOAD: lambda v: (
        f"light load: fewer than {fmt.count(v['min_windows'])} windows averaged a running "
        "request, so the service model is calibrated from means: the fixed step from the mean "
        f"inter-token latency of {fmt.count(v['decode_windows'])} rank-windows (no "
        "per-sequence cost: a batch near 1 does not tell it), the prefill cost from the mean "
        f"TTFT less the mean queue wait over {fmt.count(v['prefill_windows'])} with finished "
        "requests; no batch ceiling is read from window means under one"
    ),
    W.NO_KV: lambda v: (
        f"{fmt.count(v['ranks'])} rank(s) without KV usage and free blocks: "
        f"{fmt.count(v['blocks'])} blocks assumed"
    ),
    W.NO_TIMED_STEP: lambda v: (
        f"{fmt.count(v['ranks'])} rank(s) with no timed step: nominal speed assumed"
    ),
    W.THROUGH_BUCKETS: lambda v: (
        "latency percentiles: the evidence's from its histograms; the calibration reads the "
        "replay through the same buckets (the policy table gives the replay's exact "
        "percentiles)"
    ),
    W.NEVER_IN_POOL: lambda v: (
        f"instance #{v['instance']} received no request: out of the pool all run"
    ),
    W.JOINED_LATE: lambda v: (
        f"{v['instance']} joined the pool only at {fmt.count(v['at_s'])} s (no request before)"
    ),
    W.LEFT_EARLY: lambda v: (
        f"{v['instance']} left the pool at {fmt.count(v['at_s'])} s (no request after)"
    ),
    W.UNPLACED: lambda v: (
        f"{fmt.count(v['requests'])} request(s) the evidence did not place on a DP rank (never "
        "scheduled) are put on their instance's rank with the longest queue waits"
    ),
    W.UNFINISHED: lambda v: (
        f"{fmt.count(v['requests'])} request(s) unfinished in the evidence: their output length "
        "is drawn from the finished requests at least as long"
    ),
    W.NO_SESSIONS: lambda v: (
        "no session or prefix ids in the evidence: consistent_hash and cache_aware cannot be "
        "judged and are left out"
    ),
    W.NO_SESSIONS_ONLINE: lambda v: (
        "no session or prefix ids in metrics (give the gateway's access log with --access-log): "
        "consistent_hash and cache_aware cannot be judged and are left out"
    ),
    W.COUNTED_AT_START: lambda v: (
        f"requests are counted as they leave the queue ({v['alias']}): arrivals = those + the "
        "change in waiting requests"
    ),
    W.ONLINE_WORKLOAD: lambda v: (
        f"online workload: {fmt.count(v['requests'])} requests rebuilt from per-window counters "
        f"({fmt.seconds(v['window_s'])} windows: finished + change in running + waiting between "
        "window ends), spread uniformly inside each window; bursts shorter than a window are "
        "not resolved"
    ),
    W.LENGTHS: _lengths,
    W.SESSIONS: lambda v: (
        f"sessions: {fmt.count(v['keys'])} distinct {v['key_name'] or 'client'} keys from the "
        f"access log on {fmt.pct(v['share'])} of the replayed requests (each gets a key its "
        "upstream logged in the same window); sticky, consistent_hash and cache_aware are "
        "replayed on them, a session standing for a shared prefix"
    ),
    W.UNMATCHED_UPSTREAMS: lambda v: (
        f"no access-log upstream matches {', '.join(v['upstreams'])} (upstreams are joined to "
        "instances on host:port): their requests carry no session"
    ),
    W.ONE_INSTANCE: lambda v: f"{v['policy']}: one instance, no instance-level choice",
    W.CORRELATED: lambda v: (
        "placement is correlated with request length: the router is not round robin, or a "
        f"client pins its long requests ({', '.join(fmt.name(u) for u in v['units'])}: "
        f"{fmt.decimal(v['ratio'], 2)}x the tokens per request of "
        f"{'its peers' if v['level'] == 'instance' else 'the other ranks'}, z = "
        f"{fmt.decimal(v['z'], 1)}). The current routing is replayed as observed; "
        + (
            f"{', '.join(v['excluded'])} count requests as the current router does and "
            "are not offered as the fix; "
            if v["excluded"]
            else ""
        )
        + "the token- and queue-aware candidates are ranked on their worse TTFT P99 of a plain "
        f"replay and one with the {fmt.count(v['heavy'])} requests of at least "
        f"{fmt.count(v['heavy_tokens'])} tokens still pinned there"
    ),
    W.ROUTING_EQUAL: lambda v: _routing(Note(W.ROUTING_EQUAL, v)),
    W.ROUTING_WEIGHTED: lambda v: _routing(Note(W.ROUTING_WEIGHTED, v)),
    W.PLAN_CURRENT: lambda v: f"replay of the observed placement: {inferred(v['inferred'])}",
    W.PLAN_GATEWAY: lambda v: f"gateway {v['policy']}, DP dispatch as observed",
    W.PLAN_DP: lambda v: f"DP dispatcher {v['policy']}, instances as observed",
    W.PLAN_FIX_WEIGHTS: lambda v: (
        f"gateway weights proportional to calibrated capacity ({_weights(v['weights'])})"
    ),
    W.PLAN_DP_EQUAL: lambda v: "DP dispatcher with equal rank weights",
    W.PLAN_REMOVE_SLOW: lambda v: (
        f"take {', '.join(fmt.name(u) for u in v['units'])} out of the pool, current policy on "
        "the rest"
    ),
    W.PLAN_RESTORE_POOL: lambda v: (
        "every instance in the pool all run (fix the health check / join)"
    ),
}
