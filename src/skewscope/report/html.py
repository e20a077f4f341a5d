"""Self-contained HTML report: one file that opens offline.

The page inlines its styles, its script and the uPlot charting library (vendored from the npm
package ``uplot``, see ``vendor/README.md``), and embeds the JSON report
(``document.report_document``) that the charts are drawn from, so nothing is fetched when it is
viewed. Every label, unit name
and path goes through jinja2's autoescape or, in the script, ``textContent``; the embedded JSON
escapes ``<``, ``>`` and ``&`` so no value can close its ``<script>`` element.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from skewscope.catalogue import SERIES
from skewscope.report import compare_text, document, fmt
from skewscope.report.comparison import Comparison
from skewscope.report.model import Report

VENDOR_JS = "uPlot.iife.min.js"
VENDOR_CSS = "uPlot.min.css"


def script_json(value: Any) -> Markup:
    """JSON safe inside a ``<script>`` element: no ``</script>``, no HTML comment openers."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for raw, esc in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, esc)
    return Markup(text)


@cache
def _inline(folder: str, name: str) -> Markup:
    """A package file to inline as a script or style element."""
    text = resources.files("skewscope.report").joinpath(folder, name).read_text("utf-8")
    closing = "</script" if name.endswith(".js") else "</style"
    if closing in text.lower():  # would end the inline element early
        raise ValueError(f"{folder}/{name} contains {closing}")
    return Markup(text)


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("skewscope.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.tests["finite"] = lambda v: isinstance(v, int | float) and math.isfinite(v)
    env.globals.update(
        fmt=fmt,
        document=document,
        series_catalogue=SERIES,
        series_meta=script_json({m.key: {"label": m.label, "unit": m.unit} for m in SERIES}),
        uplot_js=_inline("vendor", VENDOR_JS),
        uplot_css=_inline("vendor", VENDOR_CSS),
        charts_js=_inline("templates", "charts.js"),
        whatif_js=_inline("templates", "whatif.js"),
        compare_js=_inline("templates", "compare.js"),
    )
    return env


def page(template: str, title: str, doc: dict[str, Any], **context: Any) -> str:
    """Render one page template with the embedded JSON document."""
    return (
        environment()
        .get_template(template)
        .render(title=title, doc_json=script_json(doc), **context)
    )


def render_text(report: Report, *, width: int | None = None, color: bool = False) -> str:
    return page(
        "report.html.j2", "skewscope report", document.report_document(report), report=report
    )


def render_comparison(c: Comparison, *, width: int | None = None, color: bool = False) -> str:
    return page(
        "compare.html.j2", "skewscope compare", document.compare_document(c), c=c, ct=compare_text
    )
