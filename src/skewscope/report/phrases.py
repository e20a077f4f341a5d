"""Facts into sentences: the words of every finding summary and note, one place for all
renderers (terminal, Markdown, HTML, and the JSON report's ``summary`` and ``notes``).

The analysis decides what is true (``report/facts.py``); this module only says it, and every
number goes through ``fmt`` so a sentence and a table print the same figure alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from skewscope.catalogue import METRIC_BY_KEY, Cause, HeldBack, Kind
from skewscope.report import fmt
from skewscope.report.facts import (
    Compared,
    FindingFacts,
    FleetPatternFacts,
    HotFacts,
    KvShortageFacts,
    LostFacts,
    Note,
    NoteCode,
    PdFacts,
    StaleLoadFacts,
    StallFacts,
    StarvedFacts,
    WhatifNoteCode,
)
from skewscope.report.whatif_phrases import WHATIF_NOTES

NA = "n/a"  # a figure a sentence cannot give

# What a capability ratio was measured on (HotFacts.capability_basis; "" = nothing measured).
CAPABILITY_BASIS = {
    "cost_us_per_token": "execution time per scheduled token",
    "service_ms": "service time (latency minus queue wait) at equal load",
    "e2e_mean_ms": "end-to-end latency at equal load",
    "ttft_mean_ms": "TTFT at equal load",
    "in_service_s": "time in service (running / requests, Little's law) at equal load",
    "": "not measured",
}


def _x(v: float) -> str:
    return fmt.ratio(v, missing=NA)


def finding_summary(facts: FindingFacts, context: tuple[Note, ...] = ()) -> str:
    """A finding's paragraph: its own facts, then what other evidence (the gateway) adds."""
    if isinstance(facts, HotFacts):
        head = hot_summary(facts)
    elif isinstance(facts, KvShortageFacts):
        head = kv_summary(facts)
    elif isinstance(facts, StarvedFacts):
        head = starved_summary(facts)
    elif isinstance(facts, StallFacts):
        head = stall_summary(facts)
    elif isinstance(facts, PdFacts):
        head = pd_summary(facts)
    elif isinstance(facts, StaleLoadFacts):
        head = stale_load_summary(facts)
    elif isinstance(facts, LostFacts):
        head = lost_summary(facts)
    else:
        head = fleet_pattern_summary(facts)
    return " ".join([head, *(note(n) for n in context)])


def _compared(c: Compared) -> str:
    label = METRIC_BY_KEY[c.metric].label
    return (f"{label} {fmt.quantity(c.metric, c.hot, c.hot_bound)} vs "
            f"{fmt.quantity(c.metric, c.reference, c.reference_bound)}")


def _kind_body(h: HotFacts) -> str:
    side_ratio = h.input_ratio if h.weight_side == "input" else h.output_ratio
    if h.kind == Kind.COUNT:
        body = (f"{_x(h.count_ratio)} the requests of its peers at {_x(h.weight_ratio)} tokens "
                "per request: count skew")
        if h.secondary_kind == Kind.WEIGHT:
            body += f", mixed with heavier ({h.weight_side}-heavy) requests"
    elif h.kind == Kind.WEIGHT:
        requests = (f"{_x(h.count_ratio)} the requests" if h.more_requests
                    else f"about the same request count ({_x(h.count_ratio)})")
        body = (f"{requests} but {_x(side_ratio)} the {h.weight_side} tokens per request: "
                f"weight skew ({h.weight_side}-heavy)")
        if h.secondary_kind == Kind.COUNT:
            body += ", mixed with more requests"
    elif h.kind == Kind.UNKNOWN and h.count_ratio == h.count_ratio:  # counts measured
        body = (f"it runs hotter than its peers on {h.driver.replace('_', ' ')} and it hurts, "
                f"though it receives {_x(h.count_ratio)} the requests of its peers at "
                f"{_x(h.weight_ratio)} tokens per request and is not measurably slower"
                + (" per scheduled token (it is overloaded: far more requests in flight than its "
                   "peers at a full KV cache or preempting, so its longer service is what its own "
                   "load does to it, not a weaker unit)" if h.overloaded else "")
                + ": no load or capability difference explains it (requests counted as they "
                "finish understate a saturated unit's arrivals); see what keeps it from "
                "admitting work")
    elif h.kind == Kind.UNKNOWN:
        body = (f"it runs hotter than its peers on {h.driver.replace('_', ' ')}, but the source "
                "exports no per-unit request or token counts at this level (e.g. SGLang without "
                "its schedulers' per-rank counters), so count, weight and capability skew cannot "
                "be told apart; compare per-rank request logs or an offline profile")
    else:
        body = (f"similar requests ({_x(h.count_ratio)}) and tokens per request "
                f"({_x(h.weight_ratio)}) but {_x(h.capability_ratio)} the "
                f"{CAPABILITY_BASIS[h.capability_basis]}: capability skew")
    if Kind.WEIGHT in (h.kind, h.secondary_kind) and h.weight_p_value == h.weight_p_value:
        body += f" (beyond chance: permutation p = {fmt.p_value(h.weight_p_value)})"
    return body


