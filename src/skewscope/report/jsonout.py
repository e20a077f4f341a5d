"""JSON report: exactly ``document.report_document()`` / ``compare_document()`` (contract in
docs/json-report.md)."""

from __future__ import annotations

import json

from skewscope.report.comparison import Comparison
from skewscope.report.document import compare_document, report_document
from skewscope.report.model import Report


def render(report: Report | Comparison) -> str:
    doc = compare_document(report) if isinstance(report, Comparison) else report_document(report)
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)


def render_text(report: Report, *, width: int | None = None, color: bool = False) -> str:
    return render(report) + "\n"


def render_comparison(c: Comparison, *, width: int | None = None, color: bool = False) -> str:
    return render(c) + "\n"
