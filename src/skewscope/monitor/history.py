"""Incident history in SQL: SQLite by default (one file, stdlib), Postgres for a team
(``postgresql://...`` URL, psycopg 3 from the ``postgres`` extra).

One table, ``skewscope_incidents``; times are epoch seconds. The same SQL serves both engines
(only the id column and the parameter marker differ). Incidents left open by a watch that died
are closed at its last sighting when the next watch opens the store.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from skewscope.errors import SourceError, UsageError
from skewscope.monitor.incidents import STOPPED, Incident
from skewscope.sources.auth import redact_url

TABLE = "skewscope_incidents"
COLUMNS = tuple(f.name for f in fields(Incident) if f.name != "id")
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
}
POSTGRES_SCHEMES = ("postgres://", "postgresql://")


def default_path() -> Path:
    """``$SKEWSCOPE_HISTORY``, else ``$XDG_STATE_HOME/skewscope/history.sqlite``, else
    ``~/.local/state/skewscope/history.sqlite``."""
    if os.environ.get("SKEWSCOPE_HISTORY"):
        return Path(os.environ["SKEWSCOPE_HISTORY"])
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "skewscope" / "history.sqlite"


class HistoryStore:
    """Incidents table over a DB-API connection (sqlite3 or psycopg)."""

    def __init__(self, conn: Any, *, postgres: bool, shown: str) -> None:
        self.conn = conn
        self.postgres = postgres
        self.shown = shown  # where, for messages (secrets redacted)
        ident = "BIGSERIAL PRIMARY KEY" if postgres else "INTEGER PRIMARY KEY AUTOINCREMENT"
        cols = ", ".join(f"{c} {_TYPES[c]}" for c in COLUMNS)
        self._exec(f"CREATE TABLE IF NOT EXISTS {TABLE} (id {ident}, {cols})")
        self.conn.commit()

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if self.postgres:
            sql = sql.replace("?", "%s")
        cur = self.conn.cursor()
        cur.execute(sql, tuple(params))
        return cur

    def save(self, incident: Incident) -> Incident:
        """Insert a new incident or update a known one; returns it with its id."""
        values = tuple(getattr(incident, c) for c in COLUMNS)
        if incident.id is None:
            marks = ", ".join("?" for _ in COLUMNS)
            cur = self._exec(
                f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({marks}) RETURNING id",
                values,
            )
            new_id = int(cur.fetchone()[0])
            self.conn.commit()
            return replace(incident, id=new_id)
        sets = ", ".join(f"{c} = ?" for c in COLUMNS)
        self._exec(f"UPDATE {TABLE} SET {sets} WHERE id = ?", (*values, incident.id))
        self.conn.commit()
        return incident

    def close_orphans(self) -> int:
        """End incidents a previous watch left open (it died): at their last sighting."""
        cur = self._exec(
            f"UPDATE {TABLE} SET end_s = last_seen_s, end_reason = ? WHERE end_s IS NULL",
            (STOPPED,),
        )
        self.conn.commit()
        return max(0, int(cur.rowcount))

    def _rows(self, where: str = "", params: Sequence[Any] = (), limit: int | None = None
              ) -> list[Incident]:
        sql = f"SELECT {', '.join(COLUMNS)}, id FROM {TABLE} {where} ORDER BY onset_s DESC, id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self._exec(sql, params).fetchall()
        return [Incident(**dict(zip(COLUMNS, row[:-1], strict=True)), id=int(row[-1]))
                for row in rows]

    def list(self, limit: int | None = None, unit: str | None = None,
             open_only: bool = False) -> list[Incident]:
        """Newest first."""
        clauses, params = [], []
        if unit:
            clauses.append("unit = ?")
            params.append(unit)
        if open_only:
            clauses.append("end_s IS NULL")
        where = ("WHERE " + " AND ".join(clauses)) if clauses else ""
        return self._rows(where, params, limit)

    def get(self, incident_id: int) -> Incident | None:
        rows = self._rows("WHERE id = ?", (incident_id,))
        return rows[0] if rows else None

    def close(self) -> None:
        self.conn.close()


def open_store(target: str | None = None, *, create: bool = True) -> HistoryStore:
    """A Postgres URL, an SQLite path (or ``sqlite:///path``), or None for ``default_path()``.

    Errors are one line: SourceError when the database cannot be reached, UsageError for a
    path that cannot hold a database.
    """
    if target and target.startswith(POSTGRES_SCHEMES):
        return _open_postgres(target)
    path = Path(target.removeprefix("sqlite://")) if target else default_path()
    if not create and not path.exists():
        raise UsageError(f"history {path}: no such database (watch --save creates it)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False)
        return HistoryStore(conn, postgres=False, shown=str(path))
    except (OSError, sqlite3.Error) as e:
        raise UsageError(f"history {path}: cannot open an SQLite database ({e})") from None


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
        return HistoryStore(conn, postgres=True, shown=shown)
    except psycopg.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SourceError(f"history {shown}: {first}") from None
