"""What several commands share: durations and times, the online-source and auth options, the
settings from --config, and writing a report (the readers of online evidence the options give:
``cli/readers.py``)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import re
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from skewscope.catalogue import Dialect
from skewscope.errors import UsageError

if TYPE_CHECKING:
    from skewscope.config import Thresholds
    from skewscope.report.comparison import Comparison
    from skewscope.report.model import Report
    from skewscope.report.registry import Renderer
    from skewscope.settings import SourceLimits
    from skewscope.sources.profiler_range import ClockPolicy

DIALECT_CHOICES = tuple(d.value for d in Dialect)
_DURATION_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
# The times a report can show (datetime's years 1..9999, UTC) bound every time given; no range,
# window or interval anyone means is longer than a century.
TIME_MIN_S = -62135596800.0  # 0001-01-01T00:00:00Z
TIME_MAX_S = 253402300799.0  # 9999-12-31T23:59:59Z
MAX_DURATION_S = 100 * _DURATION_UNITS["y"]


def parse_duration(text: str, what: str) -> float:
    """'90s', '15m', '2h', '1h30m', '500ms' (Prometheus style) -> seconds; positive and at most
    a century. A unit is required: a bare '10' is refused rather than read as 10 s."""
    t = text.strip().lower()
    parts = _DURATION_PART.findall(t)
    if not parts or "".join(n + u for n, u in parts) != t:
        try:
            float(t)
        except ValueError:
            raise UsageError(
                f"{what}: expected a positive duration like 30s, 15m, 2h or 1h30m, got {text!r}"
            ) from None
        raise UsageError(f"{what}: {text!r} needs a unit, e.g. {t}s, {t}m, {t}h or {t}d") from None
    value = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{what}: expected a finite positive duration, got {text!r}")
    if value > MAX_DURATION_S:
        raise UsageError(f"{what}: expected a duration of at most 100y, got {text!r}")
    return value


def parse_time(text: str, what: str) -> float:
    """Epoch seconds or an ISO 8601 timestamp (UTC when no offset is given), between the years
    1 and 9999 (what a report can show)."""
    import datetime as dt

    try:
        value = float(text)
    except ValueError:
        try:
            t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise UsageError(
                f"{what}: expected epoch seconds or ISO 8601 (years 1..9999), got {text!r}"
            ) from None
        if t.tzinfo is None:
            t = t.replace(tzinfo=dt.UTC)
        try:
            value = t.timestamp()
        except (OverflowError, ValueError):  # 9999-12-31T23:00-05:00 is past the last year
            value = math.inf
    return check_time(value, what, text)


def check_time(value: float, what: str, shown: str | float | None = None) -> float:
    """``value`` (epoch seconds) when a report can show it, else a UsageError naming ``what``."""
    if not math.isfinite(value) or not TIME_MIN_S <= value <= TIME_MAX_S:
        got = shown if shown is not None else value
        raise UsageError(
            f"{what}: expected a time between the years 1 and 9999 (epoch seconds "
            f"{TIME_MIN_S:.0f}..{TIME_MAX_S:.0f}), got {got!r}"
        )
    return value


def add_online_source_args(p: argparse.ArgumentParser, *, fixed_range: bool = True) -> None:
    """--prometheus / --scrape and their range, selector and dialect options.

    ``fixed_range=False`` (watch: the range always ends now) leaves out --start, --end and
    --duration.
    """
    from skewscope.cli import applies

    applies.track(p)  # an option the chosen source does not read is refused (cli/applies.py)
    if fixed_range:
        src = p.add_argument_group("online sources (--last/--start/--end also zoom into a capture)")
    else:
        src = p.add_argument_group("online sources")
    src.add_argument("--prometheus", metavar="URL", help="Prometheus-compatible query API base")
    src.add_argument(
        "--last",
        metavar="DURATION",
        help="range ending now, e.g. 30m, 2h (offline: the capture's last DURATION)"
        if fixed_range
        else "range ending now, e.g. 30m, 2h",
    )
    if fixed_range:
        src.add_argument("--start", metavar="T", help="range start: epoch seconds or ISO 8601")
        src.add_argument("--end", metavar="T", help="range end: epoch seconds or ISO 8601")
    src.add_argument("--step", metavar="DURATION", help="query step = window (e.g. 15s)")
    src.add_argument("--selector", default="", help='label matchers, e.g. {model_name="m"}')
    src.add_argument("--scrape", nargs="+", metavar="URL", help="sample /metrics endpoints")
    if fixed_range:
        src.add_argument("--duration", default="2m", help="scrape duration (default 2m)")
    src.add_argument("--interval", default="5s", help="scrape interval (default 5s)")
    src.add_argument(
        "--dialect",
        choices=DIALECT_CHOICES,
        help="metric dialect (default: detected from the metric names)",
    )
    src.add_argument(
        "--role-label",
        metavar="NAME",
        help="label naming each unit's prefill/decode pool (default: the "
        "dialect's: ms-service-metric role, Dynamo worker_type, llm-d "
        "llm_d_ai_role); docs/online.md",
    )
    src.add_argument(
        "--device-map",
        metavar="FILE",
        help="TOML [devices] table placing device-exporter series on units where "
        "pod and host labels do not match (docs/online.md)",
    )
    src.add_argument(
        "--device-selector",
        default="",
        metavar="MATCHERS",
        help='label matchers for device-exporter series (--prometheus), e.g. {job="dcgm"}',
    )


def add_auth_args(p: argparse.ArgumentParser) -> None:
    from skewscope.cli import applies

    applies.track(p)
    auth = p.add_argument_group("online authentication and TLS (secrets are never printed)")
    auth.add_argument(
        "--token-env",
        metavar="VAR",
        help="bearer token from this env variable (default: SKEWSCOPE_PROM_TOKEN, "
        "sent to --prometheus only, never to --scrape targets)",
    )
    auth.add_argument("--token-file", metavar="FILE", help="bearer token from this file")
    auth.add_argument("--user", help="basic-auth user")
    auth.add_argument(
        "--password-env",
        metavar="VAR",
        help="basic-auth password env variable (default SKEWSCOPE_PROM_PASSWORD)",
    )
    auth.add_argument("--password-file", metavar="FILE", help="basic-auth password file")
    auth.add_argument("--ca-file", metavar="FILE", help="CA bundle to verify the server")
    auth.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    auth.add_argument("--cert", metavar="FILE", help="client certificate (PEM)")
    auth.add_argument("--key", metavar="FILE", help="client certificate key (PEM)")
    auth.add_argument(
        "--timeout",
        default="30s",
        help="total time per request: connect, headers and body (default 30s)",
    )


def add_output_args(p: argparse.ArgumentParser) -> None:
    from skewscope.report.registry import names

    p.add_argument(
        "--format",
        choices=names(),
        help="output format (default: terminal, or from the -o extension)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE")
    p.add_argument("--force", action="store_true", help="overwrite an existing -o FILE")
    add_width_arg(p)


WIDTH_RANGE = (40, 1000)  # columns: narrower is laid out as 40 anyway; wider is no screen
DEFAULT_TEXT_WIDTH = 140  # the text report's width when nothing says another


def add_width_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--width",
        metavar="N",
        help="columns of the text report (default: $COLUMNS, else the terminal's, "
        f"else {DEFAULT_TEXT_WIDTH} when piped or written with -o)",
    )


def text_width(args: argparse.Namespace | None, *, terminal: bool) -> int | None:
    """The text report's width: --width N, else $COLUMNS, else the terminal's (``terminal``:
    the report goes to a terminal), else None (the renderer's default, 140)."""
    import os

    given = getattr(args, "width", None)
    if given is not None:
        return _columns(given, "--width")
    env = os.environ.get("COLUMNS", "").strip()
    if env:
        try:
            return _columns(env, "COLUMNS")
        except UsageError:
            pass  # a shell's odd COLUMNS is not the user's option: fall back quietly
    return shutil.get_terminal_size().columns if terminal else None


def _columns(text: str, what: str) -> int:
    lo, hi = WIDTH_RANGE
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not lo <= value <= hi:
        raise UsageError(f"{what}: expected a number of columns {lo}..{hi}, got {text!r}")
    return value


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while an online run loads and judges its evidence.

    Decoding the servers' answers allocates a million short-lived containers (JSON points, value
    table keys) and makes no reference cycles; the collector's full passes over the growing
    heap took ~0.3 CPU s of diagnose's ~1.2 on the 1,024-unit fleet (docs/performance.md) and
    collected nothing. Objects are still freed by reference counting; the collector runs again
    once the block ends (if it was on). The block's survivors (mostly the modules imported on
    the warm-up thread) are moved to the oldest generation first (``freeze`` + ``unfreeze``:
    nothing stays frozen), so the first pass afterwards does not walk them (~40 ms); any cycle
    among them is found by the next full pass.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:  # (objects another caller froze stay frozen)
            gc.freeze()  # the survivors (the imported modules, mostly) join the oldest generation
            gc.unfreeze()
        if was_on:
            gc.enable()


