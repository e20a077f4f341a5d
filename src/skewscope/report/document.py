"""The Report in words: the sentences a report reads as (a finding's summary, the notes, the
headline, the footer) and the JSON documents that carry them beside their facts
(docs/json-report.md: ``report_document``, ``compare_document``).

The models (``model.py``, ``comparison.py``) are data only; this is the one place they meet
``phrases.py``, so the terminal, Markdown, HTML and JSON forms say the same thing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from skewscope.catalogue import Kind, Verdict, kind_title
from skewscope.report import causes, fmt, gateway_text, phrases
from skewscope.report.comparison import Comparison
from skewscope.report.facts import HotFacts, Note, clean, facts_dict
from skewscope.report.model import SCHEMA_VERSION, Finding, Report


def lines(notes: Iterable[Note]) -> tuple[str, ...]:
    """Notes in plain words (a report's ``notes``, ``transient``; a comparison's ``notes``)."""
    return tuple(phrases.note(n) for n in notes)


def summary(f: Finding) -> str:
    """The finding in plain words, phrased from its facts and context."""
    return phrases.finding_summary(f.facts, f.context)


def cause_titles(f: Finding) -> tuple[str, ...]:
    """The finding's root causes in words, most likely first."""
    return tuple(causes.title(c) for c in f.root_causes)


def actions(f: Finding) -> tuple[str, ...]:
    """What to do about the finding: its causes' actions, the most likely cause's first."""
    return causes.actions(f.root_causes)


def headline(report: Report) -> str:
    """One sentence that answers 'is there a hot unit?'."""
    if report.verdict == Verdict.INSUFFICIENT_DATA:  # the first note says why
        return "Insufficient data: " + (
            fmt.clean(phrases.note(report.notes[0])) if report.notes else "nothing to judge"
        )
    if report.verdict == Verdict.BALANCED:
        return f"Balanced: no persistent hot {report.level} unit across {len(report.units)} units."
    findings = report.all_findings()
    kinds = sorted({f.kind for f in findings if f.kind != Kind.KV_SHORTAGE})
    short = [u for f in findings if f.kind == Kind.KV_SHORTAGE for u in f.units]
    parts = []
    if report.hot_units:
        parts.append("hot " + fmt.names(report.hot_units))
    if report.starved_units:
        parts.append("starved " + fmt.names(report.starved_units))
    if short:
        parts.append("KV block shortage on " + fmt.names(tuple(dict.fromkeys(short))))
    return (
        f"Imbalanced at {report.level} level: {'; '.join(parts) or 'see findings'} "
        f"({' + '.join(kind_title(k) for k in kinds)})."
    )


def footer_notes(report: Report) -> list[str]:
    """Notes shown under a report: what was missing, placed or estimated."""
    notes = [fmt.clean(n) for n in lines(report.notes)]
    if report.placed_share is not None:
        notes.append(
            f"{fmt.pct(report.placed_share, digits=1)} of requests were placed on a DP rank"
        )
    if report.missing:
        notes.append("missing: " + fmt.names(report.missing))
    notes.extend(fmt.clean(n) for n in gateway_text.gateway_notes(report.gateway))
    return notes  # the online sources already note that percentiles are bucket estimates


def finding_document(f: Finding) -> dict[str, Any]:
    """One finding of the JSON report: its summary beside its facts."""
    evidence = f.evidence
    if isinstance(f.facts, HotFacts):  # its worded fields, as lines (their facts beside)
        evidence = {
            **evidence,
            "capability_basis": phrases.CAPABILITY_BASIS[f.facts.capability_basis],
            "resource": [phrases.note(n) for n in f.facts.resource],
        }
    return clean(  # type: ignore[no-any-return]
        {
            "kind": f.kind,
            "weight_side": f.weight_side,
            "units": list(f.units),
            "reference_units": list(f.reference_units),
            "severity": f.severity,
            "summary": summary(f),
            "facts": facts_dict(f.facts),
            "context": [n.to_dict() for n in f.context],
            "root_causes": [{"key": c, "title": causes.title(c)} for c in f.root_causes],
            "actions": list(actions(f)),
            "evidence": evidence,
            "side_by_side": [row._asdict() for row in f.side_by_side],
            "timeline": f.timeline.to_dict() if f.timeline else None,
            "peer_bands": {k: b.to_dict() for k, b in f.peer_bands.items()},
        }
    )


def report_document(r: Report) -> dict[str, Any]:
    """The JSON report (``skewscope diagnose --format json``, ``schema/report.schema.json``):
    every figure of the Report, each note as a sentence (``notes``, ``transient``) beside its
    facts (``note_facts``, ``transient_facts``); drill-downs nested the same way."""
    return clean(  # type: ignore[no-any-return]
        {
            "schema_version": SCHEMA_VERSION,
            "verdict": r.verdict,
            "level": r.level,
            "source": r.source,
            "window_s": r.window_s,
            "windows": r.windows,
            "start_s": r.start_s,
            "end_s": r.end_s,
            "hot_units": list(r.hot_units),
            "starved_units": list(r.starved_units),
            "units": [u.to_dict() for u in r.units],
            "findings": [finding_document(f) for f in r.findings],
            "transient": list(lines(r.transient)),
            "transient_facts": [n.to_dict() for n in r.transient],
            "episodes": [e.to_dict() for e in r.episodes],
            "notes": list(lines(r.notes)),
            "note_facts": [n.to_dict() for n in r.notes],
            "missing": list(r.missing),
            "placed_share": r.placed_share,
            "aliases": r.aliases,
            "drilldown": [report_document(d) for d in r.drilldown],
            "series": r.series.to_dict() if r.series else None,
            "gateway": r.gateway.to_dict() if r.gateway else None,
            "skew_price": [p.to_dict() for p in r.skew_price],
            "fleet": r.fleet.to_dict() if r.fleet else None,
            "thresholds": r.thresholds,
            "thresholds_overridden": list(r.thresholds_overridden),
        }
    )


def compare_document(c: Comparison) -> dict[str, Any]:
    """The JSON compare report (``skewscope compare --format json``,
    ``schema/compare.schema.json``): the figures, each note as a sentence beside its facts."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "compare",
        "verdict": c.verdict,
        "before": c.before.to_dict(),
        "after": c.after.to_dict(),
        "focus_units": list(c.focus_units),
        "signals": [s.to_dict() for s in c.signals],
        "gateway": [g.to_dict() for g in c.gateway],
        "notes": list(lines(c.notes)),
        "note_facts": [n.to_dict() for n in c.notes],
    }