def split_sentence(count_share: float, weight_share: float) -> str:
    """The excess decomposition in words; a negative part means fewer or lighter requests."""
    if count_share < 0:
        return ("All of its excess token load comes from heavier requests "
                "(it even receives slightly fewer requests than its peers).")
    if weight_share < 0:
        return ("All of its excess token load comes from more requests "
                "(its requests are even slightly lighter than its peers').")
    return (f"Of its excess token load, {fmt.pct(count_share)} comes from more requests and "
            f"{fmt.pct(weight_share)} from heavier requests.")


def saturation_sentence(h: HotFacts) -> str:
    s = h.saturation
    if s is None:
        return ""
    queue = "a growing queue" if s.queue_growing else "a standing queue"
    text = (f"It sits at its batch ceiling (about {fmt.count(s.ceiling)} running) with {queue} "
            f"in {fmt.pct(s.share)} of the judged windows")
    if s.unplaced_per_window == s.unplaced_per_window:
        return (f"{text}; {fmt.decimal(s.unplaced_per_window)} requests per window of its "
                "instance could not be placed on a DP rank and, as it is the only saturated "
                "rank, most likely wait here: counting them, it gets "
                f"{_x(s.count_ratio_with_unplaced)} the requests of its peers.")
    if s.lower_bound:
        why = ("requests are counted when they finish" if s.lower_bound == "finished"
               else "some requests of its instance could not be placed on a DP rank")
        return (f"{text}: {why}, so its request ratio ({_x(h.count_ratio)}) is a lower bound "
                "and the skew may be understated.")
    return f"{text}."


_DEVICE_WHAT = {"device_util": "device utilisation", "busy_share": "share of time executing steps"}


def device_sentences(h: HotFacts) -> list[str]:
    d = h.device
    if d is None:
        return []
    what = _DEVICE_WHAT[d.basis]
    out = []
    if d.capability == "busier":
        out.append(f"At the same load its {what} is {fmt.pct(d.hot)} against "
                   f"{fmt.pct(d.reference)} on its peers: the device or the process on it is "
                   "slower.")
    elif d.capability == "slower_device":
        out.append(f"Its device works {_x(d.cost_ratio)} as long as its peers' need "
                   "for the same steps and tokens: the device or the process on it is slower.")
    elif d.capability == "host_bound":
        out.append("Its device works about as long as its peers' for the same steps and tokens "
                   f"({_x(d.cost_ratio)}), yet its steps take "
                   f"{_x(d.step_cost_ratio)} as long: the time goes to the host and "
                   "scheduler between device passes.")
    if d.queue_not_compute:
        out.append(f"Its queue grows while its {what} is only {fmt.pct(d.hot)} (below "
                   "saturation): KV capacity or the scheduler limits it, not compute.")
    return out


