"""``skewscope watch``: re-run the diagnosis every --every over the last --last; live view or one
log line per run, a Prometheus exporter (--listen), incident history (--save), JSON lines."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from skewscope import clock
from skewscope.cli import applies, common, readers
from skewscope.errors import UsageError
from skewscope.monitor.incidents import CALM_RUNS, OPEN_RUNS

if TYPE_CHECKING:
    from skewscope.monitor.status import WatchStatus
    from skewscope.monitor.watch import Source, Watcher

DEFAULT_LISTEN = "127.0.0.1:9109"
SAVE_DEFAULT = "default"  # --save without a URL: the documented SQLite path


def register(sub: Any) -> None:
    w: argparse.ArgumentParser = sub.add_parser(
        "watch",
        help="re-run the diagnosis continuously: live view, Prometheus exporter, incidents",
        description="Re-run the diagnosis every --every over the last --last from --prometheus "
        "URL or --scrape URL... (a rolling sampler: scrapes every --interval and keeps --last "
        "in memory). A failing source keeps the last good report and counts the error.",
    )
    common.add_online_source_args(w, fixed_range=False)
    common.add_auth_args(w)
    w.set_defaults(last="15m")
    common.add_config_arg(w)
    w.add_argument(
        "--every", default="30s", metavar="DURATION", help="time between runs (default 30s)"
    )
    w.add_argument("--level", default="auto", choices=("auto", "instance", "dp"))
    w.add_argument("--window", metavar="DURATION", help="window size (default: >= 24 windows)")
    w.add_argument(
        "--listen",
        nargs="?",
        const=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"serve the diagnosis as Prometheus metrics (default {DEFAULT_LISTEN})",
    )
    w.add_argument("--no-tui", action="store_true", help="one log line per run (for a service)")
    common.add_width_arg(w)
    w.add_argument(
        "--json-lines",
        action="store_true",
        help="print each run's JSON report on one line to stdout (logs go to stderr)",
    )
    w.add_argument(
        "--save",
        nargs="?",
        const=SAVE_DEFAULT,
        metavar="URL",
        help="keep incidents: an SQLite path or a postgresql:// URL (default: "
        "$XDG_STATE_HOME/skewscope/history.sqlite)",
    )
    w.add_argument(
        "--calm-runs",
        type=int,
        default=CALM_RUNS,
        metavar="K",
        help="an incident ends after K good runs in a row no longer find the unit hot "
        f"(default {CALM_RUNS}: one calm run between hot runs does not split it)",
    )
    w.add_argument(
        "--open-runs",
        type=int,
        default=OPEN_RUNS,
        metavar="K",
        help="an incident opens once K good runs in a row find the unit hot, at the "
        f"first of them (default {OPEN_RUNS}: a unit hot in one run alone is a blip)",
    )
    w.add_argument(
        "--access-log",
        nargs="+",
        metavar="FILE",
        help="gateway access log(s), nginx or Envoy (as for diagnose), followed like "
        "tail -F: each run tallies the requests logged in its windows",
    )
    w.add_argument(
        "--gateway-url",
        metavar="URL",
        help="sglang-router / vllm-router base URL: its live worker list each run",
    )
    w.add_argument(
        "--debug",
        action="store_true",
        help="one line per run on stderr saying what it read: with --prometheus, how "
        "many windows were read and kept, or why the whole range was read again",
    )
    w.add_argument(
        "--runs",
        type=int,
        metavar="N",
        help="stop after N runs (default: run until SIGINT/SIGTERM)",
    )
    w.set_defaults(run=run)


def build_source(args: argparse.Namespace, last_s: float, window: float | None) -> Source:
    from skewscope.monitor.watch import PrometheusSource, ScrapeSource
    from skewscope.sources.auth import redact_url

    if bool(args.prometheus) == bool(args.scrape):
        raise UsageError("watch: give --prometheus URL or --scrape URL...")
    applies.check(
        args,
        {"prometheus" if args.prometheus else "scrape"},
        "watch",
        {"last": applies.rule("prometheus scrape", "the span of every run")},
    )
    # the log keeps a little more than a run's span: the engines' windows may start earlier
    follower = readers.access_log_follower(args, keep_s=last_s + (window or 0.0) + 60.0)
    if args.prometheus:
        shown = f"prometheus {redact_url(args.prometheus)} {args.selector}".rstrip()
        debug = None
        if args.debug:

            def debug(line: str) -> None:
                print(f"skewscope watch: debug: {line}", file=sys.stderr, flush=True)

        reader = readers.incremental_prometheus(args, window, debug)
        return PrometheusSource(
            shown, last_s, readers.with_gateway(args, reader.load, follower), reader.close
        )
    from skewscope.frame import WINDOWS
    from skewscope.sources.sampler import RollingScraper

    sampler = RollingScraper(
        args.scrape,
        span_s=last_s,
        interval_s=common.parse_duration(args.interval, "--interval"),
        window_s=window or WINDOWS.choose(last_s),
        dialect=args.dialect,
        auth=readers.auth_from_args(args),
        timeout_s=common.parse_duration(args.timeout, "--timeout") if args.timeout else None,
        device_map=readers.device_map_from_args(args),
        limits=common.limits_from_args(args),
        role_label=common.role_label_from_args(args),
        clock=clock.current(),
    )
    shown = f"scrape {len(args.scrape)} target(s): " + ", ".join(redact_url(u) for u in args.scrape)
    started = sampler.start()
    gateway = None
    if follower is not None or args.gateway_url:
        gateway = readers.with_gateway(args, lambda start, end: started.evidence(), follower)
    return ScrapeSource(shown, started, gateway)


@contextlib.contextmanager
def stop_on_signals(watcher: Watcher) -> Iterator[None]:
    """SIGINT and SIGTERM end the loop cleanly (exit 0) instead of raising mid-run."""
    handler = lambda signum, frame: watcher.stop()  # noqa: E731
    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.live import Live

    from skewscope.monitor import screen
    from skewscope.monitor.watch import Watcher
    from skewscope.report.document import report_document

    last_s = common.parse_duration(args.last, "--last")
    every_s = common.parse_duration(args.every, "--every")
    window = common.parse_duration(args.window, "--window") if args.window else None
    thresholds = common.thresholds_from_args(args)
    if args.runs is not None and args.runs < 1:
        raise UsageError("--runs: expected a positive number of runs")
    for flag, runs in (("--calm-runs", args.calm_runs), ("--open-runs", args.open_runs)):
        if runs < 1:
            raise UsageError(f"{flag}: expected a positive number of runs")
    if args.listen:
        from skewscope.monitor.exporter import parse_listen

        parse_listen(args.listen)  # a bad address fails before anything starts
    tui = not (args.no_tui or args.json_lines) and sys.stdout.isatty()
    # the live view's width: --width, else $COLUMNS, else rich follows the terminal's size
    width = common.text_width(args, terminal=False)
    log = sys.stderr if args.json_lines else sys.stdout
    store = None
    if args.save:
        from skewscope.monitor.history import open_store

        store = open_store(None if args.save == SAVE_DEFAULT else args.save)
    source = build_source(args, last_s, window)
    server = None
    try:

        def on_run(st: WatchStatus, good: bool) -> None:
            if args.json_lines and good and st.report is not None:
                line = json.dumps(report_document(st.report), separators=(",", ":"))
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            if not tui:
                print(screen.log_line(st, watcher.clock.time()), file=log, flush=True)

        watcher = Watcher(
            source,
            last_s=last_s,
            every_s=every_s,
            level=args.level,
            thresholds=thresholds,
            store=store,
            on_run=on_run,
            calm_runs=args.calm_runs,
            open_runs=args.open_runs,
            clock=clock.current(),
        )
        with stop_on_signals(watcher):  # from here a signal stops the loop, never kills it
            if args.listen:
                from skewscope.monitor.exporter import serve

                server, url = serve(lambda: watcher.status, args.listen)
                print(
                    f"skewscope watch: exporter at {url}",
                    file=log if not tui else sys.stderr,
                    flush=True,
                )
            if store is not None and not tui:
                print(f"skewscope watch: saving incidents to {store.shown}", file=log, flush=True)
            if tui:
                with Live(
                    get_renderable=lambda: screen.render(watcher.status),
                    console=Console(width=width),
                    refresh_per_second=2,
                    transient=False,
                ):
                    watcher.loop(max_runs=args.runs)
            else:
                watcher.loop(max_runs=args.runs)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        source.close()
        if store is not None:
            store.close()
    if not tui:
        print("skewscope watch: stopped", file=log, flush=True)
    return 0
