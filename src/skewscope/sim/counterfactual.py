"""The same scenario under other routing: a counterfactual run.

``simulate`` draws the workload (arrivals, lengths, classes, sessions) from its own stream of
the scenario's seed, spawned apart from the routing's, so a scenario re-run with another gateway
or DP dispatcher — or another pool — serves exactly the same requests. This is what a what-if
prediction is checked against (``whatif/truth.py``, ``benchmarks/bench_whatif.py``) and what
``skewscope simulate --gateway/--dispatcher`` runs.
"""

from __future__ import annotations

import dataclasses

from skewscope.errors import UsageError
from skewscope.sim.policies import POLICIES, RoutingSpec
from skewscope.sim.spec import Health, Scenario

# Policies a command line can name alone (``weighted`` needs weights, ``sticky`` sessions).
PLAIN_POLICIES: tuple[str, ...] = tuple(p for p in POLICIES if p != "weighted")


def rerouted(
    sc: Scenario,
    *,
    gateway: RoutingSpec | None = None,
    dispatcher: RoutingSpec | None = None,
    health: tuple[Health, ...] | None = None,
) -> Scenario:
    """``sc`` with the given routing level(s) or pool replaced; everything else, the seed
    included, is kept, so the workload drawn is the same request for request."""
    if gateway is None and dispatcher is None and health is None:
        return sc
    what = ", ".join(
        f"{k} {v.describe()}" for k, v in (("gateway", gateway), ("dispatcher", dispatcher)) if v
    )
    if health is not None:
        what = ", ".join(x for x in (what, "pool changed") if x)
    return dataclasses.replace(
        sc,
        summary=f"{sc.summary} (counterfactual: {what})",
        gateway=sc.gateway if gateway is None else gateway,
        dispatcher=sc.dispatcher if dispatcher is None else dispatcher,
        health=sc.health if health is None else health,
    )


def policy_spec(name: str, what: str) -> RoutingSpec:
    """A plain policy named on the command line (one-line error otherwise)."""
    if name not in PLAIN_POLICIES:
        raise UsageError(
            f"{what}: unknown policy {name!r}; expected one of {', '.join(PLAIN_POLICIES)}"
        )
    return RoutingSpec(name)
