"""Facts into sentences: the words of every finding summary and note, one place for all
renderers (terminal, Markdown, HTML, and the JSON report's ``summary`` and ``notes``).

The analysis decides what is true (``report/facts.py``); this module only says it, and every
number goes through ``fmt`` so a sentence and a table print the same figure alike.
"""

from __future__ import annotations

from skewscope.catalogue import METRIC_BY_KEY, Kind
from skewscope.report import fmt
from skewscope.report.facts import (
    Compared,
    FindingFacts,
    FleetPatternFacts,
    HotFacts,
    KvShortageFacts,
    LostFacts,
    Note,
    PdFacts,
    StaleLoadFacts,
    StallFacts,
    StarvedFacts,
)
from skewscope.report.fmt import times as _x
from skewscope.report.note_phrases import note as note

# What a capability ratio was measured on (HotFacts.capability_basis; "" = nothing measured).
CAPABILITY_BASIS = {
    "cost_us_per_token": "execution time per scheduled token",
    "service_ms": "service time (latency minus queue wait) at equal load",
    "e2e_mean_ms": "end-to-end latency at equal load",
    "ttft_mean_ms": "TTFT at equal load",
    "in_service_s": "time in service (running / requests, Little's law) at equal load",
    "": "not measured",
}


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
    return (
        f"{label} {fmt.quantity(c.metric, c.hot, c.hot_bound)} vs "
        f"{fmt.quantity(c.metric, c.reference, c.reference_bound)}"
    )


def _kind_body(h: HotFacts) -> str:
    side_ratio = h.input_ratio if h.weight_side == "input" else h.output_ratio
    if h.kind == Kind.COUNT:
        body = (
            f"{_x(h.count_ratio)} the requests of its peers at {_x(h.weight_ratio)} tokens "
            "per request: count skew"
        )
        if h.secondary_kind == Kind.WEIGHT:
            body += f", mixed with heavier ({h.weight_side}-heavy) requests"
    elif h.kind == Kind.WEIGHT:
        requests = (
            f"{_x(h.count_ratio)} the requests"
            if h.more_requests
            else f"about the same request count ({_x(h.count_ratio)})"
        )
        body = (
            f"{requests} but {_x(side_ratio)} the {h.weight_side} tokens per request: "
            f"weight skew ({h.weight_side}-heavy)"
        )
        if h.secondary_kind == Kind.COUNT:
            body += ", mixed with more requests"
    elif h.kind == Kind.UNKNOWN and h.count_ratio == h.count_ratio:  # counts measured
        body = (
            f"it runs hotter than its peers on {h.driver.replace('_', ' ')} and it hurts, "
            f"though it receives {_x(h.count_ratio)} the requests of its peers at "
            f"{_x(h.weight_ratio)} tokens per request and is not measurably slower"
            + (
                " per scheduled token (it is overloaded: far more requests in flight than its "
                "peers at a full KV cache or preempting, so its longer service is what its own "
                "load does to it, not a weaker unit)"
                if h.overloaded
                else ""
            )
            + ": no load or capability difference explains it (requests counted as they "
            "finish understate a saturated unit's arrivals); see what keeps it from "
            "admitting work"
        )
    elif h.kind == Kind.UNKNOWN:
        body = (
            f"it runs hotter than its peers on {h.driver.replace('_', ' ')}, but the source "
            "exports no per-unit request or token counts at this level (e.g. SGLang without "
            "its schedulers' per-rank counters), so count, weight and capability skew cannot "
            "be told apart; compare per-rank request logs or an offline profile"
        )
    else:
        body = (
            f"similar requests ({_x(h.count_ratio)}) and tokens per request "
            f"({_x(h.weight_ratio)}) but {_x(h.capability_ratio)} the "
            f"{CAPABILITY_BASIS[h.capability_basis]}: capability skew"
        )
    if Kind.WEIGHT in (h.kind, h.secondary_kind) and h.weight_p_value == h.weight_p_value:
        body += f" (beyond chance: permutation p = {fmt.p_value(h.weight_p_value)})"
    return body


def split_sentence(count_share: float, weight_share: float) -> str:
    """The excess decomposition in words; a negative part means fewer or lighter requests."""
    if count_share < 0:
        return (
            "All of its excess token load comes from heavier requests "
            "(it even receives slightly fewer requests than its peers)."
        )
    if weight_share < 0:
        return (
            "All of its excess token load comes from more requests "
            "(its requests are even slightly lighter than its peers')."
        )
    return (
        f"Of its excess token load, {fmt.pct(count_share)} comes from more requests and "
        f"{fmt.pct(weight_share)} from heavier requests."
    )


