"""Notes into lines: every diagnosis and what-if note (``Note(code, figures)``) as the one
sentence all renderers print (terminal, Markdown, HTML, and the JSON report's ``notes``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from skewscope.catalogue import Cause, HeldBack
from skewscope.report import fmt
from skewscope.report.facts import Note, NoteCode, WhatifNoteCode
from skewscope.report.fmt import times as _x
from skewscope.report.whatif_phrases import WHATIF_NOTES


def _down(down: list[tuple[str, float]]) -> str:
    """'unhealthy 40% of the range and circuit-open 30% of the range'."""
    return " and ".join(f"{what} {fmt.pct(share)} of the range" for what, share in down)


# Why a router skips a unit it lists healthy, by its policy class (GATEWAY_LISTED_UNUSED).
_UNUSED = {
    "sticky": "its hash or sticky policy keeps every key on other units: stickiness, not a "
    "health check.",
    "prefix": "its cache-aware policy keeps every prefix on the units that cached it: prefix "
    "affinity, not a health check.",
    "load_aware": "it picks by a load figure that shows this unit busier than it is (stale, or "
    "never received): its load view, not a health check.",
    "token_blind": "a policy that counts requests skips a unit only by its weight: check the "
    "routing weights, not the health check.",
}


def _routed(v: Mapping[str, Any]) -> str:
    policy = f"under {v['policy']}" if v["policy"] else "(policy not exported)"
    ratio = _x(v["router_ratio"])
    if v["verdict"] == "even":
        blind = (
            "which counts requests, not tokens, queues or KV"
            if v["policy_class"] in (None, "token_blind")
            else "which did not balance the tokens"
        )
        size = (
            f"; its requests were {_x(v['request_bytes_ratio'])} the bytes"
            if v["request_bytes_ratio"] == v["request_bytes_ratio"]
            else ""
        )
        return (
            f"The gateway ({v['source']}) sent {v['upstream']} an even share of requests "
            f"({fmt.pct(v['router_share'])}, {ratio} its peers' median) {policy}, {blind}"
            f"{size}: a token-blind balance lets heavy requests pile up."
        )
    head = (
        f"The gateway ({v['source']}) sent {fmt.pct(v['router_share'])} of its requests to "
        f"{v['upstream']} {policy} ({ratio} its peers' median); the engines saw "
        f"{fmt.pct(v['engine_share'], missing='n/a (not joined)')} of theirs there."
    )
    if v["verdict"] == "not_more":
        return (
            f"{head} The gateway did not send it more: its extra requests came another way "
            "(another entry point or clients calling the engine directly)."
        )
    keys = ""
    if v["top_keys"] and v["top_keys_excess_share"] == v["top_keys_excess_share"]:
        by = f" ({v['key_name']})" if v["key_name"] else ""
        keys = (
            f" {len(v['top_keys'])} key(s){by} carried {fmt.pct(v['top_keys_excess_share'])} "
            f"of its excess over its peers' median: {', '.join(v['top_keys'])}."
        )
    if v["lead_cause"] == Cause.PREFIX_AFFINITY:
        keys += (
            " Its policy routes by cached prefix: requests sharing a prompt prefix all go "
            "to the unit that cached it."
        )
    return f"{head}{keys}"


def _marked_down(v: Mapping[str, Any]) -> str:
    """A starved finding's unit the gateway kept out of rotation while it was up."""
    text = (
        f"The gateway marked {v['unit']} {_down(v['down'])} while its engine kept reporting "
        "metrics (it was up)."
    )
    if any(what == "circuit-open" for what, _ in v["down"]):
        text += (
            " The circuit breaker keeps a recovered worker at zero traffic for its whole cool-down."
        )
    return text


def _transient(v: Mapping[str, Any]) -> str:
    head = (
        f"{v['unit']} ran hot in {v['windows']} window(s) ({fmt.pct(v['hot_share'])}, at "
        f"most {v['hot_run']} in a row, {fmt.count(v['span_s'])} s span)"
    )
    if v.get("held_back") == HeldBack.BURST:
        return (
            f"{head}, but only through one burst: with its hottest {fmt.count(v['burst_s'])} s "
            "at its own typical level it is not persistently hot — a burst, not a hot spot"
        )
    if v.get("held_back") == HeldBack.CHANCE:
        return (
            f"{head}, but its extra load over the range is within {fmt.count(v['sigmas'])} "
            "sigmas of chance for the counts seen — not a persistent hot spot"
        )
    if v["often"]:
        return (
            f"{head}: often, but never {v['min_consecutive']} windows in a row — not yet a "
            "persistent hot spot; watch it over a longer range"
        )
    return f"{head} and then returned to its peers: jitter, not a persistent hot spot"


_PRICE_BASIS = {
    "forward_batch": "the batch of each forward step, weighted by step time",
    "busy_ms": "busy time per window",
    "scheduled_tokens": "scheduled tokens per window",
    "total_tokens": "tokens per window",
}


