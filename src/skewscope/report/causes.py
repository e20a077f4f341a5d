"""What each root cause reads as: its title and the actions it asks for.

The analysis ranks ``catalogue.Cause`` keys and the Report carries only those; this table words
them where the report is worded (``report/document.py``), so the JSON, terminal, Markdown and HTML
forms print the same title and actions (the JSON report's ``root_causes[].title`` and
``actions``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from skewscope.catalogue import Cause


@dataclass(frozen=True)
class CauseWords:
    title: str
    actions: tuple[str, ...]


WORDS: dict[Cause, CauseWords] = {
    Cause.ROUTING_WEIGHTS: CauseWords(
        "Routing weights favour some units",
        (
            "Correct the gateway's instance weights so traffic follows capacity.",
            "Check that every healthy unit is in the routing pool.",
        ),
    ),
    Cause.HEALTH_CHECK: CauseWords(
        "A unit gets (almost) no traffic: failed health check, service discovery or a unit "
        "that did not rejoin after a restart, canary or scale-out",
        (
            "Restore the unit or remove it from the pool so traffic stops piling on the rest.",
            "Check health-check and service-discovery state for the starved unit.",
        ),
    ),
    Cause.STICKY_SESSIONS: CauseWords(
        "Long-lived connections or session stickiness pin clients to a few units",
        (
            "Change connection pooling or the gateway policy (limit connection reuse).",
            "Balance on queue length or in-flight requests instead of connections.",
        ),
    ),
    Cause.PREFIX_AFFINITY: CauseWords(
        "Cache-aware or prefix routing sends every request with a shared prompt prefix to "
        "the unit that cached it",
        (
            "Lower the router's cache-affinity weight or raise its load-balance threshold so "
            "load wins over cache hits on a hot unit.",
            "Replicate the hot prefix (or its KV) on several units, or split the shared "
            "prefix's traffic over a group of units.",
        ),
    ),
    Cause.UNIT_LOST: CauseWords(
        "The unit stopped reporting while it was hot: its engine died under its load (out "
        "of memory, a crash, a restart loop) or its metrics endpoint stopped answering",
        (
            "Check the engine's process and logs at the time it was lost (OOM, crash, "
            "restart loop) and whether it still serves requests.",
            "Its traffic now lands on its peers: watch them for the same overload, and fix "
            "what sent it more than its share before it comes back.",
        ),
    ),
    Cause.STALE_LOAD: CauseWords(
        "The balancer decides on stale load: counts published late send each burst to the "
        "unit that looked least loaded at the last publish, so bursts rotate over the units",
        (
            "Publish the load counts more often (vLLM's DP coordinator, a router's polling "
            "interval of its workers' queues).",
            "Add the requests sent since the last publish to the published counts (local "
            "in-flight accounting), so one stale snapshot cannot take a whole burst.",
            "Pick by power-of-two choices over the counts instead of the single least-loaded "
            "unit: two random candidates spread a burst even on stale counts.",
        ),
    ),
    Cause.DP_DISPATCH: CauseWords(
        "The DP dispatch policy inside the instance sends more requests to some ranks",
        (
            "Review the DP load-balancing policy; make sure queue stats reach the balancer.",
            "Prefer a policy that counts waiting + running requests and tokens per rank.",
        ),
    ),
    Cause.LONG_REQUESTS: CauseWords(
        "Long requests are concentrated on some units; the balancer counts requests, not tokens",
        (
            "Balance on input/output tokens, queue length or KV level, not request count.",
            "Isolate long requests from short ones (separate pool or length-aware routing).",
        ),
    ),
    Cause.CAPABILITY_MISMATCH: CauseWords(
        "The unit is slower at the same load: configuration, hardware or process state differs",
        (
            "Unify model version, launch arguments, parallel and memory configuration.",
            "Check device health, process state and local resource contention on the unit.",
        ),
    ),
    Cause.PD_RATIO: CauseWords(
        "The prefill:decode split does not fit the traffic: one pool queues while the other "
        "has capacity to spare",
        (
            "Re-balance the P:D ratio: add instances to the saturated pool (scale it out, or "
            "let the autoscaler watch its queue) and take them from the idle one.",
            "Move instances between the pools where the engine allows it (relaunch an idle "
            "pool's instance in the saturated pool's role).",
            "Adjust the router's P/D selection: send short prompts straight to decode "
            "(llm-d's pd-profile-handler threshold, Dynamo's conditional prefill) when prefill "
            "is the bottleneck; cap the prefill share when decode is.",
        ),
    ),
    Cause.ENGINE_STALLED: CauseWords(
        "The engine holds requests but finishes none: hung process, collective-communication "
        "timeout, device fault or a scheduler that cannot admit",
        (
            "Drain the unit from the routing pool now: every request sent to it waits forever.",
            "Inspect the engine process and device (logs, stack dump, device health); restart "
            "it and check that it finishes requests again before it rejoins the pool.",
        ),
    ),
    Cause.DEVICE_OR_PROCESS: CauseWords(
        "The unit's device is busier at the same load: the device or the process on it is "
        "slower (throttling, errors, a degraded accelerator, contention on the host)",
        (
            "Check the device: clocks and throttling, power, temperature, ECC / XID errors.",
            "Check the engine process and host: CPU pinning, other processes on the device, "
            "NUMA placement; move the unit to a healthy device and compare.",
        ),
    ),
    Cause.SCHEDULER_BOUND: CauseWords(
        "The hot unit's queue grows while its device is not saturated: KV capacity or the "
        "scheduler, not compute, limits it",
        (
            "Check the engine's batch limits (max running sequences, max batched tokens) and "
            "its KV capacity before adding compute.",
            "Check CPU-side scheduling and tokenisation on the unit (a busy host thread "
            "starves a free device).",
        ),
    ),
    Cause.KV_SHORTAGE: CauseWords(
        "KV block shortage: the hot unit cannot admit more work because its KV blocks run "
        "out (free blocks near zero, batch stuck at a ceiling, requests waiting)",
        (
            "Move traffic off the unit first: lower its routing weight or drain part of it.",
            "Lower max concurrency (max running sequences) or the max request length.",
            "Add KV capacity: more device memory for the cache, KV quantisation or offload, "
            "more blocks per unit.",
            "Enable prefix caching so shared prompt prefixes take their blocks once.",
        ),
    ),
    Cause.KV_EXHAUSTION: CauseWords(
        "The hot unit is running out of KV-cache blocks",
        (
            "Throttle or shift traffic away from the hot unit until its KV cache has room.",
            "Then tune max concurrency, length limits or KV capacity (KV block shortage case).",
        ),
    ),
}


def title(cause: Cause) -> str:
    return WORDS[cause].title


def actions(causes: Iterable[Cause]) -> tuple[str, ...]:
    """The actions of ``causes``, most likely cause's first, each said once."""
    out: list[str] = []
    for c in causes:
        out.extend(a for a in WORDS[c].actions if a not in out)
    return tuple(out)