@contextlib.contextmanager
def read_progress(every_s: float | None = None) -> Iterator[Callable[[int, int], None]]:
    """The profiler CSV megabytes read (``diagnose`` and ``whatif`` PATHs), on the one progress
    display: a bar on a terminal, else a line every ``every_s`` (a fleet of 10,000 folders takes
    a while; a small read ends before the first line)."""
    from skewscope.progress import Progress

    bar: list[Progress] = []

    def update(done: int, total: int) -> None:
        if not bar:
            bar.append(Progress("reading profiler CSVs", total / 1e6, "MB", every_s=every_s))
        bar[0].update(done / 1e6)

    try:
        yield update
    finally:
        for b in bar:
            b.close()


def warm_imports(*modules: str) -> threading.Thread:
    """Import ``modules`` on a thread while the caller waits on servers (an online source's
    queries): the interpreter's import work overlaps the servers' instead of following it.
    The caller joins it before its own imports (which raise any failure)."""
    import importlib

    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # the caller's own import raises it, named
                return

    thread = threading.Thread(target=load, name="skewscope-imports", daemon=True)
    thread.start()
    return thread


# The options that carry a URL (or a PATH that may be one) and those that carry label matchers:
# bounded before anything is read (``SourceLimits.max_url_kb``, ``max_selector_kb``).
_URL_OPTIONS = (
    ("prometheus", "--prometheus"),
    ("scrape", "--scrape"),
    ("gateway_url", "--gateway-url"),
    ("paths", "PATH"),
)
_SELECTOR_OPTIONS = (("selector", "--selector"), ("device_selector", "--device-selector"))