def hot_summary(h: HotFacts) -> str:
    head = (f"{h.unit} is a persistent hot spot (hot in {fmt.pct(h.hot_share)} of "
            f"{h.judged_windows} judged windows, {h.hot_run} in a row)")
    parts = [f"{head}: {_kind_body(h)}."]
    if h.count_share == h.count_share and h.kind in (Kind.COUNT, Kind.WEIGHT):
        parts.append(split_sentence(h.count_share, h.weight_share))
    if h.hurting:
        parts.append("Impact against its peers: " + ", ".join(map(_compared, h.hurting)) + ".")
    if h.bounded:
        parts.append("Histogram bucket bounds only, so no ratio is formed from them: "
                     + ", ".join(map(_compared, h.bounded)) + ".")
    elif not h.hurting:
        parts.append("No measurable queueing or latency impact yet.")
    if h.kv_exhausted and h.kv_consequence:
        parts.append("Its KV cache is near exhaustion, yet its queue does not grow and nothing "
                     "is preempted: a consequence of its load, not the cause to act on first.")
    elif h.kv_exhausted:
        parts.append("Its KV cache is near exhaustion.")
    if h.saturation is not None:
        parts.append(saturation_sentence(h))
    if h.widening:
        parts.append("The gap keeps widening while the service's P99 rises.")
    parts += device_sentences(h)
    if h.kv_shortage:
        parts.append("It is short of KV blocks (see the kv_shortage finding).")
    return " ".join(parts)


def kv_symptom(k: KvShortageFacts, key: str) -> str:
    """One symptom of the KV block shortage case with its figure."""
    if key == "kv_high":
        if k.free_blocks_capacity == k.free_blocks_capacity:
            return (f"free KV blocks fall to {fmt.count(k.free_blocks_min)} (of up to "
                    f"{fmt.count(k.free_blocks_capacity)} free)")
        return f"KV usage peaks at {fmt.pct(k.kv_peak)}"
    if key == "batch_at_ceiling":
        return (f"its batch stays at its ceiling (~{fmt.decimal(k.batch_ceiling)} running) with "
                f"requests waiting in {fmt.pct(k.saturated_share)} of the windows")
    if key == "alloc_outpaces_free":
        return f"blocks allocated outpace blocks freed ({_x(k.alloc_free_ratio)})"
    if key == "preemptions":
        return f"{fmt.count(k.preemptions)} requests were preempted (recomputed)"
    return (f"waiting grows by {fmt.decimal(k.waiting_growth_per_window)} requests per window "
            "while running stays flat")


def kv_summary(k: KvShortageFacts) -> str:
    symptoms = "; ".join(kv_symptom(k, s) for s in k.symptoms)
    return (f"{k.unit} is short of KV blocks: {symptoms}. Queueing with a full KV cache means it "
            "cannot admit more work: move traffic off it first, then lower concurrency or "
            "length limits, add KV capacity or enable prefix caching.")


def starved_summary(s: StarvedFacts) -> str:
    listing = ", ".join(f"{u} ({fmt.pct(share)} of windows)" for u, share in s.shares)
    return (f"{listing} received almost no traffic while their peers carried the load: count "
            "skew from a unit missing from the routing pool.")


def stale_load_summary(s: StaleLoadFacts) -> str:
    units = ", ".join(f"{u} ({n})" for u, n in s.turns)
    what = {"requests": "requests", "running": "running requests",
            "arrivals": "arrivals (finished + change in held requests)"}[s.signal]
    every = (f"the busiest changing every ~{fmt.seconds_about(s.switch_every_s)}"
             if s.switch_every_s > s.window_s else
             f"the busiest changing from one {fmt.seconds(s.window_s)} window to the next")
    return (f"The units{' of ' + s.group if s.group else ''} take turns carrying the load: in "
            f"{fmt.pct(s.swing_share)} of {s.judged_windows} windows one of them ran far above "
            f"its peers while the others carried less (their {what} anti-correlated, r = "
            f"{fmt.decimal(s.anticorrelation)}), {every}; busiest in windows: {units}. Over the "
            f"range none is hot (highest {_x(s.range_ratio)} its peers). A balancer deciding on "
            "stale load (counts published late) sends each burst to the unit that looked least "
            "loaded at the last publish: a stale-load pattern, not jitter and not a hot unit.")


