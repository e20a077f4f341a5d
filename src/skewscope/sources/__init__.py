"""Sources: each turns one kind of input into ``skewscope.frame.Evidence``.

``load_profiler`` is resolved lazily so importing the package does not import polars.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_profiler"]


def __getattr__(name: str) -> Any:
    if name == "load_profiler":
        from skewscope.sources.profiler import load_profiler

        return load_profiler
    raise AttributeError(name)