def check_option_sizes(args: argparse.Namespace) -> None:
    """A URL, PATH or selector of absurd size (a 120 KB URL path, a 100 KB --selector) is one
    usage line naming the option, not an httpx ``InvalidURL`` traceback later."""
    limits = limits_from_args(args)
    for options, most, name, unit in (
        (_URL_OPTIONS, limits.max_url_chars, "max_url_kb", limits.max_url_kb),
        (_SELECTOR_OPTIONS, limits.max_selector_chars, "max_selector_kb", limits.max_selector_kb),
    ):
        for attr, option in options:
            value = getattr(args, attr, None)
            for text in [value] if isinstance(value, str) else value or []:
                if isinstance(text, str) and len(text) > most:
                    raise UsageError(
                        f"{option}: {len(text):,} characters, more than the "
                        f"{unit:g} KiB allowed ([sources] {name} in --config)"
                    )


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="TOML file whose [thresholds] table overrides the analysis' "
        "thresholds (the report lists those it used) and whose [sources] table "
        "sets the sources' limits (docs/configuration.md)",
    )


def thresholds_from_args(args: argparse.Namespace) -> Thresholds:
    """The analysis' thresholds: the defaults, or those --config FILE sets."""
    return _settings_from_args(args)[0]


def role_label_from_args(args: argparse.Namespace) -> str:
    """--role-label, else --config's ``[sources] role_label`` (checked), else "" (the
    dialect's own label)."""
    from skewscope.sources.pools import check_role_label

    given = getattr(args, "role_label", None)
    return check_role_label(given) if given else limits_from_args(args).role_label