def lost_summary(s: LostFacts) -> str:
    return (f"{s.unit} was lost at {fmt.when(s.lost_at_s)} while hot: it ran hot in its last "
            f"{s.hot_windows} reported window(s), then stopped reporting for the "
            f"{s.absent_windows} window(s) its peers reported to the end of the range. An engine "
            "that stops answering under its load is not a balanced unit: find out whether it "
            "died (OOM, crash) or only its metrics went dark.")


def stall_summary(s: StallFacts) -> str:
    what = "scheduling steps" if s.progress_signal == "steps" else "finished requests"
    return (f"{s.unit} is stalled: it holds {fmt.count(s.in_flight)} requests (running + "
            f"waiting) on average but made {fmt.decimal(s.progress)} {what} per window in "
            f"{fmt.pct(s.stalled_share)} of its {s.measured_windows} measured windows "
            f"({s.stalled_run} in a row). Requests routed to it do not finish; by finished "
            "requests alone it would look idle.")


def fleet_pattern_summary(p: FleetPatternFacts) -> str:
    return (f"dp{p.dp_rank} is hot in {len(p.instances)} of {p.of_instances} instances "
            f"({', '.join(p.instances)}), {p.kind} skew in each: one DP dispatch policy favours "
            "this rank everywhere, a fleet-wide pattern rather than a fault of any one instance. "
            "Fix the policy once for the whole fleet.")


def pd_summary(p: PdFacts) -> str:
    def kv(v: float) -> str:
        return "" if v != v else f", KV {fmt.pct(v)}"

    ttft = ("" if p.ttft_first_ms != p.ttft_first_ms or p.ttft_last_ms != p.ttft_last_ms
            else f" Mean TTFT went from {fmt.decimal(p.ttft_first_ms, 0)} ms to "
                 f"{fmt.decimal(p.ttft_last_ms, 0)} ms over the range.")
    return (f"The {p.saturated} pool is saturated while the {p.idle} pool idles in "
            f"{fmt.pct(p.share)} of {p.windows} windows ({p.run} in a row): "
            f"{fmt.decimal(p.saturated_waiting)} requests waiting per {p.saturated} instance"
            f"{kv(p.saturated_kv)} against {fmt.decimal(p.idle_waiting)} per {p.idle} instance"
            f"{kv(p.idle_kv)}; prefill/decode running per instance {_x(p.running_ratio)} "
            f"(P:D = {p.prefill_units}:{p.decode_units}).{ttft} The pools are judged apart: "
            f"this is a P:D ratio or P/D routing problem, not a hot unit.")


# --- notes ---------------------------------------------------------------------------------

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
        blind = ("which counts requests, not tokens, queues or KV"
                 if v["policy_class"] in (None, "token_blind")
                 else "which did not balance the tokens")
        size = (f"; its requests were {_x(v['request_bytes_ratio'])} the bytes"
                if v["request_bytes_ratio"] == v["request_bytes_ratio"] else "")
        return (f"The gateway ({v['source']}) sent {v['upstream']} an even share of requests "
                f"({fmt.pct(v['router_share'])}, {ratio} its peers' median) {policy}, {blind}"
                f"{size}: a token-blind balance lets heavy requests pile up.")
    head = (f"The gateway ({v['source']}) sent {fmt.pct(v['router_share'])} of its requests to "
            f"{v['upstream']} {policy} ({ratio} its peers' median); the engines saw "
            f"{fmt.pct(v['engine_share'], missing='n/a (not joined)')} of theirs there.")
    if v["verdict"] == "not_more":
        return (f"{head} The gateway did not send it more: its extra requests came another way "
                "(another entry point or clients calling the engine directly).")
    keys = ""
    if v["top_keys"] and v["top_keys_excess_share"] == v["top_keys_excess_share"]:
        by = f" ({v['key_name']})" if v["key_name"] else ""
        keys = (f" {len(v['top_keys'])} key(s){by} carried {fmt.pct(v['top_keys_excess_share'])} "
                f"of its excess over its peers' median: {', '.join(v['top_keys'])}.")
    if v["lead_cause"] == Cause.PREFIX_AFFINITY:
        keys += (" Its policy routes by cached prefix: requests sharing a prompt prefix all go "
                 "to the unit that cached it.")
    return f"{head}{keys}"


