"""``skewscope whatif``: replay the evidence under other routing policies and predict the gain."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from skewscope.cli import applies, common, readers
from skewscope.cli.scheduler import add_scheduler_arg, read_budget
from skewscope.clock import current
from skewscope.errors import UsageError

if TYPE_CHECKING:
    from skewscope.sources.online_workload import WorkloadEvidence


def register(sub: Any) -> None:
    from skewscope.sim.policies import POLICIES

    w: argparse.ArgumentParser = sub.add_parser(
        "whatif",
        help="which routing policy would fix the skew, and by how much (replay the evidence)",
        description="Replay the observed requests on a service model calibrated per unit, under "
        "the current routing and each candidate policy; predict load ratio, queue wait, TTFT, "
        "KV peak and throughput. PATH: msServiceProfiler folders as for diagnose.",
    )
    w.add_argument("paths", nargs="*", metavar="PATH", help="profiler folder(s), NAME=PATH")
    common.add_online_source_args(w)
    common.add_auth_args(w)
    listed = ", ".join(p for p in POLICIES if p not in ("weighted", "sticky"))
    w.add_argument(
        "--policies",
        metavar="LIST",
        help=f"instance-level candidates, comma separated (of: {listed})",
    )
    w.add_argument(
        "--dp-policies",
        metavar="LIST",
        help="DP-level candidates (default: round_robin,vllm_dp,shortest_queue,minimum_tokens)",
    )
    w.add_argument(
        "--access-log",
        nargs="+",
        metavar="FILE",
        help="gateway access log(s) (nginx or Envoy, as for diagnose) whose session "
        "or user keys the replayed requests keep, so sticky, consistent_hash and "
        "cache_aware are replayed (online sources)",
    )
    add_scheduler_arg(w)
    w.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="replays in parallel processes (default: the CPUs available)",
    )
    common.add_output_args(w)
    w.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from skewscope.report.whatif import RENDER
    from skewscope.whatif import plans

    renderer = common.pick_renderer(args)
    if renderer.name not in RENDER:
        raise UsageError(f"whatif: no {renderer.name} report yet (use {', '.join(RENDER)})")
    policies = plans.parse_policies(args.policies, plans.DEFAULT_POLICIES, "--policies")
    dp_policies = plans.parse_policies(args.dp_policies, plans.DEFAULT_DP_POLICIES, "--dp-policies")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs: expected a positive number, got {args.jobs}")
    if (args.prometheus or args.scrape) and args.paths:
        raise UsageError("whatif: give profiler PATHs or an online source, not both")
    if not (args.paths or args.prometheus or args.scrape):
        raise UsageError("whatif: give profiler PATHs, --prometheus URL or --scrape URL...")
    if args.paths:
        whole = applies.rule("", "it replays the whole capture")
        applies.check(args, {"profiler"}, "whatif", {k: whole for k in ("start", "end", "last")})
    else:
        applies.check(args, {"prometheus" if args.prometheus else "scrape"}, "whatif")
    if args.access_log and not (args.prometheus or args.scrape):
        raise UsageError(
            "whatif: --access-log needs --prometheus or --scrape (its upstreams are "
            "joined to the instances on host:port)"
        )
    common.check_output(args)
    jobs = args.jobs or (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    tty = sys.stderr.isatty()
    progress = (lambda n: print(f"replayed {n}", file=sys.stderr)) if tty else None
    if args.prometheus or args.scrape:
        from skewscope.whatif.online import whatif_online

        we, source = _online(args)
        logged = None
        if args.access_log:
            from skewscope.sources.access_log import read_access_requests

            logged = read_access_requests(
                args.access_log, max_line=common.limits_from_args(args).max_log_line_bytes
            )
        report = whatif_online(
            we, source, policies, dp_policies, jobs=jobs, progress=progress, logged=logged
        )
    else:
        from skewscope.sources.workload import load_request_log
        from skewscope.whatif.predict import whatif

        with common.read_progress() as reading:
            log = load_request_log(args.paths, progress=reading, budget=read_budget(args))
        report = whatif(
            log, ", ".join(args.paths), policies, dp_policies, jobs=jobs, progress=progress
        )
    render = RENDER[renderer.name]
    if args.output is None:
        out_tty = sys.stdout.isatty()
        width = common.text_width(args, terminal=out_tty)
        sys.stdout.write(render(report, width=width, color=out_tty))
    else:
        common.write_output(
            args.output, render(report, width=common.text_width(args, terminal=False)), args.force
        )
    return 0


def _online(args: argparse.Namespace) -> tuple[WorkloadEvidence, str]:
    """Evidence and the replay's histograms from --prometheus or --scrape, and the source's
    label for the report: its URLs redacted (no user:password@, no query), as diagnose shows
    them, so no output of the report carries a secret."""
    from skewscope.sources.auth import redact_url

    if args.prometheus:
        from skewscope.sources.online_workload import load_prometheus_workload

        start, end = readers.online_range(args)
        ev = readers.load_prometheus_evidence(args, None)
        we = load_prometheus_workload(
            ev,
            args.prometheus,
            start=start,
            end=end,
            selector=args.selector,
            auth=readers.auth_from_args(args),
            timeout_s=common.parse_duration(args.timeout, "--timeout"),
        )
        return we, redact_url(args.prometheus)
    from skewscope.sources.online_workload import load_scrape_workload

    we = load_scrape_workload(
        args.scrape,
        duration_s=common.parse_duration(args.duration, "--duration"),
        interval_s=common.parse_duration(args.interval, "--interval"),
        dialect=args.dialect,
        auth=readers.auth_from_args(args),
        timeout_s=common.parse_duration(args.timeout, "--timeout"),
        clock=current(),
    )
    return we, " ".join(redact_url(u) for u in args.scrape)
