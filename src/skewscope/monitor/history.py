"""Incident history in SQL: SQLite by default (one file, stdlib), Postgres for a team
(``postgresql://...`` URL, psycopg 3 from the ``postgres`` extra).

One table, ``skewscope_incidents``; times are epoch seconds. The same SQL serves both engines
(only the id column and the parameter marker differ). The store trusts nothing it reads: the
table's columns are checked on open (a table of the same name with other columns is refused in
one line, exit 3; a table of the previous version gains the ``writer`` and ``lease_s`` columns),
and each row is decoded field by field (a bad row is reported and skipped, never a traceback).

Incidents are owned by the writer (one ``watch --save`` process) that opened them: a writer
renews a lease on its open incidents after every run, and only open incidents whose lease ran
out (their writer died) are closed by another writer, at their last sighting. Two watches on
one history therefore never close each other's incidents.
"""

from __future__ import annotations

import math
import os
import socket
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from skewscope.errors import InputError, SourceError, UsageError, one_line
from skewscope.monitor.incidents import STOPPED, Incident
from skewscope.sources.auth import redact_url

TABLE = "skewscope_incidents"
COLUMNS = tuple(f.name for f in fields(Incident) if f.name != "id")
LEASE = "lease_s"  # epoch s by which the writer renews its open incidents; store-only
_TYPES = {
    "unit": "TEXT NOT NULL",
    "level": "TEXT NOT NULL",
    "kind": "TEXT NOT NULL",
    "onset_s": "DOUBLE PRECISION NOT NULL",
    "last_seen_s": "DOUBLE PRECISION NOT NULL",
    "peak_ratio": "DOUBLE PRECISION",
    "summary": "TEXT NOT NULL",
    "source": "TEXT NOT NULL",
    "end_s": "DOUBLE PRECISION",
    "end_reason": "TEXT NOT NULL",
    "writer": "TEXT NOT NULL DEFAULT ''",
    "confirmed_s": "DOUBLE PRECISION",
    LEASE: "DOUBLE PRECISION",
}
# Columns added since the first version; an older table gains them on open (its rows have no
# writer and no lease: the next writer closes the ones left open, as that version did).
MIGRATED = ("writer", "confirmed_s", LEASE)
POSTGRES_SCHEMES = ("postgres://", "postgresql://")
SQL_INT_MAX = 2**63 - 1  # ids and LIMIT are 64-bit signed integers in SQLite and Postgres
# A writer renews its lease after every run: it runs out LEASE_RUNS intervals (plus a slack for
# a slow run) after the last renewal. Until then no other writer touches its incidents.
LEASE_RUNS = 3
LEASE_SLACK_S = 120.0

_TEXT = ("unit", "level", "kind")  # must be non-empty text
_OPTIONAL_TEXT = ("summary", "source", "end_reason", "writer")  # NULL reads as ""
_TIMES = ("onset_s", "last_seen_s")  # must be finite numbers
_OPTIONAL_NUMBERS = ("peak_ratio", "end_s", "confirmed_s")  # NULL reads as "none"


_PG_FAMILY = {
    t: "number" for t in ("double precision", "real", "numeric", "integer", "bigint", "smallint")
} | {t: "text" for t in ("text", "character varying", "character")}


def _sqlite_family(declared: str) -> str:
    """SQLite's type affinity of a declared type, as a family: a TEXT column keeps '100.0' as
    text, a NUMERIC one turns the text '8000' into a number; no type keeps what was written."""
    t = declared.upper()
    if "INT" in t or any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "number"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "text"
    return "any" if not t or "BLOB" in t else "number"


def default_path() -> Path:
    """``$SKEWSCOPE_HISTORY``, else ``$XDG_STATE_HOME/skewscope/history.sqlite``, else
    ``~/.local/state/skewscope/history.sqlite``."""
    if os.environ.get("SKEWSCOPE_HISTORY"):
        return Path(os.environ["SKEWSCOPE_HISTORY"])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "skewscope" / "history.sqlite"


