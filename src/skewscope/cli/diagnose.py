"""``skewscope diagnose``: load evidence from one source, run the method, render the report."""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from skewscope.catalogue import FailOn, Verdict
from skewscope.cli import applies, common, readers
from skewscope.cli.scheduler import add_scheduler_arg, read_budget
from skewscope.errors import GATE_EXIT_CODE, UsageError

if TYPE_CHECKING:
    from skewscope.frame import Evidence


LEVEL_HELP = (
    "auto (default) judges one instance with several ranks at DP level; several "
    "instances at instance level, then drills into the DP ranks of every multi-rank "
    "instance; instance or dp force the level"
)


def window_help() -> str:
    """The README's words, with the numbers read from the sources' window policy."""
    from skewscope.frame import WINDOWS as W

    return (
        f"window length, e.g. 10s (default: the range / {W.target_windows} rounded up to 1, "
        f"2, 5, 10, 15, 20, 30 s, 1 m ..., so {W.target_windows // 2}-{W.target_windows} "
        f"windows, at least {W.min_window_s:g} s)"
    )


def register(sub: Any) -> None:
    d: argparse.ArgumentParser = sub.add_parser(
        "diagnose",
        help="diagnose load skew from profiler folders, Prometheus or live /metrics",
        description="Offline: PATH is an msServiceProfiler instance folder or a folder of them "
        "(NAME=PATH names an instance). Online: --prometheus URL or --scrape URL..., or the URL "
        "itself as PATH (a Prometheus API is probed, a /metrics URL is scraped).",
    )
    d.add_argument(
        "paths", nargs="*", metavar="PATH", help="profiler folder(s), NAME=PATH, or URL(s)"
    )
    common.add_online_source_args(d)
    common.add_auth_args(d)
    d.add_argument(
        "--access-log",
        nargs="+",
        metavar="FILE",
        help="gateway access log(s), nginx or Envoy, JSON or key=value lines with "
        "the upstream address (docs/gateway.md): what the gateway sent each unit",
    )
    d.add_argument(
        "--gateway-url",
        metavar="URL",
        help="a router's base URL (sglang-router, vllm-router): its live GET /workers "
        "list says which units are in the pool",
    )
    d.add_argument("--level", default="auto", choices=("auto", "instance", "dp"), help=LEVEL_HELP)
    d.add_argument("--window", metavar="DURATION", help=window_help())
    d.add_argument(
        "--lockstep",
        choices=("yes", "no"),
        help="whether the DP ranks step in lockstep (yes: MoE expert parallelism or "
        "DP attention, ranks wait for the busiest; no: a dense model's plain DP); "
        "engine metrics do not say, so without it the price of DP skew gives both "
        "readings",
    )
    add_scheduler_arg(d)
    common.add_config_arg(d)
    d.add_argument(
        "--fail-on",
        choices=[str(FailOn.IMBALANCED)],
        help="exit 6 when the verdict is imbalanced (CI or canary gate)",
    )
    common.add_output_args(d)
    d.set_defaults(run=run)


def load_evidence(args: argparse.Namespace) -> Evidence:
    """Engine evidence from the one source given, with the gateway's beside it when read."""
    evidence = _engine_evidence(args)
    if getattr(args, "lockstep", None) and evidence.dp is not None:
        evidence = replace(evidence, dp=replace(evidence.dp, lockstep=args.lockstep == "yes"))
    gateway = readers.load_gateway_evidence(args, evidence)
    return replace(evidence, gateway=gateway) if gateway is not None else evidence


def _engine_evidence(args: argparse.Namespace) -> Evidence:
    window = common.parse_duration(args.window, "--window") if args.window else None
    _read_url_paths(args)
    chosen = [bool(args.paths), bool(args.prometheus), bool(args.scrape)]
    if sum(chosen) != 1:
        raise UsageError("diagnose: give profiler PATHs, or --prometheus URL, or --scrape URL...")
    source = "profiler" if args.paths else "prometheus" if args.prometheus else "scrape"
    applies.check(args, {source, *(["gateway"] if args.gateway_url else [])}, "diagnose")
    if args.paths:
        from skewscope.sources.profiler import load_profiler

        start, end, last_s = offline_range(args)
        with common.read_progress(common.limits_from_args(args).progress_every_s) as progress:
            return load_profiler(
                args.paths,
                window_s=window,
                start=start,
                end=end,
                last_s=last_s,
                progress=progress,
                clocks=common.profiler_clocks(args),
                budget=read_budget(args),
            )
    if args.prometheus:
        return readers.load_prometheus_evidence(args, window)
    return readers.load_scrape_evidence(args, window)


def _read_url_paths(args: argparse.Namespace) -> None:
    """PATHs that are URLs become --prometheus or --scrape (see cli/urls.py)."""
    from skewscope.cli import urls

    found = [p for p in args.paths if urls.looks_like_url(p)]
    if not found:
        return
    if len(found) != len(args.paths):
        raise UsageError("diagnose: give profiler folders or URLs, not both")
    if args.prometheus or args.scrape:
        raise UsageError("diagnose: a URL as PATH cannot be combined with --prometheus/--scrape")
    kind, targets = urls.classify(
        found,
        readers.auth_from_args(args),
        common.parse_duration(args.timeout, "--timeout"),
        common.limits_from_args(args),
    )
    args.paths = []
    if kind == "prometheus":
        if not (args.last or (args.start and args.end)):
            from skewscope.sources.auth import redact_url

            raise UsageError(
                f"{redact_url(targets[0])} is a Prometheus API: give a range, e.g. "
                "--last 30m, or --start T --end T"
            )
        args.prometheus = targets[0]
    else:
        args.scrape = targets


def offline_range(args: argparse.Namespace) -> tuple[float | None, float | None, float | None]:
    """Zoom into a capture: --start/--end (either may be left open), or --last D = the last D
    of the capture (not of the wall clock: a capture is analysed after the fact)."""
    if args.last and (args.start or args.end):
        raise UsageError("--last cannot be combined with --start/--end")
    start = common.parse_time(args.start, "--start") if args.start else None
    end = common.parse_time(args.end, "--end") if args.end else None
    if start is not None and end is not None and end <= start:
        raise UsageError("--end must be after --start")
    last = common.parse_duration(args.last, "--last") if args.last else None
    return start, end, last


def run(args: argparse.Namespace) -> int:
    renderer = common.pick_renderer(args)
    common.check_output(args)
    th = common.thresholds_from_args(args)
    online = bool(args.prometheus or args.scrape)
    with common.collector_paused() if online else contextlib.nullcontext():
        # polars, numpy and the analysis load on a thread while the servers answer the queries
        # or the profiler CSVs are read (in polars' threads, the GIL released)
        warm = common.warm_imports("polars", "skewscope.analysis.diagnose", renderer.module)
        try:
            evidence = load_evidence(args)
        finally:
            warm.join()  # never left importing while the process ends
        from skewscope.analysis.diagnose import diagnose

        report = diagnose(evidence, level=args.level, th=th)
        common.emit_report(report, args)
    if args.fail_on == FailOn.IMBALANCED and report.verdict == Verdict.IMBALANCED:
        return GATE_EXIT_CODE
    return 0
