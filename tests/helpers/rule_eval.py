"""Evaluate a generated alert at explicit times in a real Prometheus, without deploying it: the
recorded series it reads are inlined (each reference replaced by its recording rule's
expression, with the rule's labels added), and the whole expression is asked with
``query_range`` at the rule evaluation step. ``for:`` is then a run of consecutive true steps."""

from __future__ import annotations

import re
from typing import Any

import httpx

_REF = re.compile(r"(skewscope:[a-z_:]+)\{([^{}]*)\}")
_MATCHER = re.compile(r'(\w+)="([^"]*)"')


def _with_label(expr: str, label: str, value: str) -> str:
    return f'label_replace({expr}, "{label}", "{value}", "", "")'


def inline(expr: str, records: list[dict[str, Any]]) -> str:
    """``expr`` with every recorded series it names replaced by what records it."""

    def one(m: re.Match[str]) -> str:
        name, matchers = m.group(1), dict(_MATCHER.findall(m.group(2)))
        for r in records:
            labels = r.get("labels", {})
            if r.get("record") == name and all(matchers.get(k) == v for k, v in labels.items()):
                out = f"({inline(r['expr'], records)})"
                for k, v in labels.items():
                    out = _with_label(out, k, v)
                for k, v in matchers.items():
                    if k not in labels:  # a further matcher: keep only its series
                        out = f"({out} and on ({k}) {_with_label('vector(1)', k, v)})"
                return out
        raise AssertionError(f"no recording rule for {m.group(0)}")

    return _REF.sub(one, expr)


def evaluate(
    url: str, rules: dict[str, Any], alert: str, start: float, end: float, step: float
) -> list[dict[str, Any]]:
    """The inlined ``alert``'s answer over [start, end] (a Prometheus range matrix)."""
    records = [r for g in rules["groups"] for r in g["rules"] if "record" in r]
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == alert]
    got = httpx.get(
        f"{url}/api/v1/query_range",
        params={"query": inline(rule["expr"], records), "start": start, "end": end, "step": step},
        timeout=60,
    )
    assert got.status_code == 200, got.text[:500]
    return got.json()["data"]["result"]  # type: ignore[no-any-return]


def longest_run(values: list[list[Any]], step: float) -> float:
    """The longest stretch (seconds) of consecutive evaluation steps with an answer."""
    times = sorted(float(t) for t, _ in values)
    best = run = 0.0
    for a, b in zip([None, *times], times, strict=False):
        run = run + step if a is not None and abs(b - a - step) < 1e-6 else 0.0
        best = max(best, run)
    return best