def _marked_down(v: Mapping[str, Any]) -> str:
    """A starved finding's unit the gateway kept out of rotation while it was up."""
    text = (f"The gateway marked {v['unit']} {_down(v['down'])} while its engine kept reporting "
            "metrics (it was up).")
    if any(what == "circuit-open" for what, _ in v["down"]):
        text += (" The circuit breaker keeps a recovered worker at zero traffic for its whole "
                 "cool-down.")
    return text


def _transient(v: Mapping[str, Any]) -> str:
    head = (f"{v['unit']} ran hot in {v['windows']} window(s) ({fmt.pct(v['hot_share'])}, at "
            f"most {v['hot_run']} in a row, {fmt.count(v['span_s'])} s span)")
    if v.get("held_back") == HeldBack.BURST:
        return (f"{head}, but only through one burst: with its hottest {fmt.count(v['burst_s'])} s "
                "at its own typical level it is not persistently hot — a burst, not a hot spot")
    if v.get("held_back") == HeldBack.CHANCE:
        return (f"{head}, but its extra load over the range is within {fmt.count(v['sigmas'])} "
                "sigmas of chance for the counts seen — not a persistent hot spot")
    if v["often"]:
        return (f"{head}: often, but never {v['min_consecutive']} windows in a row — not yet a "
                "persistent hot spot; watch it over a longer range")
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
    over = (f"{v['steps']} steps in {v['windows']} windows" if v.get("steps")
            else f"{v['windows']} windows")
    share, ranks = fmt.pct(v["idle_share"]), f"its {v['ranks']} ranks"
    how = (f"(1 − mean/max of {_PRICE_BASIS[v['basis']]}; worst window "
           f"{fmt.pct(v['worst_window_idle_share'])}), about {fmt.decimal(v['device_hours'], 2)} "
           f"device-hours over {over} ({fmt.plain(v['devices_per_rank'])} device per rank "
           "assumed)")
    head = f"price of DP skew on {v['instance']}: "
    lockstep = v.get("lockstep")
    if lockstep is True:
        return (f"{head}{ranks} step in lockstep (MoE expert parallelism / DP attention), so "
                f"they idle {share} of their time waiting for the busiest {how}")
    if lockstep is False:
        return (f"{head}{ranks} do not step in lockstep (plain DP), so none waits for the "
                f"busiest; sized for its busiest rank the instance keeps {share} of its capacity "
                f"idle {how}")
    return (f"{head}if {ranks} step in lockstep (MoE expert parallelism / DP attention) they "
            f"idle {share} of their time waiting for the busiest; with plain DP of a dense model "
            f"they do not wait, and the same {share} is capacity kept idle by sizing for the "
            f"busiest rank {how}; diagnose --lockstep yes|no says which holds")