def _price(v: Mapping[str, Any]) -> str:
    """The price in the reading that holds: ranks in lockstep (MoE expert parallelism, DP
    attention) wait for the busiest; a dense model's plain DP ranks do not, and the same share
    is capacity kept idle by sizing for the busiest rank; not known: both, and how to say."""
    over = (
        f"{v['steps']} steps in {v['windows']} windows"
        if v.get("steps")
        else f"{v['windows']} windows"
    )
    share, ranks = fmt.pct(v["idle_share"]), f"its {v['ranks']} ranks"
    how = (
        f"(1 − mean/max of {_PRICE_BASIS[v['basis']]}; worst window "
        f"{fmt.pct(v['worst_window_idle_share'])}), about {fmt.decimal(v['device_hours'], 2)} "
        f"device-hours over {over} ({fmt.plain(v['devices_per_rank'])} device per rank "
        "assumed)"
    )
    head = f"price of DP skew on {v['instance']}: "
    lockstep = v.get("lockstep")
    if lockstep is True:
        return (
            f"{head}{ranks} step in lockstep (MoE expert parallelism / DP attention), so "
            f"they idle {share} of their time waiting for the busiest {how}"
        )
    if lockstep is False:
        return (
            f"{head}{ranks} do not step in lockstep (plain DP), so none waits for the "
            f"busiest; sized for its busiest rank the instance keeps {share} of its capacity "
            f"idle {how}"
        )
    return (
        f"{head}if {ranks} step in lockstep (MoE expert parallelism / DP attention) they "
        f"idle {share} of their time waiting for the busiest; with plain DP of a dense model "
        f"they do not wait, and the same {share} is capacity kept idle by sizing for the "
        f"busiest rank {how}; diagnose --lockstep yes|no says which holds"
    )


