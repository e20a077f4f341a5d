"""Command line: ``skewscope diagnose`` and ``skewscope simulate``.

``main(argv) -> int`` so tests call it in process. Every SkewscopeError becomes one line on
stderr and its exit code; heavy imports (polars, the simulator) happen inside the commands so
``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from skewscope import __version__
from skewscope.errors import SkewscopeError, UsageError

if TYPE_CHECKING:
    from skewscope.frame import Evidence
    from skewscope.report.model import Report
    from skewscope.sources.auth import HttpAuth

FORMATS = ("terminal", "markdown", "json")
EXTENSIONS = {".json": "json", ".md": "markdown", ".markdown": "markdown", ".txt": "terminal"}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="skewscope",
        description="Find and explain load skew across LLM inference instances and DP ranks.",
    )
    p.add_argument("--version", action="version", version=f"skewscope {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser(
        "diagnose",
        help="diagnose load skew from profiler folders, Prometheus or live /metrics",
        description="Offline: PATH is an msServiceProfiler instance folder or a folder of them "
        "(NAME=PATH names an instance). Online: --prometheus URL or --scrape URL...",
    )
    d.add_argument("paths", nargs="*", metavar="PATH", help="profiler folder(s), NAME=PATH")
    src = d.add_argument_group("online sources")
    src.add_argument("--prometheus", metavar="URL", help="Prometheus-compatible query API base")
    src.add_argument("--last", metavar="DURATION", help="range ending now, e.g. 30m, 2h")
    src.add_argument("--start", metavar="T", help="range start: epoch seconds or ISO 8601")
    src.add_argument("--end", metavar="T", help="range end: epoch seconds or ISO 8601")
    src.add_argument("--step", metavar="DURATION", help="query step = window (e.g. 15s)")
    src.add_argument("--selector", default="", help='label matchers, e.g. {model_name="m"}')
    src.add_argument("--scrape", nargs="+", metavar="URL", help="sample /metrics endpoints")
    src.add_argument("--duration", default="2m", help="scrape duration (default 2m)")
    src.add_argument("--interval", default="5s", help="scrape interval (default 5s)")
    src.add_argument("--dialect", choices=("vllm", "sglang", "mindie", "ms-service-metric"),
                     help="metric dialect (default: detected from the metric names)")
    auth = d.add_argument_group("online authentication and TLS (secrets are never printed)")
    auth.add_argument("--token-env", metavar="VAR",
                      help="bearer token from this env variable (default SKEWSCOPE_PROM_TOKEN)")
    auth.add_argument("--token-file", metavar="FILE", help="bearer token from this file")
    auth.add_argument("--user", help="basic-auth user")
    auth.add_argument("--password-env", metavar="VAR",
                      help="basic-auth password env variable (default SKEWSCOPE_PROM_PASSWORD)")
    auth.add_argument("--password-file", metavar="FILE", help="basic-auth password file")
    auth.add_argument("--ca-file", metavar="FILE", help="CA bundle to verify the server")
    auth.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    auth.add_argument("--cert", metavar="FILE", help="client certificate (PEM)")
    auth.add_argument("--key", metavar="FILE", help="client certificate key (PEM)")
    auth.add_argument("--timeout", default="30s", help="per-request timeout (default 30s)")
    d.add_argument("--level", default="auto", choices=("auto", "instance", "dp"))
    d.add_argument("--window", metavar="DURATION", help="window size (default: >= 24 windows)")
    d.add_argument("--format", choices=FORMATS, help="output format (default: terminal, or "
                   "from the -o extension)")
    d.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE")
    d.add_argument("--force", action="store_true", help="overwrite an existing -o FILE")

    s = sub.add_parser("simulate", help="simulate a cluster and write its evidence")
    s.add_argument("scenario", nargs="?", help="built-in scenario name or a .toml file")
    s.add_argument("--list", action="store_true", help="list the built-in scenarios")
    s.add_argument("--out", metavar="DIR", help="write msServiceProfiler folders here")
    s.add_argument("--generation", default="current",
                   choices=("current", "dec2025", "cann2025", "mindie"),
                   help="profiler CSV header generation")
    s.add_argument("--openmetrics", metavar="FILE", help="write an OpenMetrics history file")
    s.add_argument("--metrics-interval", default="5s",
                   help="OpenMetrics history: seconds between samples (default 5s)")
    s.add_argument("--serve", action="store_true", help="serve live /metrics per instance")
    s.add_argument("--metrics-dialect", default="vllm",
                   choices=("vllm", "sglang", "mindie", "ms-service-metric"))
    s.add_argument("--speed", type=float, default=1.0, help="live mode: simulated s per wall s")
    s.add_argument("--port", type=int, default=0, help="live mode: first port (0 = any free)")
    s.add_argument("--seed", type=int, help="override the scenario's seed")
    s.add_argument("--force", action="store_true", help="write into a non-empty --out DIR")
    return p


def parse_duration(text: str, what: str) -> float:
    """'90', '90s', '15m', '2h', '1d' -> seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    t = text.strip().lower()
    for suffix in ("ms", "s", "m", "h", "d"):
        if t.endswith(suffix):
            number, scale = t[: -len(suffix)], units[suffix]
            break
    else:
        number, scale = t, 1.0
    try:
        value = float(number) * scale
    except ValueError:
        raise UsageError(f"{what}: expected a duration like 30s, 15m or 2h, got {text!r}") from None
    if value <= 0:
        raise UsageError(f"{what}: expected a positive duration, got {text!r}")
    return value


