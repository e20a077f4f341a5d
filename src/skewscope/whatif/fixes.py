"""The recommended policy as a change you can apply: the setting per serving stack.

A prediction is only useful once someone can deploy it, so for the recommended candidate this
spells the change the way each stack is configured — the gateway (nginx, sglang-router,
vllm-router, llm-d's endpoint picker) for an instance-level policy, the engine's DP dispatcher
(vLLM, SGLang) for a DP one — and says whether the stack ships the same algorithm (``exact``)
or only the nearest one (``closest``). Flag names are the installed releases' (sglang-router
0.3.2 ``--policy`` random|round_robin|cache_aware|power_of_two|manual; vllm-router 0.1.17 also
kv_aware|consistent_hash|sticky_least_loaded; SGLang ``--load-balance-method``, vLLM's internal
DP balancer and its ``X-data-parallel-rank`` pin header: docs/whatif.md, The fix). The report
layer only renders these facts.
"""

from __future__ import annotations

import math

from skewscope.report.whatif_model import CLOSEST, EXACT, NONE, FixSetting

GATEWAYS: tuple[str, ...] = ("nginx", "sglang-router", "vllm-router", "llm-d")
ENGINES: tuple[str, ...] = ("vllm", "sglang")
# the evidence's dialect -> the engine, and the gateway when the dialect is one
ENGINE_OF: dict[str, str] = {
    "vllm": "vllm",
    "ms-service-metric": "vllm",
    "llm-d": "vllm",
    "sglang": "sglang",
    "mindie": "mindie",
    "profiler": "mindie",
}
GATEWAY_OF: dict[str, str] = {"llm-d": "llm-d"}


def _router(policy: str, stack: str) -> tuple[str, str]:
    """sglang-router / vllm-router ``--policy`` for a gateway policy."""
    ships = {"round_robin", "cache_aware", "power_of_two"}
    if stack == "vllm-router":
        ships |= {"consistent_hash"}
    if policy in ships:
        return f"--policy {policy}", EXACT
    if policy in ("least_requests", "least_tokens", "fix_weights"):
        return "--policy power_of_two", CLOSEST  # the only load-aware policy both ship
    return "", NONE


def _weights(names: tuple[str, ...], weights: tuple[float, ...]) -> str:
    lo = min(w for w in weights if w > 0)
    return " ".join(
        f"server {n} weight={max(1, round(10 * w / lo))};"
        for n, w in zip(names, weights, strict=True)
    )


def _gateway(
    policy: str,
    stack: str,
    names: tuple[str, ...],
    weights: tuple[float, ...],
    units: tuple[str, ...],
) -> tuple[str, str]:
    out = ", ".join(units)
    if policy == "remove_slow_unit":
        if stack == "nginx":
            return " ".join(f"server {u} down;" for u in units), EXACT
        if stack == "llm-d":
            return f"take {out} out of the InferencePool (its selector label)", EXACT
        return f"--worker-urls without {out}", EXACT
    if policy == "restore_pool":
        if stack == "nginx":
            return " ".join(
                f"server {u};" for u in units
            ) + " (no down, health check passing)", EXACT
        if stack == "llm-d":
            return f"{out} back in the InferencePool (ready, selector label)", EXACT
        return f"--worker-urls with {out}", EXACT
    if stack == "nginx":
        return {
            "round_robin": ("no balancing directive (round robin, the default)", EXACT),
            "least_requests": ("least_conn;", EXACT),
            "least_tokens": ("least_conn;", CLOSEST),  # nginx cannot read tokens
            "power_of_two": ("random two least_conn;", EXACT),
            "consistent_hash": ("hash $http_x_session_id consistent;", EXACT),
            "fix_weights": (_weights(names, weights), EXACT) if weights else ("", NONE),
        }.get(policy, ("", NONE))
    if stack == "llm-d":
        return {
            "least_requests": ("queue-scorer weight 1 (the only scorer)", CLOSEST),
            "least_tokens": (
                "kv-cache-utilization-scorer weight 2, queue-scorer weight 1",
                CLOSEST,
            ),
            "fix_weights": ("queue-scorer weight 1 (the only scorer)", CLOSEST),
            "cache_aware": ("prefix-cache-scorer weight 2, queue-scorer weight 1", CLOSEST),
            "consistent_hash": ("session-affinity-scorer weight 1", CLOSEST),
        }.get(policy, ("", NONE))
    return _router(policy, stack)


def _dp(policy: str, stack: str, correlated: bool) -> tuple[str, str]:
    unpin = "clients send no X-data-parallel-rank header"
    if stack == "vllm":
        lb = f"--data-parallel-size N with vLLM's own DP balancer; {unpin}"
        return lb, EXACT if policy == "vllm_dp" else CLOSEST
    method = {
        "round_robin": "round_robin",
        "fix_weights": "round_robin",
        "shortest_queue": "shortest_queue",
        "least_requests": "shortest_queue",
        "minimum_tokens": "minimum_tokens",
        "least_tokens": "minimum_tokens",
    }.get(policy)
    newer = {"shortest_queue": "total_requests", "minimum_tokens": "total_tokens"}
    if method is None:  # vllm_dp, power_of_two: the nearest SGLang method is the queue
        method, match = "shortest_queue", CLOSEST
    else:
        match = EXACT
    text = f"--load-balance-method {method}"
    if method in newer:
        text += f" (newer releases: {newer[method]})"
    if correlated:
        text += f"; {unpin}"
    return text, match


def fix_settings(
    name: str,
    level: str,
    engine: str,
    names: tuple[str, ...],
    weights: tuple[float, ...] = (),
    units: tuple[str, ...] = (),
    correlated: bool = False,
) -> tuple[FixSetting, ...]:
    """The settings for the candidate ``name`` (a plan name: ``least_tokens``,
    ``dp:minimum_tokens``, ``fix_weights``…) at ``level``; ``engine`` = the evidence's dialect
    (``profiler`` offline), ``names`` the instances, ``weights`` the plan's gateway weights,
    ``units`` the instances a pool change takes out or puts back."""
    if level == "observed":
        return ()
    in_engine = ENGINE_OF.get(engine, "")
    in_gateway = GATEWAY_OF.get(engine, "")
    if level == "dp":
        policy = name.removeprefix("dp:")
        return tuple(FixSetting(s, *_dp(policy, s, correlated), s == in_engine) for s in ENGINES)
    w = tuple(x for x in weights if math.isfinite(x))
    out = []
    for s in GATEWAYS:
        setting, match = _gateway(name, s, names, w, units)
        out.append(FixSetting(s, setting, match, s == in_gateway))
    return tuple(out)