_NOTES: dict[NoteCode, Callable[[Mapping[str, Any]], str]] = {
    NoteCode.SOURCE: lambda v: str(v["text"]),
    NoteCode.EMPTY_RANGE: lambda v: "the input holds no data in the analysed range",
    NoteCode.ONE_UNIT: lambda v: (
        f"only one unit ({v['unit']}): skew needs at least {v['min_units']} units to compare"
    ),
    NoteCode.FEW_WINDOWS: lambda v: (
        f"only {v['windows']} time windows; at least {v['min_windows']} are needed to tell a "
        "persistent hot unit from jitter (use a shorter --window or a longer range)"
    ),
    NoteCode.NEAR_IDLE: lambda v: (
        f"near-idle service: {fmt.count(v['requests'])} requests in the range (finished or "
        f"held at its end), fewer than the "
        f"{fmt.count(v['min_requests'])} needed to call it imbalanced"
    ),
    NoteCode.NO_REQUEST_COUNTS: lambda v: (
        "no request counts in the range, so the volume gate cannot be checked (online: each "
        "window must hold at least two samples of the counters; try a larger --step or "
        "--window)"
    ),
    NoteCode.QUEUE_ONLY: lambda v: (
        "the source counts no requests (e.g. a router's per-endpoint queue): units are judged by "
        "their queues and other signals alone, and the request-volume gate cannot be checked"
    ),
    NoteCode.FEW_JUDGED_WINDOWS: lambda v: (
        f"only {v['judged']} of {v['windows']} windows carried enough load to judge (at least "
        f"{fmt.plain(v['min_requests_per_window'])} requests per unit); use a longer --window"
    ),
    NoteCode.NO_PROGRESS: lambda v: (
        f"no progress anywhere in {fmt.count(v['windows'])} of {fmt.count(v['of'])} windows: "
        "units held requests but none finished any or ran a step (the whole service stopped, "
        "or its metrics froze, e.g. a scrape returning the same counters); that is not skew, "
        "so no unit is called stalled there"
    ),
    NoteCode.SKEW_NOT_JUDGED: lambda v: (
        f"skew between the other units not judged: {note(v['reason'])}"
    ),
    NoteCode.DP_SIZES: lambda v: (
        "instances have different DP sizes ("
        + ", ".join(f"{k}: {n}" for k, n in v["sizes"].items())
        + "); instance-level loads are not normalised per rank, so a larger instance is "
        "expected to carry more"
    ),
    NoteCode.DP_WITHIN_INSTANCES: lambda v: (
        "instances are balanced; DP ranks judged within each instance"
    ),
    NoteCode.DP_POOLED: lambda v: (
        f"{', '.join(v['instances'])} each have fewer than {fmt.count(v['min_requests'])} "
        "requests, too few to judge their DP ranks alone: their ranks are judged together, "
        "each rank against its own instance's siblings"
    ),
    NoteCode.DP_NOT_JUDGED: lambda v: (
        f"DP ranks inside {v['instance']} not judged: {note(v['reason'])}"
    ),
    NoteCode.COLD_MINORITY: lambda v: (
        f"most units run hot together; judged against the under-loaded {', '.join(v['units'])}"
    ),
    NoteCode.STARVED_LEFT_OUT: lambda v: (
        f"{', '.join(v['units'])} starved: left out of the reference, the other units are "
        "judged against their non-starved peers"
    ),
    NoteCode.WEIGHT_BY_CHANCE: lambda v: (
        f"{v['unit']} ran hotter with heavier requests ({_x(v['input_ratio'])} the input, "
        f"{_x(v['output_ratio'])} the output tokens per request of its peers), but that is "
        f"consistent with chance (p = {fmt.p_value(v['p_value'])}, permutation of per-window "
        "token loads across the units): heavy-tailed request sizes, not weight skew"
    ),
    NoteCode.UNEXPLAINED_PRESSURE: lambda v: (
        "ran hotter on pressure signals but no load or capability difference explains it: "
        + ", ".join(v["units"])
    ),
    NoteCode.SKEW_PRICE: _price,
    NoteCode.NO_GATEWAY: lambda v: (
        "no gateway evidence: engine metrics cannot tell wrong routing weights from sticky "
        "sessions or a failed health check; give the gateway's access log (--access-log) or a "
        "Prometheus that also scrapes the router (sglang-router, vllm-router, an llm-d or "
        "Inference Extension endpoint picker, vLLM production-stack's router) to settle it"
    ),
    NoteCode.GATEWAY_UNJOINED: lambda v: (
        f"gateway upstream(s) {', '.join(v['upstreams'])} match no engine unit (joined on "
        "host:port, the engines' Prometheus instance label; a DP rank as host:port@rank)"
    ),
    NoteCode.GATEWAY_DOWN: lambda v: (
        f"the gateway marked {v['unit']} {_down(v['down'])} while its engine kept reporting "
        "metrics: traffic it would have taken went to its peers"
    ),
    NoteCode.GATEWAY_MARKED_DOWN: _marked_down,
    NoteCode.GATEWAY_NOT_LISTED: lambda v: (
        f"The gateway ({v['source']}) does not list {v['unit']} or never sent it a request: it "
        "is not in the pool (did not rejoin after a restart or scale-out)."
    ),
    NoteCode.GATEWAY_LISTED_UNUSED: lambda v: (
        f"The gateway ({v['source']}) lists {v['unit']} healthy and in its pool, yet sent it "
        f"{fmt.count(v['requests']) if math.isfinite(v['requests']) else 'almost no'} requests "
        f"({'policy not exported' if not v['policy'] else 'under ' + v['policy']}): "
        + _UNUSED.get(
            v["policy_class"] or "", "its routing, not a health check, keeps traffic off it."
        )
    ),
    NoteCode.GATEWAY_ROUTED: _routed,
    NoteCode.TRANSIENT: _transient,
    NoteCode.UNIT_JOINED: lambda v: (
        f"{v['unit']} joined at {fmt.when(v['at_s'])} (no data before: judged from then on, "
        "not as starved before it existed)"
    ),
    NoteCode.UNIT_ABSENT: lambda v: (
        f"{v['unit']} was absent from {fmt.when(v['from_s'])} and back at {fmt.when(v['back_s'])}"
        " (restarted at that time, or its metrics unreachable): the windows without it are not "
        "judged, and its counters are read across the restart"
    ),
    NoteCode.UNIT_LOST: lambda v: (
        f"{v['unit']} stopped reporting at {fmt.when(v['at_s'])}"
        + (
            " while hot (see its finding)"
            if v["hot"]
            else " (lost or scaled in): the windows without it are not judged"
        )
    ),
    NoteCode.KV_EXHAUSTED: lambda v: (
        f"KV usage peaks at {fmt.pct(v['kv_peak'])} (>= {fmt.pct(v['kv_high'])}: near exhaustion)"
    ),
    NoteCode.KV_SERVICE_WIDE: lambda v: (
        f"KV usage peaks at {fmt.pct(v['kv_peak'])} here and {fmt.pct(v['reference_peak'])} on "
        "its peers: the whole service is short of KV capacity, not only this unit"
    ),
    NoteCode.PREEMPTED_HERE_ONLY: lambda v: (
        f"{fmt.count(v['preemptions'])} requests preempted on this unit and none on its peers"
    ),
    NoteCode.KV_FILLING: lambda v: (
        f"KV blocks allocated outpace blocks freed ({_x(v['alloc_free_ratio'])})"
    ),
    NoteCode.QUEUE_GROWING: lambda v: (
        f"waiting queue grows by {fmt.decimal(v['per_window'])} requests per window"
    ),
    NoteCode.LEVELS_DIFFER: lambda v: (
        f"the sides are at different levels ({v['before']} before, {v['after']} after): units "
        "are compared as they are"
    ),
    NoteCode.FOCUS_MISSING: lambda v: (
        f"not in the after side: {', '.join(v['units'])} (its hot/peer ratio there is unknown)"
    ),
    NoteCode.NOTHING_COMPARED: lambda v: "no signal is measured on both sides; nothing to compare",
}


def note(n: Note) -> str:
    """One note as a line (the diagnosis' and what-if's alike)."""
    if isinstance(n.code, WhatifNoteCode):
        return WHATIF_NOTES[n.code](n.values)
    return _NOTES[n.code](n.values)
