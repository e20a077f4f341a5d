"""Options -> the readers of online evidence: credentials, the --prometheus range and reader
(one-shot and watch's incremental one), --scrape, the gateway's view (access logs, a router's
metrics, --gateway-url) and --device-map. Shared by diagnose, whatif, compare, watch and
backtest; ``cli/common.py`` keeps the option parsing and the output."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from skewscope import clock
from skewscope.cli.common import (
    check_time,
    limits_from_args,
    parse_duration,
    parse_time,
    role_label_from_args,
)
from skewscope.errors import UsageError

if TYPE_CHECKING:
    from skewscope.frame import Evidence, GatewayEvidence
    from skewscope.sources.access_log_follow import AccessLogFollower
    from skewscope.sources.auth import HttpAuth
    from skewscope.sources.devices import DeviceMap
    from skewscope.sources.prom_incremental import IncrementalPrometheus


def auth_from_args(args: argparse.Namespace) -> HttpAuth:
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


def online_range(args: argparse.Namespace) -> tuple[float, float]:
    """(start, end) in epoch seconds from --last or --start/--end."""
    if args.last and (args.start or args.end):
        raise UsageError("--last cannot be combined with --start/--end")
    if args.last:
        end = clock.current().time()
        start = end - parse_duration(args.last, "--last")
        return check_time(start, "--last", args.last), end
    if not (args.start and args.end):
        raise UsageError("--prometheus needs a range: --last 30m, or --start T --end T")
    start, end = parse_time(args.start, "--start"), parse_time(args.end, "--end")
    if end <= start:
        raise UsageError("--end must be after --start")
    return start, end


def load_prometheus_evidence(args: argparse.Namespace, window: float | None) -> Evidence:
    start, end = online_range(args)
    return prometheus_loader(args, window)(start, end)


def _prometheus_options(args: argparse.Namespace, window: float | None) -> dict[str, Any]:
    """The --prometheus reader's keyword arguments from the shared options, parsed once."""
    return {
        "step_s": parse_duration(args.step, "--step") if args.step else None,
        "window_s": window,
        "selector": args.selector,
        "dialect": args.dialect,
        "auth": auth_from_args(args),
        "timeout_s": parse_duration(args.timeout, "--timeout"),
        "limits": limits_from_args(args),
        "device_selector": getattr(args, "device_selector", ""),
        "device_map": device_map_from_args(args),
        "role_label": role_label_from_args(args),
    }


def prometheus_loader(
    args: argparse.Namespace, window: float | None
) -> Callable[[float, float], Evidence]:
    """(start, end) -> Evidence from --prometheus with the shared options, parsed once (watch
    queries a new range every run)."""
    from skewscope.sources.prometheus import load_prometheus

    url, options = args.prometheus, _prometheus_options(args, window)

    def load(start: float, end: float) -> Evidence:
        return load_prometheus(url, start=start, end=end, **options)

    return load


def incremental_prometheus(
    args: argparse.Namespace, window: float | None, debug: Callable[[str], None] | None = None
) -> IncrementalPrometheus:
    """watch's --prometheus reader: the same options as ``prometheus_loader``, keeping the
    tables of the windows already read between runs (sources/prom_incremental.py)."""
    from skewscope.sources.prom_incremental import IncrementalPrometheus

    return IncrementalPrometheus(args.prometheus, debug=debug, **_prometheus_options(args, window))


def with_gateway(
    args: argparse.Namespace,
    load: Callable[[float, float], Evidence],
    follower: AccessLogFollower | None = None,
) -> Callable[[float, float], Evidence]:
    """``load`` with the gateway's view over the same range attached (watch: the gateway's
    shares each run) — see ``read_gateway``."""
    from dataclasses import replace

    # credentials are read once, not at every run (secrets come from files or the environment)
    auth = auth_from_args(args) if getattr(args, "prometheus", None) else None

    def both(start: float, end: float) -> Evidence:
        engines = load(start, end)
        gw = read_gateway(args, engines, (start, end), follower, auth)
        return replace(engines, gateway=gw) if gw is not None else engines

    return both