def limits_from_args(args: argparse.Namespace) -> SourceLimits:
    """The sources' limits: the defaults, or those --config FILE sets."""
    return _settings_from_args(args)[1]


def profiler_clocks(args: argparse.Namespace) -> ClockPolicy:
    """The profiler reader's clock policy, with --config's ``profiler_utc_offset_h``."""
    from skewscope.sources.profiler_range import ClockPolicy

    return ClockPolicy(datetime_utc_offset_h=limits_from_args(args).profiler_utc_offset_h)


_CONFIG_TABLES = ("thresholds", "sources")


def _settings_from_args(args: argparse.Namespace) -> tuple[Thresholds, SourceLimits]:
    """--config FILE read and checked whole, once per command (kept on ``args``): a
    ``[thresholds]`` and a ``[sources]`` table of name = number, each optional."""
    got: tuple[Thresholds, SourceLimits] | None = getattr(args, "_settings", None)
    if got is None:
        got = _read_config(getattr(args, "config", None))
        args._settings = got
    return got


def _read_config(path: str | None) -> tuple[Thresholds, SourceLimits]:
    from skewscope.config import DEFAULT_THRESHOLDS
    from skewscope.settings import DEFAULT_LIMITS
    from skewscope.smallfile import load_toml

    if not path:
        return DEFAULT_THRESHOLDS, DEFAULT_LIMITS
    doc = load_toml(path, f"--config {path}")  # a regular, small, UTF-8, shallow file (exit 3)
    for key, table in doc.items():
        if key not in _CONFIG_TABLES:
            raise UsageError(
                f"--config {path}: {key}: unknown key (expected a [thresholds] or [sources] table)"
            )
        if not isinstance(table, dict):
            raise UsageError(f"--config {path}: {key}: expected a table, got {table!r}")
    where = f"--config {path}:"
    return (
        DEFAULT_THRESHOLDS.updated(doc.get("thresholds", {}), f"{where} [thresholds]"),
        DEFAULT_LIMITS.updated(doc.get("sources", {}), f"{where} [sources]"),
    )


def pick_renderer(args: argparse.Namespace) -> Renderer:
    """--format wins; else the -o extension; else the terminal report."""
    from skewscope.report.registry import DEFAULT_RENDERER, by_name, for_path

    if args.format:
        return by_name(args.format)
    if args.output:
        chosen = for_path(args.output)
        if chosen is not None:
            return chosen
    return by_name(DEFAULT_RENDERER)


def check_output(args: argparse.Namespace) -> None:
    """Refuse to overwrite, or a bad --width, before any work is done, not after a long run."""
    text_width(args, terminal=False)
    if args.output:
        refuse_overwrite(args.output, "-o", args.force)


def refuse_overwrite(path: str, option: str, force: bool) -> None:
    """A UsageError when ``path`` is a folder, or an existing file without ``force``; a device
    or FIFO (/dev/stdout, /dev/null) is written into, which overwrites nothing."""
    from skewscope.atomic import is_special

    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{option} {path}: is a folder, expected a file")
    if target.exists() and not force and not is_special(target):
        raise UsageError(f"{option} {path}: file exists (use --force to overwrite)")


def emit_report(report: Report | Comparison, args: argparse.Namespace) -> None:
    """Render with the chosen renderer; write atomically to -o FILE, or to stdout."""
    renderer = pick_renderer(args)
    if args.output is None:
        tty = sys.stdout.isatty()
        width = text_width(args, terminal=tty)
        sys.stdout.write(renderer.render(report, width=width, color=tty))
        return
    write_output(
        args.output, renderer.render(report, width=text_width(args, terminal=False)), args.force
    )


def write_output(output: str, text: str, force: bool) -> None:
    from skewscope.atomic import write_text_atomic

    refuse_overwrite(output, "-o", force)
    try:
        write_text_atomic(output, text)
    except OSError as e:
        raise UsageError(f"-o {output}: cannot write ({e.strerror})") from None
