"""Renderers under narrow terminals and hostile names: every number of the report appears whole
at 80, 100 and 140 columns; control sequences and markup in unit ids, notes and paths never reach
the terminal raw; Markdown cells stay cells."""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from pathlib import Path

import pytest

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose, diagnose_frame
from skewscope.report import fmt, markdown, terminal
from skewscope.report.document import report_document
from skewscope.report.facts import Note
from skewscope.report.model import Report
from skewscope.sources.profiler import load_profiler

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster-skew"
HOSTILE = "evil\x1b]0;pwned\x07|x\n[/]\x1b[2J*y*"


@cache
def _example() -> Report:
    return diagnose(load_profiler([str(EXAMPLE)]), level="auto")


@cache
def _long_ids() -> Report:
    ids = [f"10.200.{k}.17:8000-prefill-node-{k}/dp{k}" for k in range(4)]
    return diagnose_frame(
        make_frame({u: Spec(rate=44.0) if k == 1 else Spec() for k, u in enumerate(ids)})
    )


@cache
def _very_long_ids() -> Report:
    ids = [f"{'very-long-service-name-' * 3}{k}" for k in range(3)]
    return diagnose_frame(
        make_frame({u: Spec(rate=44.0) if k == 0 else Spec() for k, u in enumerate(ids)})
    )


REPORTS = {"example": _example, "long-ids": _long_ids, "very-long-ids": _very_long_ids}


def _all_reports(report: Report) -> list[Report]:
    out = [report]
    for d in report.drilldown:
        out.extend(_all_reports(d))
    return out


def _numbers(report: Report) -> set[str]:
    """Every number the report data puts on screen, formatted as the renderers format it."""
    want: set[str] = set()
    for r in _all_reports(report):
        for u in r.units:
            want.add(fmt.hot_share(u))
            want.update(
                fmt.value(k, u.metrics.get(k), u.bounds.get(k, "")) for k in fmt.UNIT_COLUMNS
            )
        for f in r.findings:
            for row in f.side_by_side:
                hot = fmt.value(row.metric, row.hot, row.hot_bound)
                ref = fmt.value(row.metric, row.reference, row.reference_bound)
                if hot == "—" and ref == "—":
                    continue
                want.update({hot, ref, fmt.ratio(row.ratio)})
    return want


@pytest.mark.parametrize("width", [80, 100, 140])
@pytest.mark.parametrize("name", sorted(REPORTS))
def test_every_number_appears_uncut_at_common_widths(name: str, width: int) -> None:
    report = REPORTS[name]()
    text = terminal.render_text(report, width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    tokens = set(re.split(r"[\s│┃║|]+", text))
    missing = sorted(_numbers(report) - tokens)
    assert not missing, f"cut or missing at {width} columns: {missing}"
    for r in _all_reports(report):  # unit ids stay whole too
        for u in r.units:
            assert u.unit in text
    assert "…" not in text


def test_narrow_terminal_uses_stacked_units_when_an_id_fills_the_line() -> None:
    text = terminal.render_text(_very_long_ids(), width=80)
    assert "┃ unit" not in text  # no per-unit table: one block per unit
    assert "  queue p95 ms" in text


def _hostile_report() -> Report:
    base = diagnose_frame(make_frame({"a": Spec(rate=44.0), "b": Spec(), "c": Spec()}))
    units = tuple(
        dataclasses.replace(u, unit=HOSTILE if u.unit == "a" else u.unit) for u in base.units
    )
    findings = tuple(
        dataclasses.replace(f, units=(HOSTILE,), facts=dataclasses.replace(f.facts, unit=HOSTILE))
        for f in base.findings
    )
    return dataclasses.replace(
        base,
        units=units,
        findings=findings,
        hot_units=(HOSTILE,),
        source=HOSTILE,
        transient=(Note.text(HOSTILE),),
        notes=(Note.text(f"folder {HOSTILE}: note"),),
    )


@pytest.mark.parametrize("color", [False, True])
def test_terminal_escapes_control_sequences_and_markup(color: bool) -> None:
    text = terminal.render_text(_hostile_report(), width=100, color=color)
    assert "\x1b]" not in text and "\x07" not in text and "\x1b[2J" not in text
    if not color:
        assert "\x1b" not in text
    assert "evil\\x1b]0;pwned\\x07|x [/]\\x1b[2J*y*" in text  # escaped, whole, markup literal


def test_markdown_escapes_pipes_newlines_and_markup_in_cells() -> None:
    md = markdown.render(_hostile_report())
    assert "\x1b" not in md and "\x07" not in md
    table_rows = [ln for ln in md.splitlines() if ln.startswith("| ")]
    header_cells = None
    for ln in table_rows:
        cells = re.split(r"(?<!\\)\|", ln.strip())[1:-1]
        if ln.startswith("| metric") or ln.startswith("| unit"):
            header_cells = len(cells)
        assert len(cells) == header_cells, ln  # an escaped | does not add a cell
    row = next(ln for ln in table_rows if "evil" in ln)
    assert "evil\\\\x1b\\]0;pwned\\\\x07\\|x \\[/\\]" in row
    assert "\\*y\\*" in row
    assert "- folder evil" in md  # the note is one bullet line


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_table_ratios_are_the_json_ratios(name: str) -> None:
    report = REPORTS[name]()
    doc = report_document(report)
    for r, d in zip(_all_reports(report), _all_dicts(doc), strict=True):
        for f, jf in zip(r.findings, d["findings"], strict=True):
            for row, jrow in zip(f.side_by_side, jf["side_by_side"], strict=True):
                j = jrow["ratio"]
                shown = fmt.ratio(float(j) if j is not None else float("nan"))
                assert fmt.ratio(row.ratio) == shown
    # the table formats the JSON's (rounded) number, never a differently rounded one
    assert fmt.ratio(2.0049999999) == f"{round(2.0049999999, 6):.2f}x"


def _all_dicts(doc: dict[str, object]) -> list[dict[str, object]]:
    out = [doc]
    for d in doc["drilldown"]:  # type: ignore[attr-defined]
        out.extend(_all_dicts(d))
    return out