_NOTES: dict[NoteCode, Callable[[Mapping[str, Any]], str]] = {
    NoteCode.SOURCE: lambda v: str(v["text"]),
    NoteCode.EMPTY_RANGE: lambda v: "the input holds no data in the analysed range",
    NoteCode.ONE_UNIT: lambda v: (
        f"only one unit ({v['unit']}): skew needs at least {v['min_units']} units to compare"),
    NoteCode.FEW_WINDOWS: lambda v: (
        f"only {v['windows']} time windows; at least {v['min_windows']} are needed to tell a "
        "persistent hot unit from jitter (use a shorter --window or a longer range)"),
    NoteCode.NEAR_IDLE: lambda v: (
        f"near-idle service: {fmt.count(v['requests'])} requests in the range (finished or "
        f"held at its end), fewer than the "
        f"{fmt.count(v['min_requests'])} needed to call it imbalanced"),
    NoteCode.NO_REQUEST_COUNTS: lambda v: (
        "no request counts in the range, so the volume gate cannot be checked (online: each "
        "window must hold at least two samples of the counters; try a larger --step or "
        "--window)"),
    NoteCode.QUEUE_ONLY: lambda v: (
        "the source counts no requests (e.g. a router's per-endpoint queue): units are judged by "
        "their queues and other signals alone, and the request-volume gate cannot be checked"),
    NoteCode.FEW_JUDGED_WINDOWS: lambda v: (
        f"only {v['judged']} of {v['windows']} windows carried enough load to judge (at least "
        f"{fmt.plain(v['min_requests_per_window'])} requests per unit); use a longer --window"),
    NoteCode.NO_PROGRESS: lambda v: (
        f"no progress anywhere in {fmt.count(v['windows'])} of {fmt.count(v['of'])} windows: "
        "units held requests but none finished any or ran a step (the whole service stopped, "
        "or its metrics froze, e.g. a scrape returning the same counters); that is not skew, "
        "so no unit is called stalled there"),
    NoteCode.SKEW_NOT_JUDGED: lambda v: (
        f"skew between the other units not judged: {note(v['reason'])}"),
    NoteCode.DP_SIZES: lambda v: (
        "instances have different DP sizes ("
        + ", ".join(f"{k}: {n}" for k, n in v["sizes"].items())
        + "); instance-level loads are not normalised per rank, so a larger instance is "
        "expected to carry more"),
    NoteCode.DP_WITHIN_INSTANCES: lambda v: (
        "instances are balanced; DP ranks judged within each instance"),
    NoteCode.DP_POOLED: lambda v: (
        f"{', '.join(v['instances'])} each have fewer than {fmt.count(v['min_requests'])} "
        "requests, too few to judge their DP ranks alone: their ranks are judged together, "
        "each rank against its own instance's siblings"),
    NoteCode.DP_NOT_JUDGED: lambda v: (
        f"DP ranks inside {v['instance']} not judged: {note(v['reason'])}"),
    NoteCode.COLD_MINORITY: lambda v: (
        f"most units run hot together; judged against the under-loaded {', '.join(v['units'])}"),
    NoteCode.STARVED_LEFT_OUT: lambda v: (
        f"{', '.join(v['units'])} starved: left out of the reference, the other units are "
        "judged against their non-starved peers"),
    NoteCode.WEIGHT_BY_CHANCE: lambda v: (
        f"{v['unit']} ran hotter with heavier requests ({_x(v['input_ratio'])} the input, "
        f"{_x(v['output_ratio'])} the output tokens per request of its peers), but that is "
        f"consistent with chance (p = {fmt.p_value(v['p_value'])}, permutation of per-window "
        "token loads across the units): heavy-tailed request sizes, not weight skew"),
    NoteCode.UNEXPLAINED_PRESSURE: lambda v: (
        "ran hotter on pressure signals but no load or capability difference explains it: "
        + ", ".join(v["units"])),
    NoteCode.SKEW_PRICE: _price,
    NoteCode.NO_GATEWAY: lambda v: (
        "no gateway evidence: engine metrics cannot tell wrong routing weights from sticky "
        "sessions or a failed health check; give the gateway's access log (--access-log) or a "
        "Prometheus that also scrapes the router (sglang-router, vllm-router, an llm-d or "
        "Inference Extension endpoint picker, vLLM production-stack's router) to settle it"),
    NoteCode.GATEWAY_UNJOINED: lambda v: (
        f"gateway upstream(s) {', '.join(v['upstreams'])} match no engine unit (joined on "
        "host:port, the engines' Prometheus instance label; a DP rank as host:port@rank)"),
    NoteCode.GATEWAY_DOWN: lambda v: (
        f"the gateway marked {v['unit']} {_down(v['down'])} while its engine kept reporting "
        "metrics: traffic it would have taken went to its peers"),
    NoteCode.GATEWAY_MARKED_DOWN: _marked_down,
    NoteCode.GATEWAY_NOT_LISTED: lambda v: (
        f"The gateway ({v['source']}) does not list {v['unit']} or never sent it a request: it "
        "is not in the pool (did not rejoin after a restart or scale-out)."),
    NoteCode.GATEWAY_LISTED_UNUSED: lambda v: (
        f"The gateway ({v['source']}) lists {v['unit']} healthy and in its pool, yet sent it "
        f"{fmt.count(v['requests']) if math.isfinite(v['requests']) else 'almost no'} requests "
        f"({'policy not exported' if not v['policy'] else 'under ' + v['policy']}): "
        + _UNUSED.get(v["policy_class"] or "", "its routing, not a health check, keeps "
                      "traffic off it.")),
    NoteCode.GATEWAY_ROUTED: _routed,
    NoteCode.TRANSIENT: _transient,
    NoteCode.UNIT_JOINED: lambda v: (
        f"{v['unit']} joined at {fmt.when(v['at_s'])} (no data before: judged from then on, "
        "not as starved before it existed)"),
    NoteCode.UNIT_ABSENT: lambda v: (
        f"{v['unit']} was absent from {fmt.when(v['from_s'])} and back at {fmt.when(v['back_s'])}"
        " (restarted at that time, or its metrics unreachable): the windows without it are not "
        "judged, and its counters are read across the restart"),
    NoteCode.UNIT_LOST: lambda v: (
        f"{v['unit']} stopped reporting at {fmt.when(v['at_s'])}"
        + (" while hot (see its finding)" if v["hot"] else
           " (lost or scaled in): the windows without it are not judged")),
    NoteCode.KV_EXHAUSTED: lambda v: (
        f"KV usage peaks at {fmt.pct(v['kv_peak'])} (>= {fmt.pct(v['kv_high'])}: near "
        "exhaustion)"),
    NoteCode.KV_SERVICE_WIDE: lambda v: (
        f"KV usage peaks at {fmt.pct(v['kv_peak'])} here and {fmt.pct(v['reference_peak'])} on "
        "its peers: the whole service is short of KV capacity, not only this unit"),
    NoteCode.PREEMPTED_HERE_ONLY: lambda v: (
        f"{fmt.count(v['preemptions'])} requests preempted on this unit and none on its peers"),
    NoteCode.KV_FILLING: lambda v: (
        f"KV blocks allocated outpace blocks freed ({_x(v['alloc_free_ratio'])})"),
    NoteCode.QUEUE_GROWING: lambda v: (
        f"waiting queue grows by {fmt.decimal(v['per_window'])} requests per window"),
    NoteCode.LEVELS_DIFFER: lambda v: (
        f"the sides are at different levels ({v['before']} before, {v['after']} after): units "
        "are compared as they are"),
    NoteCode.FOCUS_MISSING: lambda v: (
        f"not in the after side: {', '.join(v['units'])} (its hot/peer ratio there is unknown)"),
    NoteCode.NOTHING_COMPARED: lambda v: (
        "no signal is measured on both sides; nothing to compare"),
}


def note(n: Note) -> str:
    """One note as a line (the diagnosis' and what-if's alike)."""
    if isinstance(n.code, WhatifNoteCode):
        return WHATIF_NOTES[n.code](n.values)
    return _NOTES[n.code](n.values)