def saturation_sentence(h: HotFacts) -> str:
    s = h.saturation
    if s is None:
        return ""
    queue = "a growing queue" if s.queue_growing else "a standing queue"
    text = (
        f"It sits at its batch ceiling (about {fmt.count(s.ceiling)} running) with {queue} "
        f"in {fmt.pct(s.share)} of the judged windows"
    )
    if s.unplaced_per_window == s.unplaced_per_window:
        return (
            f"{text}; {fmt.decimal(s.unplaced_per_window)} requests per window of its "
            "instance could not be placed on a DP rank and, as it is the only saturated "
            "rank, most likely wait here: counting them, it gets "
            f"{_x(s.count_ratio_with_unplaced)} the requests of its peers."
        )
    if s.lower_bound:
        why = (
            "requests are counted when they finish"
            if s.lower_bound == "finished"
            else "some requests of its instance could not be placed on a DP rank"
        )
        return (
            f"{text}: {why}, so its request ratio ({_x(h.count_ratio)}) is a lower bound "
            "and the skew may be understated."
        )
    return f"{text}."


_DEVICE_WHAT = {"device_util": "device utilisation", "busy_share": "share of time executing steps"}


def device_sentences(h: HotFacts) -> list[str]:
    d = h.device
    if d is None:
        return []
    what = _DEVICE_WHAT[d.basis]
    out = []
    if d.capability == "busier":
        out.append(
            f"At the same load its {what} is {fmt.pct(d.hot)} against "
            f"{fmt.pct(d.reference)} on its peers: the device or the process on it is "
            "slower."
        )
    elif d.capability == "slower_device":
        out.append(
            f"Its device works {_x(d.cost_ratio)} as long as its peers' need "
            "for the same steps and tokens: the device or the process on it is slower."
        )
    elif d.capability == "host_bound":
        out.append(
            "Its device works about as long as its peers' for the same steps and tokens "
            f"({_x(d.cost_ratio)}), yet its steps take "
            f"{_x(d.step_cost_ratio)} as long: the time goes to the host and "
            "scheduler between device passes."
        )
    if d.queue_not_compute:
        out.append(
            f"Its queue grows while its {what} is only {fmt.pct(d.hot)} (below "
            "saturation): KV capacity or the scheduler limits it, not compute."
        )
    return out


def hot_summary(h: HotFacts) -> str:
    head = (
        f"{h.unit} is a persistent hot spot (hot in {fmt.pct(h.hot_share)} of "
        f"{h.judged_windows} judged windows, {h.hot_run} in a row)"
    )
    parts = [f"{head}: {_kind_body(h)}."]
    if h.count_share == h.count_share and h.kind in (Kind.COUNT, Kind.WEIGHT):
        parts.append(split_sentence(h.count_share, h.weight_share))
    if h.hurting:
        parts.append("Impact against its peers: " + ", ".join(map(_compared, h.hurting)) + ".")
    if h.bounded:
        parts.append(
            "Histogram bucket bounds only, so no ratio is formed from them: "
            + ", ".join(map(_compared, h.bounded))
            + "."
        )
    elif not h.hurting:
        parts.append("No measurable queueing or latency impact yet.")
    if h.kv_exhausted and h.kv_consequence:
        parts.append(
            "Its KV cache is near exhaustion, yet its queue does not grow and nothing "
            "is preempted: a consequence of its load, not the cause to act on first."
        )
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
            return (
                f"free KV blocks fall to {fmt.count(k.free_blocks_min)} (of up to "
                f"{fmt.count(k.free_blocks_capacity)} free)"
            )
        return f"KV usage peaks at {fmt.pct(k.kv_peak)}"
    if key == "batch_at_ceiling":
        return (
            f"its batch stays at its ceiling (~{fmt.decimal(k.batch_ceiling)} running) with "
            f"requests waiting in {fmt.pct(k.saturated_share)} of the windows"
        )
    if key == "alloc_outpaces_free":
        return f"blocks allocated outpace blocks freed ({_x(k.alloc_free_ratio)})"
    if key == "preemptions":
        return f"{fmt.count(k.preemptions)} requests were preempted (recomputed)"
    return (
        f"waiting grows by {fmt.decimal(k.waiting_growth_per_window)} requests per window "
        "while running stays flat"
    )


