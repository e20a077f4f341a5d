"""Fleet-wide DP patterns: the same rank hot in many instances.

One DP dispatch policy runs in every instance, so a policy that favours rank 0 makes dp0 hot
everywhere. Each instance then looks like a local DP skew; together they are one fleet-wide
cause, and the fix is the policy, not any one instance.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from skewscope.analysis import causes
from skewscope.catalogue import Cause, Kind, Severity
from skewscope.config import Thresholds
from skewscope.report.facts import FleetPatternFacts, StarvedFacts
from skewscope.report.model import Finding, UnitReport

SEVERITY_ORDER = (Severity.LOW, Severity.MEDIUM, Severity.HIGH)


def fleet_dp_patterns(
    findings: Iterable[Finding],
    unit_reports: Iterable[UnitReport],
    multi_rank_instances: int,
    th: Thresholds,
    pools: Mapping[str, int] | None = None,
) -> list[Finding]:
    """One finding per DP rank index that is hot in enough of the multi-rank instances.

    ``unit_reports`` say which instance and rank each unit of the findings is (never parsed back out
    of the unit id). ``pools``: in a prefill/decode fleet, the multi-rank instances of each pool;
    a pattern is then looked for in each pool apart (each runs its own engines' dispatch)."""
    if pools:
        reports = list(unit_reports)
        found = list(findings)
        return [
            p
            for pool, n in sorted(pools.items())
            for p in fleet_dp_patterns(
                [f for f in found if all(_pool(reports, u) == pool for u in f.units)],
                [u for u in reports if (u.pool or "") == pool],
                n,
                th,
            )
        ]
    if multi_rank_instances < th.fleet_pattern_min_instances:
        return []
    where = {u.unit: (u.instance, u.dp_rank) for u in unit_reports if u.dp_rank is not None}
    by_rank: dict[int, list[tuple[str, str, Finding]]] = defaultdict(list)
    for f in findings:
        if f.kind == Kind.STALLED or isinstance(f.facts, StarvedFacts):
            continue  # hung engines and starved ranks are local matters
        for unit in f.units:
            if unit in where:
                instance, rank = where[unit]
                by_rank[rank].append((instance, unit, f))
    out = []
    votes = causes.fixed(Cause.DP_DISPATCH)  # one dispatch policy runs in every instance
    for rank, hits in sorted(by_rank.items()):
        instances = sorted({inst for inst, _, _ in hits})
        share = len(instances) / multi_rank_instances
        if len(instances) < th.fleet_pattern_min_instances or share < th.fleet_pattern_share:
            continue
        kinds = [f.kind for _, _, f in hits]
        kind = max(sorted(set(kinds)), key=kinds.count)
        severity = max((f.severity for _, _, f in hits), key=SEVERITY_ORDER.index)
        units = tuple(dict.fromkeys(u for _, u, _ in sorted(hits, key=lambda h: h[0])))
        out.append(
            Finding(
                kind=kind,
                units=units,
                reference_units=(),
                severity=severity,
                facts=FleetPatternFacts(rank, tuple(instances), multi_rank_instances, kind),
                evidence={
                    "fleet_dp_pattern": {
                        "dp_rank": rank,
                        "instances": instances,
                        "hot_in": len(instances),
                        "of_instances": multi_rank_instances,
                    }
                },
                root_causes=causes.rank(votes),
                votes=votes,
            )
        )
    return out


def _pool(reports: list[UnitReport], unit: str) -> str | None:
    return next(((u.pool or "") for u in reports if u.unit == unit), None)
