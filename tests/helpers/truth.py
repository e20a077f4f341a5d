"""A diagnose JSON report held against a simulated scenario's truth (truth.json): the verdict,
the hot and starved units, the finding's kind, weight side and first-ranked root cause. Shared by
the offline, Prometheus and live end-to-end tests, so one truth is judged one way."""

from __future__ import annotations

from typing import Any

from helpers.report_schema import assert_valid

# Causes the engine's metrics alone cannot rank first: stickiness looks like routing weights
# without gateway evidence, and a device figure names device_or_process before the config.
NOT_RANKED_FIRST = {"sticky_sessions", "capability_mismatch"}


def check_against_truth(doc: dict[str, Any], truth: dict[str, Any]) -> None:
    assert_valid(doc)  # the JSON contract (report/schema/report.schema.json)
    assert doc["verdict"] == truth["verdict"], doc["notes"]
    if truth["verdict"] != "imbalanced":
        assert doc["hot_units"] == [] and doc["findings"] == []
        return
    assert doc["level"] == truth["level"]
    assert sorted(doc["hot_units"]) == sorted(truth["hot_units"])
    assert sorted(doc["starved_units"]) == sorted(truth["idle_units"])
    if truth["kind"] == "stale_load":  # one finding for the rotating group, no hot unit
        stale = [f for f in doc["findings"] if f["kind"] == "stale_load"]
        assert [sorted(f["units"]) for f in stale] == [sorted(truth["rotating_units"])], doc[
            "findings"
        ]
        assert [c["key"] for c in stale[0]["root_causes"]] == [truth["root_cause"]]
        assert stale[0]["facts"]["anticorrelation"] < 0 and stale[0]["summary"]
        return
    target = set(truth["hot_units"]) | set(truth["idle_units"])
    matching = [f for f in doc["findings"] if set(f["units"]) & target]
    assert matching, doc["findings"]
    f = matching[0]
    assert f["kind"] == truth["kind"]
    assert f["weight_side"] == truth["weight_side"]
    keys = [c["key"] for c in f["root_causes"]]
    assert truth["root_cause"] in keys
    if truth["root_cause"] not in NOT_RANKED_FIRST:  # e.g. a full KV pool behind long prompts
        assert keys[0] == truth["root_cause"], keys  # is their consequence, not the cause
    if f["evidence"].get("kv_exhausted") and not truth["kv_exhausted"]:
        assert keys.index("kv_exhaustion") > 0 and f["facts"]["kv_consequence"] is True
        assert "a consequence of its load" in f["summary"]
    if truth["kind"] == "weight":  # heavier requests far beyond chance
        assert f["evidence"]["weight_p_value"] < 0.01
    if truth["kv_exhausted"]:
        assert f["evidence"]["kv_exhausted"] is True
        # the KV block shortage case gets a finding of its own, after the unit's skew finding
        kv = [g for g in doc["findings"] if g["kind"] == "kv_shortage"]
        assert [g["units"] for g in kv] == [f["units"]], doc["findings"]
        assert "kv_high" in kv[0]["evidence"]["symptoms"]
    assert f["actions"] and f["summary"]