def kv_summary(k: KvShortageFacts) -> str:
    symptoms = "; ".join(kv_symptom(k, s) for s in k.symptoms)
    return (
        f"{k.unit} is short of KV blocks: {symptoms}. Queueing with a full KV cache means it "
        "cannot admit more work: move traffic off it first, then lower concurrency or "
        "length limits, add KV capacity or enable prefix caching."
    )


def starved_summary(s: StarvedFacts) -> str:
    listing = ", ".join(f"{u} ({fmt.pct(share)} of windows)" for u, share in s.shares)
    return (
        f"{listing} received almost no traffic while their peers carried the load: count "
        "skew from a unit missing from the routing pool."
    )


def stale_load_summary(s: StaleLoadFacts) -> str:
    units = ", ".join(f"{u} ({n})" for u, n in s.turns)
    what = {
        "requests": "requests",
        "running": "running requests",
        "arrivals": "arrivals (finished + change in held requests)",
    }[s.signal]
    every = (
        f"the busiest changing every ~{fmt.seconds_about(s.switch_every_s)}"
        if s.switch_every_s > s.window_s
        else f"the busiest changing from one {fmt.seconds(s.window_s)} window to the next"
    )
    return (
        f"The units{' of ' + s.group if s.group else ''} take turns carrying the load: in "
        f"{fmt.pct(s.swing_share)} of {s.judged_windows} windows one of them ran far above "
        f"its peers while the others carried less (their {what} anti-correlated, r = "
        f"{fmt.decimal(s.anticorrelation)}), {every}; busiest in windows: {units}. Over the "
        f"range none is hot (highest {_x(s.range_ratio)} its peers). A balancer deciding on "
        "stale load (counts published late) sends each burst to the unit that looked least "
        "loaded at the last publish: a stale-load pattern, not jitter and not a hot unit."
    )


def lost_summary(s: LostFacts) -> str:
    return (
        f"{s.unit} was lost at {fmt.when(s.lost_at_s)} while hot: it ran hot in its last "
        f"{s.hot_windows} reported window(s), then stopped reporting for the "
        f"{s.absent_windows} window(s) its peers reported to the end of the range. An engine "
        "that stops answering under its load is not a balanced unit: find out whether it "
        "died (OOM, crash) or only its metrics went dark."
    )


def stall_summary(s: StallFacts) -> str:
    what = "scheduling steps" if s.progress_signal == "steps" else "finished requests"
    return (
        f"{s.unit} is stalled: it holds {fmt.count(s.in_flight)} requests (running + "
        f"waiting) on average but made {fmt.decimal(s.progress)} {what} per window in "
        f"{fmt.pct(s.stalled_share)} of its {s.measured_windows} measured windows "
        f"({s.stalled_run} in a row). Requests routed to it do not finish; by finished "
        "requests alone it would look idle."
    )


def fleet_pattern_summary(p: FleetPatternFacts) -> str:
    return (
        f"dp{p.dp_rank} is hot in {len(p.instances)} of {p.of_instances} instances "
        f"({', '.join(p.instances)}), {p.kind} skew in each: one DP dispatch policy favours "
        "this rank everywhere, a fleet-wide pattern rather than a fault of any one instance. "
        "Fix the policy once for the whole fleet."
    )


def pd_summary(p: PdFacts) -> str:
    def kv(v: float) -> str:
        return "" if v != v else f", KV {fmt.pct(v)}"

    ttft = (
        ""
        if p.ttft_first_ms != p.ttft_first_ms or p.ttft_last_ms != p.ttft_last_ms
        else f" Mean TTFT went from {fmt.decimal(p.ttft_first_ms, 0)} ms to "
        f"{fmt.decimal(p.ttft_last_ms, 0)} ms over the range."
    )
    return (
        f"The {p.saturated} pool is saturated while the {p.idle} pool idles in "
        f"{fmt.pct(p.share)} of {p.windows} windows ({p.run} in a row): "
        f"{fmt.decimal(p.saturated_waiting)} requests waiting per {p.saturated} instance"
        f"{kv(p.saturated_kv)} against {fmt.decimal(p.idle_waiting)} per {p.idle} instance"
        f"{kv(p.idle_kv)}; prefill/decode running per instance {_x(p.running_ratio)} "
        f"(P:D = {p.prefill_units}:{p.decode_units}).{ttft} The pools are judged apart: "
        f"this is a P:D ratio or P/D routing problem, not a hot unit."
    )