def parse_time(text: str, what: str) -> float:
    """Epoch seconds or an ISO 8601 timestamp (UTC when no offset is given)."""
    import datetime as dt

    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{what}: expected epoch seconds or ISO 8601, got {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def _load_evidence(args: argparse.Namespace) -> Evidence:
    window = parse_duration(args.window, "--window") if args.window else None
    chosen = [bool(args.paths), bool(args.prometheus), bool(args.scrape)]
    if sum(chosen) != 1:
        raise UsageError("diagnose: give profiler PATHs, or --prometheus URL, or --scrape URL...")
    if args.paths:
        from skewscope.sources.profiler import load_profiler

        return load_profiler(args.paths, window_s=window)
    if args.prometheus:
        return _load_prometheus(args, window)
    from skewscope.sources.scrape import load_scrape

    return load_scrape(
        args.scrape,
        duration_s=parse_duration(args.duration, "--duration"),
        interval_s=parse_duration(args.interval, "--interval"),
        dialect=args.dialect,
        progress=sys.stderr.isatty(),
        window_s=window,
        auth=_auth(args),
        timeout_s=parse_duration(args.timeout, "--timeout"),
    )


def _auth(args: argparse.Namespace) -> HttpAuth:
    """Credentials and TLS options for any online source; secrets come from env or files."""
    from skewscope.sources.auth import HttpAuth

    options: dict[str, object] = {
        "token_file": args.token_file,
        "username": args.user,
        "password_file": args.password_file,
        "ca_file": args.ca_file,
        "insecure_skip_verify": args.insecure,
        "client_cert": args.cert,
        "client_key": args.key,
    }
    if args.token_env:
        options["token_env"] = args.token_env
    if args.password_env:
        options["password_env"] = args.password_env
    return HttpAuth.from_options(**options)  # type: ignore[arg-type]


def _load_prometheus(args: argparse.Namespace, window: float | None) -> Evidence:
    from skewscope.sources.prometheus import load_prometheus

    if args.last and (args.start or args.end):
        raise UsageError("--last cannot be combined with --start/--end")
    if args.last:
        end = time.time()
        start = end - parse_duration(args.last, "--last")
    elif args.start and args.end:
        start, end = parse_time(args.start, "--start"), parse_time(args.end, "--end")
    else:
        raise UsageError("--prometheus needs a range: --last 30m, or --start T --end T")
    if end <= start:
        raise UsageError("--end must be after --start")
    auth = _auth(args)
    return load_prometheus(
        args.prometheus,
        start=start,
        end=end,
        step_s=parse_duration(args.step, "--step") if args.step else None,
        selector=args.selector,
        dialect=args.dialect,
        auth=auth,
        timeout_s=parse_duration(args.timeout, "--timeout"),
        window_s=window,
    )


def _output_format(args: argparse.Namespace) -> str:
    if args.format:
        return str(args.format)
    if args.output:
        return EXTENSIONS.get(Path(args.output).suffix.lower(), "terminal")
    return "terminal"


def emit_report(report: Report, fmt_name: str, output: str | None, force: bool) -> None:
    """Render and write; refuses to overwrite a file without --force."""
    if output and Path(output).exists() and not force:
        raise UsageError(f"-o {output}: file exists (use --force to overwrite)")
    if fmt_name == "json":
        from skewscope.report import jsonout

        text = jsonout.render(report) + "\n"
    elif fmt_name == "markdown":
        from skewscope.report import markdown

        text = markdown.render(report) + "\n"
    else:
        from rich.console import Console

        from skewscope.report import terminal

        if output is None:
            terminal.render(report, Console(width=None if sys.stdout.isatty() else 140))
            return
        console = Console(record=True, width=140, file=io.StringIO())
        terminal.render(report, console)
        text = console.export_text()
    if output is None:
        sys.stdout.write(text)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as e:
        raise UsageError(f"-o {output}: cannot write ({e.strerror})") from None


def cmd_diagnose(args: argparse.Namespace) -> int:
    from skewscope.analysis.diagnose import diagnose

    fmt_name = _output_format(args)
    evidence = _load_evidence(args)
    report = diagnose(evidence, level=args.level)
    emit_report(report, fmt_name, args.output, args.force)
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from skewscope.sim.scenario import builtin_scenarios, load_scenario

    if args.list:
        for name, sc in sorted(builtin_scenarios().items()):
            print(f"{name:18} {sc.summary}")
        return 0
    if not args.scenario:
        raise UsageError("simulate: give a SCENARIO (name or .toml file), or --list")
    if not (args.out or args.openmetrics or args.serve):
        raise UsageError("simulate: choose at least one output: --out DIR, --openmetrics FILE, "
                         "--serve")
    from skewscope.sim.engine import simulate

    scenario = load_scenario(args.scenario)
    result = simulate(scenario, seed=args.seed, record_members=bool(args.out))
    if args.out:
        out = Path(args.out)
        if out.exists() and any(out.iterdir()) and not args.force:
            raise UsageError(f"--out {out}: folder is not empty (use --force)")
        from skewscope.sim.writers.profiler import write_profiler
        from skewscope.sim.writers.truth import write_truth

        write_profiler(result, out, generation=args.generation)
        write_truth(result, out)
        print(f"wrote {len(result.instances)} instance folder(s) and truth.json to {out}")
    if args.openmetrics:
        from skewscope.sim.writers.openmetrics import write_openmetrics

        write_openmetrics(
            result,
            Path(args.openmetrics),
            dialect=args.metrics_dialect,
            step_s=parse_duration(args.metrics_interval, "--metrics-interval"),
        )
        print(f"wrote OpenMetrics history to {args.openmetrics}")
    if args.serve:
        return _serve(result, args)
    return 0


def _serve(result: object, args: argparse.Namespace) -> int:
    from skewscope.sim.writers.live import serve

    with serve(result, args.metrics_dialect, base_port=args.port,  # type: ignore[arg-type]
               speed=args.speed) as cluster:
        for name, url in cluster.urls.items():
            print(f"serving {name} at {url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            cluster.wait()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or argparse's own usage error
        return int(e.code or 0)
    try:
        if args.command == "diagnose":
            return cmd_diagnose(args)
        return cmd_simulate(args)
    except SkewscopeError as e:
        print(f"skewscope: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("skewscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
