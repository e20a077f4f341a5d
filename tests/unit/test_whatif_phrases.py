"""What-if notes travel as facts and the report layer words them: known figures in, the
sentences the what-if report has always printed out (every number through ``report/fmt.py``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from skewscope.notes import Note, WhatifNoteCode
from skewscope.report import phrases
from skewscope.report.whatif_phrases import WHATIF_NOTES

SRC = Path(__file__).parents[2] / "src" / "skewscope"
W = WhatifNoteCode


def test_every_whatif_note_code_has_words_and_reaches_the_schema() -> None:
    assert set(WHATIF_NOTES) == set(W)
    schema = json.loads((SRC / "report" / "schema" / "whatif.schema.json").read_text())
    codes = schema["properties"]["note_facts"]["items"]["properties"]["code"]["enum"]
    routing = schema["$defs"]["routing_fact"]["properties"]["code"]["enum"]
    plans = schema["$defs"]["policy"]["properties"]["description_facts"]["properties"]["code"]
    assert sorted([*codes, *routing, *plans["enum"]]) == sorted(["source", *(str(c) for c in W)])


def test_plans_and_the_inferred_routing_read_their_figures() -> None:
    weighted = Note(W.ROUTING_WEIGHTED, {"shares": [["inst-0", 0.2104], ["inst-1", 0.3896]]})
    assert phrases.note(weighted) == (
        "weighted (inferred from unequal request shares: inst-0 21%, inst-1 39%)"
    )
    current = Note(
        W.PLAN_CURRENT, {"inferred": (("instance", weighted), ("dp", Note(W.ROUTING_EQUAL)))}
    )
    assert phrases.note(current) == (
        "replay of the observed placement: instance: weighted (inferred from unequal request "
        "shares: inst-0 21%, inst-1 39%); dp: round_robin-like (inferred: equal request counts)"
    )
    assert current.to_dict()["inferred"][0] == [
        "instance",
        {"code": "whatif_routing_weighted", "shares": [["inst-0", 0.2104], ["inst-1", 0.3896]]},
    ]
    assert phrases.note(Note(W.PLAN_FIX_WEIGHTS, {"weights": [0.2, 0.4004, 0.3996]})) == (
        "gateway weights proportional to calibrated capacity (0.20, 0.40, 0.40)"
    )
    assert phrases.note(Note(W.PLAN_REMOVE_SLOW, {"units": ["inst-2", "inst-5"]})) == (
        "take inst-2, inst-5 out of the pool, current policy on the rest"
    )


def test_the_service_model_note_reads_its_figures() -> None:
    n = Note(
        W.SERVICE_MODEL,
        {
            "fixed_ms": 12.345,
            "per_prefill_token_ms": 0.01234,
            "per_decode_seq_ms": 0.4567,
            "max_running": 64,
            "token_budget": 512,
            "max_batch_seen": 61.0,
            "max_tokens_seen": 498.6,
            "block_size": 16,
            "budget": "",
            "default_budget": 8192,
        },
    )
    assert phrases.note(n) == (
        "service model: step = 12.3 ms + 0.0123 ms/prefill token + 0.457 ms/decode sequence, "
        "batch ceiling 64 and token budget 512 (highest seen 61 and 499, rounded up), KV blocks "
        "of 16 tokens (assumed)"
    )
    online = Note(W.SERVICE_MODEL, {**n.values, "budget": "default"})
    assert phrases.note(online).endswith(
        "rounded up; online: the batch from the mean running gauge; no tokens-per-step "
        "histogram, so the budget is the simulator's default 8,192 (assumed)), KV blocks of 16 "
        "tokens (assumed)"
    )


def test_pool_session_and_trust_notes_read_their_figures() -> None:
    assert phrases.note(Note(W.LEFT_EARLY, {"instance": "inst-3", "at_s": 419.6})) == (
        "inst-3 left the pool at 420 s (no request after)"
    )
    assert phrases.note(Note(W.JOINED_LATE, {"instance": "i1", "at_s": 1234.4})) == (
        "i1 joined the pool only at 1,234 s (no request before)"
    )
    sessions = phrases.note(Note(W.SESSIONS, {"keys": 1200, "key_name": None, "share": 0.456}))
    assert sessions.startswith(
        "sessions: 1,200 distinct client keys from the access log on 46% of the replayed requests"
    )
    assert phrases.note(Note(W.NOT_REPRODUCED, {"metrics": ["ttft_p99_ms", "kv_peak"]})) == (
        "the replay of the current routing does not reproduce the evidence (ttft_p99_ms, "
        "kv_peak): do not trust the ranking"
    )
    assert "(uncalibrated service model)" in phrases.note(Note(W.NOT_REPRODUCED, {"metrics": []}))
    workload = phrases.note(Note(W.ONLINE_WORKLOAD, {"requests": 12345, "window_s": 7.5}))
    assert workload.startswith(
        "online workload: 12,345 requests rebuilt from per-window counters (7.5 s windows:"
    )
    assert phrases.note(Note(W.LENGTHS, {"what": "output", "histogram": False})).startswith(
        "no output-length histogram: every request of a unit has the unit's mean output length"
    )
    assert phrases.note(Note.text("dialect: vllm")) == "dialect: vllm"


def test_a_note_keeps_its_figures_in_the_json() -> None:
    n = Note(W.NO_KV, {"ranks": 2, "blocks": 4096})
    assert n.to_dict() == {"code": "whatif_no_kv", "ranks": 2, "blocks": 4096}


def test_whatif_writes_no_note_as_prose() -> None:
    """The replay hands its notes over as ``Note`` facts; a string note is a regression."""
    prose = re.compile(r"notes?\.(append|insert)\((0, )?f?\"")
    offenders = [
        f"{p.name}:{i}"
        for p in sorted((SRC / "whatif").glob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if prose.search(line)
    ]
    assert offenders == []
