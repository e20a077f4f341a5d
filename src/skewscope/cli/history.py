"""``skewscope history list|show``: re-render the incidents ``watch --save`` kept."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from skewscope.errors import UsageError


def sql_count(text: str) -> int:
    """An id or a limit: a whole number from 1 to 2^63 - 1 (what SQL can hold), else argparse's
    usage error (exit 2)."""
    from skewscope.monitor.history import SQL_INT_MAX

    try:
        n = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= n <= SQL_INT_MAX:
        raise argparse.ArgumentTypeError(f"expected a number from 1 to {SQL_INT_MAX}, got {n}")
    return n


def register(sub: Any) -> None:
    h: argparse.ArgumentParser = sub.add_parser(
        "history",
        help="list or show the incidents kept by watch --save",
        description="Incidents (unit, level, kind, onset, end, peak unit / peers ratio) from the "
        "SQLite file or Postgres database watch --save wrote.",
    )
    actions = h.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("list", help="incidents, newest first")
    ls.add_argument("--unit", help="only this unit")
    ls.add_argument("--open", action="store_true", help="only incidents still going on")
    ls.add_argument("--limit", type=sql_count, default=50, help="at most N incidents (default 50)")
    show = actions.add_parser("show", help="one incident in full")
    show.add_argument("id", type=sql_count, help="incident id (from history list)")
    for p in (ls, show):
        p.add_argument(
            "--db",
            metavar="URL",
            help="SQLite path or postgresql:// URL (default: "
            "where watch --save writes, $XDG_STATE_HOME/skewscope/history.sqlite)",
        )
        p.add_argument("--format", choices=("terminal", "json"), default="terminal")
    h.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from skewscope.monitor import screen
    from skewscope.monitor.history import open_store

    store = open_store(args.db, create=False)
    try:
        if args.action == "list":
            incidents = store.list(limit=args.limit, unit=args.unit, open_only=args.open)
            for bad in store.problems:  # reported, not fatal: the other rows are still shown
                print(
                    f"skewscope: warning: history {store.shown}: {bad} (row skipped)",
                    file=sys.stderr,
                )
        else:
            one = store.get(args.id)
            if one is None:
                raise UsageError(f"history {store.shown}: no incident {args.id}")
            incidents = [one]
    finally:
        store.close()
    if args.format == "json":
        # peak_ratio null: no ratio (a stalled unit finished nothing to compare; docs/monitoring.md)
        doc: Any = [
            {
                k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in vars(i).items()
            }
            for i in incidents
        ]
        json.dump(doc[0] if args.action == "show" else doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from skewscope.cli.common import DEFAULT_TEXT_WIDTH, text_width

    console = Console(width=text_width(None, terminal=sys.stdout.isatty()) or DEFAULT_TEXT_WIDTH)
    if args.action == "show":
        console.print(screen.incident_detail(incidents[0]))
    else:
        console.print(screen.incident_table(incidents))
    return 0
