"""A TOML table read against dataclass fields, with one-line ``SimulationError`` messages that
name the file and the dotted key (the scenario reader's ground: ``sim/scenario.py``)."""

from __future__ import annotations

import math
import types
import typing
from dataclasses import MISSING, fields
from typing import Any, TypeVar

from skewscope.errors import SimulationError

T = TypeVar("T")


class Table:
    """A TOML table that remembers its file and dotted path, for one-line errors."""

    def __init__(self, data: dict[str, Any], src: str, path: str = "") -> None:
        self.data = data
        self.src = src
        self.path = path
        self.used: set[str] = set()

    def key(self, k: str) -> str:
        return f"{self.path}.{k}" if self.path else k

    def error(self, k: str, msg: str) -> SimulationError:
        return SimulationError(f"{self.src}: key '{self.key(k)}': {msg}")

    def has(self, k: str) -> bool:
        return k in self.data

    def get(self, k: str, typ: Any, default: Any = MISSING) -> Any:
        self.used.add(k)
        if k not in self.data:
            if default is MISSING:
                raise self.error(k, "required key is missing")
            return default
        return _coerce(self, k, self.data[k], typ)

    def table(self, k: str) -> Table | None:
        self.used.add(k)
        v = self.data.get(k)
        if v is None:
            return None
        if not isinstance(v, dict):
            raise self.error(k, f"expected a table, got {type(v).__name__}")
        return Table(v, self.src, self.key(k))

    def tables(self, k: str) -> list[Table]:
        self.used.add(k)
        v = self.data.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            raise self.error(k, "expected an array of tables ([[...]])")
        return [Table(x, self.src, f"{self.key(k)}[{n}]") for n, x in enumerate(v)]

    def done(self) -> None:
        extra = sorted(set(self.data) - self.used)
        if extra:
            raise self.error(extra[0], "unknown key")


INT64 = (-(2**63), 2**63 - 1)  # what a TOML integer may be (and a seed, as simulate --seed)


def _coerce(tbl: Table, k: str, v: Any, typ: Any) -> Any:
    """Check a TOML value against a dataclass field type (ints are accepted for floats)."""
    origin = typing.get_origin(typ)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(typ) if a is not type(None)]
        return _coerce(tbl, k, v, args[0])
    if origin is tuple:
        if not isinstance(v, list):
            raise tbl.error(k, f"expected an array, got {type(v).__name__}")
        return tuple(_coerce(tbl, k, x, typing.get_args(typ)[0]) for x in v)
    if isinstance(v, int) and not isinstance(v, bool) and not INT64[0] <= v <= INT64[1]:
        # TOML integers are 64-bit; a larger one is no setting (and no float: 10**400)
        raise tbl.error(k, f"expected a 64-bit integer, got a {len(str(abs(v)))}-digit number")
    if typ is bool:
        ok = isinstance(v, bool)
    elif typ is int:
        ok = isinstance(v, int) and not isinstance(v, bool)
    elif typ is float:
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        v = float(v) if ok else v
        if ok and not math.isfinite(v):
            raise tbl.error(k, f"expected a finite number, got {v!r}")
    elif typ is str:
        ok = isinstance(v, str)
        bad = next((c for c in v if not c.isprintable()), None) if ok else None
        if bad is not None:  # a name is printed: an ESC sequence would drive the terminal
            raise tbl.error(
                k,
                f"expected printable text, got a control character "
                f"{bad.encode('unicode_escape').decode()}",
            )
    else:  # pragma: no cover - only the scalar types above appear in specs
        raise tbl.error(k, f"unsupported field type {typ}")
    if not ok:
        raise tbl.error(k, f"expected {typ.__name__}, got {type(v).__name__} {v!r}")
    return v


def scalars(tbl: Table, cls: type[T], base: T | None = None) -> T:
    """Read the scalar fields of dataclass ``cls`` from ``tbl``; unset fields come from ``base``
    (or the dataclass default)."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if base is not None:
            default = getattr(base, f.name)
        elif f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        kwargs[f.name] = tbl.get(f.name, hints[f.name], default)
    return cls(**kwargs)


def require(tbl: Table, k: str, ok: bool, msg: str) -> None:
    if not ok:
        raise tbl.error(k, msg)
