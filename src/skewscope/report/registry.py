"""Renderer registry: the CLI picks a renderer by name or by the output file's extension.

A new format plugs in by adding one entry to ``RENDERERS``; nothing else names the formats.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from skewscope.report.comparison import Comparison
    from skewscope.report.model import Report


class RenderFn(Protocol):
    def __call__(self, report: Report, *, width: int | None = None, color: bool = False) -> str: ...


@dataclass(frozen=True)
class Renderer:
    """A report format. ``module`` exposes ``render_text(report, *, width, color) -> str``
    (width and color matter to the terminal format only) and ``compare_module`` (default: the
    same) ``render_comparison(comparison, *, width, color) -> str`` for ``skewscope compare``.
    Modules are imported only when used, so rich and jinja2 stay off the ``--help`` path."""

    name: str
    extensions: tuple[str, ...]
    module: str
    compare_module: str = ""

    def render(
        self, doc: Report | Comparison, *, width: int | None = None, color: bool = False
    ) -> str:
        from skewscope.report.comparison import Comparison

        if isinstance(doc, Comparison):
            module = importlib.import_module(self.compare_module or self.module)
            return str(module.render_comparison(doc, width=width, color=color))
        fn: RenderFn = importlib.import_module(self.module).render_text
        return fn(doc, width=width, color=color)


RENDERERS: tuple[Renderer, ...] = (
    Renderer("terminal", (".txt",), "skewscope.report.terminal", "skewscope.report.compare_text"),
    Renderer("markdown", (".md", ".markdown"), "skewscope.report.markdown"),
    Renderer("json", (".json",), "skewscope.report.jsonout"),
    Renderer("html", (".html", ".htm"), "skewscope.report.html"),
)
DEFAULT_RENDERER = "terminal"


def names() -> tuple[str, ...]:
    return tuple(r.name for r in RENDERERS)


def by_name(name: str) -> Renderer:
    for r in RENDERERS:
        if r.name == name:
            return r
    raise KeyError(name)


def for_path(path: str | Path) -> Renderer | None:
    """The renderer a file name asks for, or None when its extension names none."""
    suffix = Path(path).suffix.lower()
    for r in RENDERERS:
        if suffix in r.extensions:
            return r
    return None
