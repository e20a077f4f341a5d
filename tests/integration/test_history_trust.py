"""The incident history trusts nothing it reads, and watch says what a stopped fleet is.

Known truth: a frame whose unit d hangs (holds requests, no progress) among progressing peers
is one stalled incident with no ratio; a frame in which every unit freezes is "no progress
anywhere" and no incident. Databases are built by hand with the wrong columns or values, on
SQLite and on a real PostgreSQL (tests/helpers/postgres_server.py)."""

from __future__ import annotations

import io
import json
import math
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from helpers.frame_builder import Spec, make_frame
from skewscope.cli import main
from skewscope.clock import ManualClock
from skewscope.errors import InputError
from skewscope.frame import Evidence
from skewscope.monitor import screen
from skewscope.monitor.history import TABLE, HistoryStore, open_store
from skewscope.monitor.incidents import COOLED, STOPPED
from skewscope.monitor.watch import Watcher

FOUR = ("a", "b", "c", "d")


class Fixed:
    """A source that always loads the same evidence."""

    description = "fixed"

    def __init__(self, evidence: Evidence) -> None:
        self.evidence = evidence

    def load(self, now: float) -> Evidence:
        return self.evidence

    def problems(self, since: float) -> list[str]:
        return []

    def close(self) -> None:
        pass


def frames(**specs: Spec) -> Evidence:
    return Evidence(
        instance=make_frame({u: specs.get(u, Spec()) for u in FOUR}, source="prometheus")
    )


