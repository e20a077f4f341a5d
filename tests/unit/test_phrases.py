"""The report layer phrases the analysis' facts: facts with known numbers in, sentences out.

Every number in a sentence goes through ``report/fmt.py`` (a sentence and a table print a figure
alike); a value that is only a histogram bucket bound is quoted as ``< v`` / ``> v`` and never
turned into a ratio; and the analysis itself writes no prose.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.classify import classify
from skewscope.analysis.diagnose import diagnose_frame
from skewscope.catalogue import Cause
from skewscope.config import DEFAULT_THRESHOLDS
from skewscope.report import causes, fmt, note_phrases, phrases
from skewscope.report.document import finding_document
from skewscope.report.facts import (
    Compared,
    HotFacts,
    KvShortageFacts,
    Note,
    NoteCode,
    SaturationFacts,
    StallFacts,
    StarvedFacts,
)

COUNT = HotFacts(
    unit="i0",
    kind="count",
    secondary_kind=None,
    weight_side=None,
    hot_share=0.8,
    judged_windows=30,
    hot_run=12,
    driver="requests",
    count_ratio=2.2,
    weight_ratio=1.01,
    input_ratio=1.0,
    output_ratio=1.02,
    capability_ratio=1.0,
    capability_basis="cost_us_per_token",
    more_requests=True,
    weight_p_value=math.nan,
    count_share=0.95,
    weight_share=0.05,
    hurting=(),
    bounded=(),
    kv_exhausted=False,
    saturation=None,
    widening=False,
    device=None,
    kv_shortage=False,
)


def test_count_skew_names_requests_with_its_ratio_and_the_split() -> None:
    text = phrases.hot_summary(COUNT)
    assert text.startswith(
        "i0 is a persistent hot spot (hot in 80% of 30 judged windows, "
        "12 in a row): 2.20x the requests of its peers at 1.01x tokens per "
        "request: count skew."
    )
    assert "Of its excess token load, 95% comes from more requests and 5% from heavier" in text
    assert "No measurable queueing or latency impact yet." in text


def test_peers_with_no_requests_read_infinite_and_large_ratios_keep_their_digits() -> None:
    assert "∞x the requests" in phrases.hot_summary(replace(COUNT, count_ratio=math.inf))
    assert "1,234x the requests" in phrases.hot_summary(replace(COUNT, count_ratio=1234.4))
    assert "n/a the requests" not in phrases.hot_summary(COUNT)


def test_weight_skew_at_equal_counts_says_so_and_quotes_its_p_value() -> None:
    w = replace(
        COUNT,
        kind="weight",
        weight_side="input",
        count_ratio=1.05,
        input_ratio=3.0,
        more_requests=False,
        weight_p_value=0.002,
        count_share=0.1,
        weight_share=0.9,
    )
    text = phrases.hot_summary(w)
    assert (
        "about the same request count (1.05x) but 3.00x the input tokens per request: "
        "weight skew (input-heavy) (beyond chance: permutation p = 0.002)"
    ) in text
    more = phrases.hot_summary(
        replace(w, count_ratio=1.4, more_requests=True, secondary_kind="count")
    )
    assert "1.40x the requests but 3.00x the input" in more
    assert more.count("mixed with more requests") == 1


def test_bucket_bounds_are_quoted_as_bounds_never_as_a_ratio() -> None:
    bounded = (Compared("ttft_p99_ms", 10_000.0, 300.0, "lower", "upper"),)
    text = phrases.hot_summary(replace(COUNT, bounded=bounded))
    assert (
        "Histogram bucket bounds only, so no ratio is formed from them: "
        "TTFT p99 > 10,000 ms vs < 300 ms."
    ) in text
    quoted = text.split("Histogram bucket bounds only")[1]
    assert not re.search(r"\d(\.\d+)?x", quoted)  # no "33.33x" after the bounds
    assert "No measurable queueing" not in text


def test_impact_quotes_values_with_their_units_as_the_tables_do() -> None:
    hurting = (Compared("queue_wait_p95_ms", 1234.5, 12.25), Compared("kv_usage_max", 0.97, 0.5))
    text = phrases.hot_summary(replace(COUNT, hurting=hurting))
    assert (
        "Impact against its peers: queue wait p95 1,234 ms vs 12.2 ms, KV usage (peak) 97% vs 50%."
    ) in text
    assert fmt.value("queue_wait_p95_ms", 1234.5) == "1,234"  # the table's figure, unit apart


def test_saturation_with_linked_unplaced_requests_recomputes_the_ratio() -> None:
    sat = SaturationFacts(
        ceiling=32.0,
        share=0.9,
        queue_growing=True,
        lower_bound="unplaced",
        unplaced_per_window=4.25,
        count_ratio_with_unplaced=2.5,
    )
    text = phrases.saturation_sentence(replace(COUNT, saturation=sat))
    assert text == (
        "It sits at its batch ceiling (about 32 running) with a growing queue in 90% "
        "of the judged windows; 4.2 requests per window of its instance could not "
        "be placed on a DP rank and, as it is the only saturated rank, most likely "
        "wait here: counting them, it gets 2.50x the requests of its peers."
    )
    lower = phrases.saturation_sentence(
        replace(
            COUNT, saturation=replace(sat, unplaced_per_window=math.nan, lower_bound="finished")
        )
    )
    assert (
        "requests are counted when they finish, so its request ratio (2.20x) is a lower "
        "bound" in lower
    )


def test_kv_shortage_says_each_symptom_with_its_figure_in_order() -> None:
    k = KvShortageFacts(
        unit="r1",
        symptoms=("kv_high", "batch_at_ceiling", "preemptions"),
        kv_peak=0.99,
        free_blocks_min=10.0,
        free_blocks_capacity=900.0,
        batch_ceiling=31.6,
        saturated_share=0.75,
        alloc_free_ratio=math.nan,
        preemptions=1200.0,
        waiting_growth_per_window=math.nan,
    )
    text = phrases.kv_summary(k)
    assert text.startswith(
        "r1 is short of KV blocks: free KV blocks fall to 10 (of up to 900 "
        "free); its batch stays at its ceiling (~31.6 running) with requests "
        "waiting in 75% of the windows; 1,200 requests were preempted"
    )
    by_peak = phrases.kv_summary(replace(k, free_blocks_capacity=math.nan, symptoms=("kv_high",)))
    assert "KV usage peaks at 99%." in by_peak


def test_starved_and_stalled_summaries() -> None:
    assert phrases.starved_summary(StarvedFacts((("a", 0.9), ("b", 1.0)))).startswith(
        "a (90% of windows), b (100% of windows) received almost no traffic"
    )
    stall = StallFacts("d", 40.4, 0.0, "steps", 0.95, 20, 19)
    assert phrases.stall_summary(stall).startswith(
        "d is stalled: it holds 40 requests (running + waiting) on average but made 0.0 "
        "scheduling steps per window in 95% of its 20 measured windows (19 in a row)."
    )


def test_every_note_code_has_words_and_a_source_line_passes_through() -> None:
    assert set(note_phrases._NOTES) == set(NoteCode)
    assert phrases.note(Note.text("b: batch.csv missing")) == "b: batch.csv missing"
    idle = Note(NoteCode.NEAR_IDLE, {"requests": 82.0, "min_requests": 100})
    assert phrases.note(idle) == (
        "near-idle service: 82 requests in the range (finished or "
        "held at its end), fewer than the 100 needed to call it "
        "imbalanced"
    )
    nested = Note(NoteCode.SKEW_NOT_JUDGED, {"reason": idle})
    assert phrases.note(nested).startswith("skew between the other units not judged: near-idle")
    assert nested.to_dict() == {
        "code": "skew_not_judged",
        "reason": {"code": "near_idle", "requests": 82.0, "min_requests": 100},
    }


def test_every_cause_has_words_and_its_actions_are_said_once_most_likely_first() -> None:
    assert list(causes.WORDS) == list(Cause)
    assert all(w.title and w.actions for w in causes.WORDS.values())
    weights = causes.WORDS[Cause.ROUTING_WEIGHTS].actions
    sticky = causes.WORDS[Cause.STICKY_SESSIONS].actions
    ranked = [Cause.STICKY_SESSIONS, Cause.ROUTING_WEIGHTS, Cause.STICKY_SESSIONS]
    assert causes.actions(ranked) == sticky + weights


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_any_count_ratio_is_printed_by_the_one_ratio_formatter(r: float) -> None:
    text = phrases.hot_summary(replace(COUNT, count_ratio=r))
    assert f"{fmt.ratio(r, missing='n/a')} the requests of its peers" in text
    assert "nan" not in text and "inf" not in text


CLASSIFY_KEYS = (
    "requests_per_s",
    "prompt_tokens_per_request",
    "generation_tokens_per_request",
    "cost_us_per_token",
    "e2e_mean_ms",
    "queue_wait_mean_ms",
    "ttft_mean_ms",
)
_summary = st.fixed_dictionaries(
    {k: st.one_of(st.just(math.nan), st.floats(0.1, 1e4)) for k in CLASSIFY_KEYS}
)
_LOAD_ONLY = {
    "requests_per_s": 5.0,
    "prompt_tokens_per_request": 100.0,
    "generation_tokens_per_request": 50.0,
}


@given(_summary, _summary)
@example(_LOAD_ONLY, _LOAD_ONLY)  # equal load, no speed measured at all
def test_every_capability_basis_the_analysis_names_has_words(
    hot: dict[str, float], ref: dict[str, float]
) -> None:
    basis = classify(hot, ref, DEFAULT_THRESHOLDS).capability_basis
    assert basis in phrases.CAPABILITY_BASIS


def test_a_report_says_what_its_facts_hold() -> None:
    """End to end: the analysis fills facts, the JSON carries both them and the sentence."""
    report = diagnose_frame(
        make_frame({"a": Spec(rate=44.0), "b": Spec(), "c": Spec(), "d": Spec()})
    )
    (f,) = report.findings
    assert isinstance(f.facts, HotFacts) and f.facts.kind == "count"
    doc = finding_document(f)
    assert doc["facts"]["type"] == "hot"
    assert doc["facts"]["count_ratio"] == doc["evidence"]["count_ratio"]  # one number, twice
    assert doc["summary"] == phrases.finding_summary(f.facts, f.context)
    assert f"{fmt.ratio(f.facts.count_ratio)} the requests" in doc["summary"]


def test_the_analysis_writes_no_prose_and_formats_no_number() -> None:
    """Sentences and digits belong to the report layer; the analysis hands over facts."""
    analysis = Path(__file__).parents[2] / "src" / "skewscope" / "analysis"
    spec = re.compile(r"\{[^{}]*:[^{}]*[0-9][fge%][^{}]*\}")  # e.g. {v:.2f} {s:.0%}
    offenders = [
        f"{p.name}:{i}"
        for p in sorted(analysis.glob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if spec.search(line)
    ]
    assert offenders == []


def test_the_report_layer_formats_numbers_only_in_fmt() -> None:
    """One formatter per kind of value: no format spec in a report module or template but
    ``fmt.py`` (a CSS width in a template is not a figure)."""
    report = Path(__file__).parents[2] / "src" / "skewscope" / "report"
    spec = re.compile(r"\{[^{}]*:[+,]?(\.[0-9]+)?[fge%,]\}|\{\{[^}]*format")
    files = [*sorted(report.glob("*.py")), *sorted((report / "templates").glob("*.j2"))]
    offenders = [
        f"{p.name}:{i}"
        for p in files
        if p.name != "fmt.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if spec.search(line)
    ]
    assert offenders == []


def test_the_schemas_name_every_note_code() -> None:
    """A code added to NoteCode must reach the JSON contract (and the compare codes only its)."""
    import json

    schema = Path(__file__).parents[2] / "src" / "skewscope" / "report" / "schema"
    report = json.loads((schema / "report.schema.json").read_text())
    compare = json.loads((schema / "compare.schema.json").read_text())
    in_report = set(report["$defs"]["note"]["properties"]["code"]["enum"])
    in_compare = set(compare["properties"]["note_facts"]["items"]["properties"]["code"]["enum"])
    assert in_report | in_compare == {str(c) for c in NoteCode}
    assert not in_report & in_compare


def test_the_price_of_dp_skew_is_said_in_the_reading_that_holds() -> None:
    """Lockstep (MoE / DP attention): ranks wait for the busiest; plain DP of a dense model:
    they do not, the share is capacity kept idle; not known: both, and how to say which."""
    base = {
        "instance": "i",
        "ranks": 4,
        "basis": "busy_ms",
        "idle_share": 0.25,
        "worst_window_idle_share": 0.5,
        "windows": 12,
        "device_hours": 1.5,
        "devices_per_rank": 1.0,
        "steps": None,
    }
    said = {
        ls: phrases.note(Note(NoteCode.SKEW_PRICE, {**base, "lockstep": ls}))
        for ls in (True, False, None)
    }
    assert (
        "step in lockstep (MoE expert parallelism / DP attention), so they idle 25%" in (said[True])
    )
    assert "do not step in lockstep (plain DP), so none waits" in said[False]
    assert "waiting for the busiest" not in said[False] and "capacity idle" in said[False]
    assert said[None].startswith("price of DP skew on i: if its 4 ranks step in lockstep")
    assert "--lockstep yes|no" in said[None]