def access_log_follower(args: argparse.Namespace, keep_s: float) -> AccessLogFollower | None:
    """watch's --access-log, followed like ``tail -F`` (checked readable now)."""
    if not getattr(args, "access_log", None):
        return None
    from skewscope.sources.access_log_follow import AccessLogFollower

    follower = AccessLogFollower(
        args.access_log, keep_s=keep_s, max_line=limits_from_args(args).max_log_line_bytes
    )
    follower.check()
    return follower


def _engine_windows(engines: Evidence) -> tuple[float, float, int] | None:
    """(first window start, window length, count) of the engines' grid, for the gateway's
    per-window series; None without engine windows."""
    df, w = engines.instance.df, engines.instance.window_s
    if df.height == 0 or not w > 0:
        return None
    first = float(df["window_start_s"].min())  # type: ignore[arg-type]
    last = float(df["window_start_s"].max())  # type: ignore[arg-type]
    return first, float(w), round((last - first) / w) + 1


def load_gateway_evidence(args: argparse.Namespace, engines: Evidence) -> GatewayEvidence | None:
    """diagnose's gateway view (``read_gateway``) over its --prometheus range."""
    span = online_range(args) if getattr(args, "prometheus", None) else None
    return read_gateway(args, engines, span)


def read_gateway(
    args: argparse.Namespace,
    engines: Evidence,
    span: tuple[float, float] | None,
    follower: AccessLogFollower | None = None,
    auth: HttpAuth | None = None,
) -> GatewayEvidence | None:
    """The --access-log files (``follower`` when watch follows them) over the engines' windows,
    else a router's metrics in the --prometheus the engines came from over ``span`` (``auth``:
    its credentials, read from the options when not given); then --gateway-url's live worker
    list merged in."""
    gateway: GatewayEvidence | None = None
    windows = _engine_windows(engines)
    if follower is not None:
        gateway = follower.evidence(windows)
    elif getattr(args, "access_log", None):
        from skewscope.sources.access_log import read_access_logs

        gateway = read_access_logs(
            args.access_log, windows, max_line=limits_from_args(args).max_log_line_bytes
        )
    elif getattr(args, "prometheus", None) and span is not None:
        from skewscope.sources.gateway_router import load_router_prometheus

        gateway = load_router_prometheus(
            args.prometheus,
            start=span[0],
            end=span[1],
            windows=windows,
            auth=auth or auth_from_args(args),
            timeout_s=parse_duration(args.timeout, "--timeout"),
            limits=limits_from_args(args),
        )
    if getattr(args, "gateway_url", None):
        from skewscope.sources.gateway_live import read_workers, with_worker_list

        # no credentials: the Prometheus' token is not the router's to see
        workers = read_workers(
            args.gateway_url,
            timeout_s=parse_duration(args.timeout, "--timeout"),
            limits=limits_from_args(args),
        )
        gateway = with_worker_list(gateway, workers, args.gateway_url)
    return gateway


def load_scrape_evidence(args: argparse.Namespace, window: float | None) -> Evidence:
    from skewscope.sources.scrape import load_scrape

    return load_scrape(
        args.scrape,
        duration_s=parse_duration(args.duration, "--duration"),
        interval_s=parse_duration(args.interval, "--interval"),
        dialect=args.dialect,
        progress=True,  # a bar on a terminal, else a line on stderr now and then
        window_s=window,
        auth=auth_from_args(args),
        timeout_s=parse_duration(args.timeout, "--timeout"),
        device_map=device_map_from_args(args),
        limits=limits_from_args(args),
        role_label=role_label_from_args(args),
        clock=clock.current(),
    )


def device_map_from_args(args: argparse.Namespace) -> DeviceMap | None:
    """The --device-map file, read once (None when not given)."""
    from skewscope.sources.devices import load_device_map

    path = getattr(args, "device_map", None)
    return load_device_map(path) if path else None