def _text(renderable: Any) -> str:
    from rich.console import Console

    console = Console(record=True, width=160, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def run_watch(evidence: Evidence, store: HistoryStore | None, runs: int = 2) -> Watcher:
    w = Watcher(Fixed(evidence), last_s=60, every_s=0.01, store=store)
    w.loop(max_runs=runs)
    return w


# ------------------------------------------------------------------------------------------------
# 1. A stalled incident (no ratio) in history list / show


def test_a_stalled_incident_reads_as_stalled_in_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    w = Watcher(
        Fixed(frames(d=Spec(stalled_from=2))),
        last_s=60,
        every_s=30,
        store=open_store(str(db)),
        open_runs=1,
    )
    assert w.run_once(), w.status.last_error
    line = screen.log_line(w.status, 0.0)
    assert "d(instance,stalled,—" in line and "nan" not in line
    w._finish()
    assert main(["history", "list", "--db", str(db)]) == 0
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "stalled" in out.out and "nan" not in out.out
    assert main(["history", "list", "--db", str(db), "--format", "json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "stalled" and doc["peak_ratio"] is None  # documented: no ratio
    assert doc["end_reason"] == STOPPED and doc["writer"]
    assert main(["history", "show", str(doc["id"]), "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "peak unit / peers  stalled" in shown and "is stalled" in shown


# ------------------------------------------------------------------------------------------------
# 2. A fleet that stops as a whole


def test_a_frozen_fleet_is_no_progress_anywhere_and_saves_no_incident(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "h.sqlite"))
    w = run_watch(frames(**{u: Spec(stalled_from=0) for u in FOUR}), store)
    assert w.status.good_runs == 2 and w.status.report is not None
    assert w.status.report.verdict != "imbalanced" and w.status.report.hot_units == ()
    line = screen.log_line(w.status, 0.0)
    assert "no_progress_anywhere" in line and "nan" not in line
    assert "no progress anywhere" in _text(screen.render(w.status))
    assert store.list() == []


# ------------------------------------------------------------------------------------------------
# 3. The store validates its database


def _sqlite_table(db: Path, columns: str, rows: Sequence[tuple[Any, ...]] = ()) -> None:
    conn = sqlite3.connect(db)
    conn.execute(f"CREATE TABLE {TABLE} ({columns})")
    for row in rows:
        conn.execute(f"INSERT INTO {TABLE} VALUES ({', '.join('?' for _ in row)})", row)
    conn.commit()
    conn.close()


OLD_COLUMNS = (
    "id INTEGER PRIMARY KEY AUTOINCREMENT, unit TEXT NOT NULL, level TEXT NOT NULL, "
    "kind TEXT NOT NULL, onset_s DOUBLE PRECISION NOT NULL, last_seen_s DOUBLE "
    "PRECISION NOT NULL, peak_ratio DOUBLE PRECISION, summary TEXT NOT NULL, source "
    "TEXT NOT NULL, end_s DOUBLE PRECISION, end_reason TEXT NOT NULL"
)
LOOSE = (
    "id INTEGER PRIMARY KEY, unit, level, kind, onset_s, last_seen_s, peak_ratio, summary, "
    "source, end_s, end_reason, writer, lease_s"
)


@pytest.mark.parametrize(
    ("columns", "said"),
    [
        ("id INTEGER PRIMARY KEY, unit TEXT, colour TEXT", "has a column 'colour'"),
        ("id INTEGER PRIMARY KEY, unit TEXT", "has no column 'level'"),
        (
            OLD_COLUMNS.replace("onset_s DOUBLE PRECISION", "onset_s TEXT"),
            "has column 'onset_s' of type text, expected number",
        ),
        (
            OLD_COLUMNS.replace("unit TEXT", "unit NUMERIC"),
            "has column 'unit' of type number, expected text",
        ),
    ],
)
def test_a_table_with_other_columns_is_one_line_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], columns: str, said: str
) -> None:
    db = tmp_path / "h.sqlite"
    _sqlite_table(db, columns)
    assert main(["history", "list", "--db", str(db)]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"skewscope: error: history {db}: table {TABLE} {said}")
    assert "\n" not in err
    # watch --save refuses it before anything starts, the same way
    assert (
        main(["watch", "--scrape", "http://127.0.0.1:1/metrics", "--no-tui", "--save", str(db)])
        == 3
    )
    assert said in capsys.readouterr().err


def test_a_file_that_is_not_a_database_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"not sqlite at all, just text\n" * 100)
    assert main(["history", "list", "--db", str(db)]) == 3
    assert capsys.readouterr().err.startswith(f"skewscope: error: history {db}: not a usable")


def test_bad_rows_are_reported_and_skipped_never_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    good = ("u", "instance", "count", 100.0, 130.0, 1.5, "s", "src", 160.0, COOLED, "w", None)
    _sqlite_table(
        db,
        LOOSE,
        [
            (1, *good),
            (2, None, *good[1:]),  # NULL unit
            (3, *good[:3], "yesterday", *good[4:]),  # text in a time
            (4, *good[:5], "high", *good[6:]),  # text in the peak ratio
            (5, *good[:8], b"\x00", *good[9:]),  # a blob in the end time
        ],
    )
    assert main(["history", "list", "--db", str(db), "--format", "json"]) == 0
    out = capsys.readouterr()
    assert [i["id"] for i in json.loads(out.out)] == [1]
    assert "Traceback" not in out.err
    assert "row id 2: unit: expected non-empty text, got NULL (row skipped)" in out.err
    assert "row id 3: onset_s: expected a time in epoch seconds, got 'yesterday'" in out.err
    assert "row id 4: peak_ratio: expected a number or NULL, got 'high'" in out.err
    assert "row id 5: end_s: expected a number or NULL, got b'\\x00'" in out.err
    assert main(["history", "show", "3", "--db", str(db)]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"skewscope: error: history {db}: row id 3: onset_s:")


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "show", str(2**64)],
        ["history", "show", "0"],
        ["history", "show", "x"],
        ["history", "list", "--limit", str(2**64)],
        ["history", "list", "--limit", "0"],
    ],
)
def test_ids_and_limits_are_bounded_at_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    db = tmp_path / "h.sqlite"
    open_store(str(db)).close()
    assert main([*argv, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and (
        "expected a number from 1 to" in err or "expected a whole number" in err
    )


def test_the_largest_id_and_limit_are_answered(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "h.sqlite"
    open_store(str(db)).close()
    assert main(["history", "show", str(2**63 - 1), "--db", str(db)]) == 2
    assert "no incident" in capsys.readouterr().err
    assert main(["history", "list", "--limit", str(2**63 - 1), "--db", str(db)]) == 0


# ------------------------------------------------------------------------------------------------
# 3. Incidents are owned per writer; an older table is migrated


def check_two_writers(target: str) -> None:
    """Two watches on one history: the second's start closes nothing of the first's, and each
    ends only its own incident (one hot period is one incident per writer, never split)."""
    hot, calm = frames(d=Spec(rate=40.0)), frames()
    a = Watcher(
        Fixed(hot),
        last_s=60,
        every_s=30,
        store=open_store(target),
        clock=ManualClock(1000.0),
        calm_runs=1,
        open_runs=1,
    )
    assert a.run_once()
    b = Watcher(
        Fixed(hot),
        last_s=60,
        every_s=30,
        store=open_store(target),
        clock=ManualClock(1010.0),
        calm_runs=1,
        open_runs=1,
    )
    assert b.run_once()
    assert a.store is not None and b.store is not None
    opened = a.store.list(open_only=True)
    assert len(opened) == 2 and {i.writer for i in opened} == {a.store.writer, b.store.writer}
    a.source = Fixed(calm)  # type: ignore[assignment]
    assert a.run_once()  # a's unit cooled: a ends its own incident only
    rows = {i.writer: i for i in a.store.list()}
    assert rows[a.store.writer].end_reason == COOLED
    assert rows[b.store.writer].end_s is None
    b._finish()
    assert not a.store.list(open_only=True)
    for w in (a, b):
        w.store.close()  # type: ignore[union-attr]


def test_two_writers_on_one_sqlite_history(tmp_path: Path) -> None:
    check_two_writers(str(tmp_path / "h.sqlite"))


def test_an_older_table_gains_the_writer_columns_and_its_open_rows_are_orphans(
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.sqlite"
    _sqlite_table(db, OLD_COLUMNS)
    conn = sqlite3.connect(db)
    conn.execute(
        f"INSERT INTO {TABLE} (unit, level, kind, onset_s, last_seen_s, peak_ratio, "
        "summary, source, end_s, end_reason) VALUES ('u', 'instance', 'count', 1.0, "
        "2.0, NULL, 's', 'src', NULL, '')"
    )
    conn.commit()
    conn.close()
    store = open_store(str(db))
    assert store.close_orphans(10.0) == 1  # left open by a watch of the older version
    (row,) = store.list()
    assert (row.end_s, row.end_reason, row.writer) == (2.0, STOPPED, "")
    assert math.isnan(row.peak_ratio) and row.confirmed_s is None  # not kept then
    store.close()


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    from helpers.postgres_server import postgres

    with postgres() as url:
        yield url


def _pg(url: str, *sql: str) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        for statement in sql:
            conn.execute(statement)  # type: ignore[arg-type]


def test_postgres_history_is_validated_migrated_and_owned_per_writer(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _pg(
        postgres_url,
        f"DROP TABLE IF EXISTS {TABLE}",
        f"CREATE TABLE {TABLE} (id BIGSERIAL PRIMARY KEY, unit TEXT, colour TEXT)",
    )
    with pytest.raises(InputError, match=f"table {TABLE} has a column 'colour'"):
        open_store(postgres_url)
    assert main(["history", "list", "--db", postgres_url]) == 3
    assert "has a column 'colour'" in capsys.readouterr().err
    wrong = OLD_COLUMNS.replace(
        "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY"
    ).replace("onset_s DOUBLE PRECISION", "onset_s TEXT")
    _pg(postgres_url, f"DROP TABLE {TABLE}", f"CREATE TABLE {TABLE} ({wrong})")
    with pytest.raises(InputError, match="has column 'onset_s' of type text, expected number"):
        open_store(postgres_url)
    old = OLD_COLUMNS.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
    _pg(
        postgres_url,
        f"DROP TABLE {TABLE}",
        f"CREATE TABLE {TABLE} ({old})",
        f"INSERT INTO {TABLE} (unit, level, kind, onset_s, last_seen_s, peak_ratio, summary, "
        "source, end_s, end_reason) VALUES ('u', 'instance', 'stalled', 1.0, 2.0, NULL, 's', "
        "'src', NULL, '')",
    )
    store = open_store(postgres_url)  # migrated: gains writer and lease_s
    assert store.close_orphans(10.0) == 1
    store.close()
    assert main(["history", "list", "--db", postgres_url]) == 0
    assert "stalled" in capsys.readouterr().out
    assert main(["history", "show", str(2**63 - 1), "--db", postgres_url]) == 2
    _pg(postgres_url, f"DELETE FROM {TABLE}")
    check_two_writers(postgres_url)


def test_a_running_watch_closes_a_dead_writers_incidents_once_its_lease_ends(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "h.sqlite")
    hot = frames(d=Spec(rate=40.0))
    a = Watcher(
        Fixed(hot),
        last_s=60,
        every_s=30,
        store=open_store(db),
        clock=ManualClock(1000.0),
        open_runs=1,
    )
    assert a.run_once()  # then a dies: no _finish, its lease runs to 1000 + 3 x 30 + 120
    now = ManualClock(1010.0)
    b = Watcher(Fixed(frames()), last_s=60, every_s=30, store=open_store(db), clock=now)
    assert b.run_once()
    assert b.store is not None and len(b.store.list(open_only=True)) == 1  # a's, still leased
    now.set(1211.0)
    assert b.run_once()
    (row,) = b.store.list()
    assert (row.end_s, row.end_reason) == (1000.0, STOPPED)