def new_writer_id() -> str:
    """Unique per watch process: host, pid and a random part (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class BadRow(Exception):
    """A stored row that is not an incident: which row, which column, what it held."""

    def __init__(self, row_id: object, column: str, problem: str) -> None:
        super().__init__(row_id, column, problem)
        self.row_id, self.column, self.problem = row_id, column, problem

    def __str__(self) -> str:
        return f"row id {one_line(repr(self.row_id), 60)}: {self.column}: {self.problem}"


def _shown(v: object) -> str:
    return "NULL" if v is None else one_line(repr(v), 60)


def _number(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        return float(v)
    except OverflowError:  # an integer beyond a double
        return None


def decode_row(values: dict[str, object]) -> Incident:
    """One stored row as an Incident; BadRow names the first field that is not what the store
    writes. A NULL peak ratio (a stalled unit has none) reads as NaN."""
    row_id = values.get("id")
    if isinstance(row_id, bool) or not isinstance(row_id, int):
        raise BadRow(row_id, "id", f"expected an integer, got {_shown(row_id)}")
    out: dict[str, Any] = {}
    for c in _TEXT:
        v = values[c]
        if not isinstance(v, str) or not v:
            raise BadRow(row_id, c, f"expected non-empty text, got {_shown(v)}")
        out[c] = v
    for c in _OPTIONAL_TEXT:
        v = values[c]
        if v is not None and not isinstance(v, str):
            raise BadRow(row_id, c, f"expected text, got {_shown(v)}")
        out[c] = v or ""
    for c in _TIMES:
        n = _number(values[c])
        if n is None or not math.isfinite(n):
            raise BadRow(row_id, c, f"expected a time in epoch seconds, got {_shown(values[c])}")
        out[c] = n
    for c in _OPTIONAL_NUMBERS:
        v = values[c]
        n = None if v is None else _number(v)
        if v is not None and n is None:
            raise BadRow(row_id, c, f"expected a number or NULL, got {_shown(v)}")
        out[c] = n
    if out["peak_ratio"] is None:
        out["peak_ratio"] = math.nan
    for c in ("end_s", "confirmed_s"):
        if out[c] is not None and not math.isfinite(out[c]):
            raise BadRow(row_id, c, f"expected a time in epoch seconds, got {out[c]}")
    return Incident(**out, id=row_id)


class HistoryStore:
    """Incidents table over a DB-API connection (sqlite3 or psycopg). ``problems`` collects the
    rows the last read skipped (BadRow), for the caller to report."""

    def __init__(
        self,
        conn: Any,
        *,
        postgres: bool,
        shown: str,
        writer: str | None = None,
        db_errors: tuple[type[BaseException], ...] = (sqlite3.Error,),
    ) -> None:
        self.conn = conn
        self.db_errors = db_errors  # the driver's errors: a read that fails is one line
        self.postgres = postgres
        self.shown = shown  # where, for messages (secrets redacted)
        self.writer = writer or new_writer_id()
        self.problems: list[BadRow] = []
        ident = "BIGSERIAL PRIMARY KEY" if postgres else "INTEGER PRIMARY KEY AUTOINCREMENT"
        cols = ", ".join(f"{c} {_TYPES[c]}" for c in (*COLUMNS, LEASE))
        self._exec(f"CREATE TABLE IF NOT EXISTS {TABLE} (id {ident}, {cols})")
        self._check_schema()
        self.conn.commit()

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if self.postgres:
            sql = sql.replace("?", "%s")
        cur = self.conn.cursor()
        cur.execute(sql, tuple(params))
        return cur

    def _columns(self) -> dict[str, str]:
        """Column name -> its type family: "number", "text" or "any" (SQLite without a type)."""
        if self.postgres:
            rows = self._exec(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = ? AND table_schema = current_schema()",
                (TABLE,),
            ).fetchall()
            return {str(r[0]): _PG_FAMILY.get(str(r[1]).lower(), str(r[1])) for r in rows}
        rows = self._exec(f"PRAGMA table_info({TABLE})").fetchall()
        return {str(r[1]): _sqlite_family(str(r[2] or "")) for r in rows}

    def _check_schema(self) -> None:
        """The table must hold exactly the columns this version writes, each of its type
        family (an older version's table gains the ``MIGRATED`` ones); anything else is
        refused before a row is touched."""
        have = self._columns()
        want = ("id", *COLUMNS, LEASE)
        where = f"history {self.shown}: table {TABLE}"
        extra = [c for c in have if c not in want]
        if extra:
            raise InputError(
                f"{where} has a column {one_line(extra[0], 80)!r} skewscope does "
                f"not write (expected {', '.join(want)}): not a skewscope history, "
                "or one from another version"
            )
        for c, family in have.items():
            need = "text" if c in (*_TEXT, *_OPTIONAL_TEXT) else "number"
            if family not in (need, "any"):
                raise InputError(
                    f"{where} has column {c!r} of type {one_line(family, 40)}, "
                    f"expected {need}: not a skewscope history"
                )
        missing = [c for c in want if c not in have]
        for c in missing:
            if c not in MIGRATED:
                raise InputError(
                    f"{where} has no column {c!r} (expected {', '.join(want)}): "
                    "not a skewscope history"
                )
        for c in missing:  # an older version's table
            self._exec(f"ALTER TABLE {TABLE} ADD COLUMN {c} {_TYPES[c]}")

    def save(self, incident: Incident, lease_until: float | None = None) -> Incident:
        """Insert a new incident or update a known one (this writer's); returns it with its
        id. ``lease_until``: the open incident's lease (``renew`` extends it)."""
        incident = replace(incident, writer=self.writer)
        values = tuple(_stored(getattr(incident, c)) for c in COLUMNS)
        lease = lease_until if incident.end_s is None else None
        if incident.id is None:
            marks = ", ".join("?" for _ in (*COLUMNS, LEASE))
            cur = self._exec(
                f"INSERT INTO {TABLE} ({', '.join((*COLUMNS, LEASE))}) VALUES ({marks}) "
                "RETURNING id",
                (*values, lease),
            )
            new_id = int(cur.fetchone()[0])
            self.conn.commit()
            return replace(incident, id=new_id)
        sets = ", ".join(f"{c} = ?" for c in (*COLUMNS, LEASE))
        self._exec(
            f"UPDATE {TABLE} SET {sets} WHERE id = ? AND writer = ?",
            (*values, lease, incident.id, self.writer),
        )
        self.conn.commit()
        return incident

    def renew(self, lease_until: float) -> None:
        """This writer is alive: its open incidents are not orphans before ``lease_until``."""
        self._exec(
            f"UPDATE {TABLE} SET {LEASE} = ? WHERE writer = ? AND end_s IS NULL",
            (lease_until, self.writer),
        )
        self.conn.commit()

    def close_orphans(self, now: float) -> int:
        """End the open incidents of writers that died (their lease ran out before ``now``, or
        they were written before leases existed) at their last sighting; another live writer's
        incidents are left alone."""
        try:
            cur = self._exec(
                f"UPDATE {TABLE} SET end_s = last_seen_s, end_reason = ? WHERE end_s IS NULL "
                f"AND writer <> ? AND ({LEASE} IS NULL OR {LEASE} < ?)",
                (STOPPED, self.writer, now),
            )
            self.conn.commit()
        except self.db_errors as e:  # at watch's start: one line, not a traceback
            raise InputError(
                f"history {self.shown}: cannot write to {TABLE}: {one_line(str(e))}"
            ) from None
        return max(0, int(cur.rowcount))

    def _rows(
        self, where: str = "", params: Sequence[Any] = (), limit: int | None = None
    ) -> list[Incident]:
        sql = f"SELECT {', '.join(COLUMNS)}, id FROM {TABLE} {where} ORDER BY onset_s DESC, id DESC"
        if limit is not None:
            sql += f" LIMIT {max(1, min(int(limit), SQL_INT_MAX))}"
        caught: tuple[type[BaseException], ...] = (*self.db_errors, ValueError, OverflowError)
        try:
            rows = self._exec(sql, params).fetchall()
        except caught as e:
            raise InputError(
                f"history {self.shown}: cannot read {TABLE}: {one_line(str(e))}"
            ) from None
        self.problems = []
        out = []
        for row in rows:
            try:
                out.append(decode_row({**dict(zip(COLUMNS, row[:-1], strict=True)), "id": row[-1]}))
            except BadRow as bad:
                self.problems.append(bad)
        return out

    def list(
        self, limit: int | None = None, unit: str | None = None, open_only: bool = False
    ) -> list[Incident]:
        """Newest first; rows that are not incidents are skipped into ``problems``."""
        clauses, params = [], []
        if unit:
            clauses.append("unit = ?")
            params.append(unit)
        if open_only:
            clauses.append("end_s IS NULL")
        where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        return self._rows(where, params, limit)

    def get(self, incident_id: int) -> Incident | None:
        """The incident, None when there is none; a stored row that is not one is an
        InputError naming the row and column."""
        if not 1 <= incident_id <= SQL_INT_MAX:
            return None
        rows = self._rows("WHERE id = ?", (incident_id,))
        if self.problems:
            raise InputError(f"history {self.shown}: {self.problems[0]}")
        return rows[0] if rows else None

    def close(self) -> None:
        self.conn.close()


def _stored(v: object) -> object:
    """NaN is stored as NULL (SQL has no NaN in common): a stalled unit's peak ratio."""
    return None if isinstance(v, float) and math.isnan(v) else v


def open_store(target: str | None = None, *, create: bool = True) -> HistoryStore:
    """A Postgres URL, an SQLite path (or ``sqlite:///path``), or None for ``default_path()``.

    Errors are one line: SourceError when the database cannot be reached, UsageError for a
    path that cannot hold a database, InputError for a database or table that is not a
    skewscope history.
    """
    if target and target.startswith(POSTGRES_SCHEMES):
        return _open_postgres(target)
    path = Path(target.removeprefix("sqlite://")) if target else default_path()
    if not create and not path.exists():
        raise UsageError(f"history {path}: no such database (watch --save creates it)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False)
    except (OSError, sqlite3.Error) as e:
        raise UsageError(f"history {path}: cannot open an SQLite database ({e})") from None
    try:
        return HistoryStore(conn, postgres=False, shown=str(path))
    except sqlite3.DatabaseError as e:
        conn.close()
        raise InputError(
            f"history {path}: not a usable SQLite history ({one_line(str(e))})"
        ) from None
    except BaseException:
        conn.close()
        raise


def _open_postgres(url: str) -> HistoryStore:
    shown = redact_url(url)
    try:
        import psycopg
    except ImportError:
        raise UsageError(
            f"history {shown}: Postgres needs psycopg 3: pip install 'skewscope[postgres]'"
        ) from None
    try:
        conn = psycopg.connect(url, connect_timeout=10)
    except psycopg.Error as e:
        raise SourceError(f"history {shown}: {_first(e)}") from None
    try:
        return HistoryStore(conn, postgres=True, shown=shown, db_errors=(psycopg.Error,))
    except psycopg.Error as e:
        conn.close()
        raise InputError(f"history {shown}: not a usable history ({_first(e)})") from None
    except BaseException:
        conn.close()
        raise


def _first(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
