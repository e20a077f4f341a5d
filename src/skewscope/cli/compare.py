"""``skewscope compare BEFORE AFTER``: did the fix converge?

Each side is a profiler folder (diagnosed now), a JSON report saved by ``diagnose --format
json``, or, with ``--prometheus URL``, a time range of the same Prometheus
(``--before-start/--before-end/--after-start/--after-end``). ``--fail-on`` turns the verdict
into exit code 6 for CI or a canary gate.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewscope.catalogue import CompareVerdict, FailOn
from skewscope.cli import applies, common, readers
from skewscope.errors import GATE_EXIT_CODE, InputError, UsageError

if TYPE_CHECKING:
    from skewscope.config import Thresholds
    from skewscope.report.comparison import Comparison


# compare's Prometheus ranges, read with --prometheus only
RANGES = {
    f"{side}_{edge}": applies.rule("prometheus", "a range of the Prometheus")
    for side in ("before", "after")
    for edge in ("start", "end")
}
# what only a fresh diagnosis reads: two saved reports keep the windows and level they have
DIAGNOSIS = {
    "window": applies.rule("profiler prometheus", "the diagnosis' window"),
    "level": applies.rule("profiler prometheus", "the diagnosis' level"),
}


def register(sub: Any) -> None:
    c: argparse.ArgumentParser = sub.add_parser(
        "compare",
        help="compare two runs (before/after a fix): did the load converge?",
        description="BEFORE and AFTER are profiler folders or JSON reports (diagnose --format "
        "json); or give --prometheus URL with --before-start/--before-end/--after-start/"
        "--after-end. Exit 6 when --fail-on matches.",
    )
    applies.track(c)  # --step, --selector ... without --prometheus are refused
    c.add_argument("before", nargs="?", metavar="BEFORE", help="profiler folder or JSON report")
    c.add_argument("after", nargs="?", metavar="AFTER", help="profiler folder or JSON report")
    prom = c.add_argument_group("Prometheus: two ranges of the same server")
    prom.add_argument("--prometheus", metavar="URL", help="Prometheus-compatible query API base")
    for side in ("before", "after"):
        for edge in ("start", "end"):
            prom.add_argument(
                f"--{side}-{edge}",
                metavar="T",
                help=f"{side} range {edge}: epoch seconds or ISO 8601",
            )
    prom.add_argument("--step", metavar="DURATION", help="query step = window (e.g. 15s)")
    prom.add_argument("--selector", default="", help='label matchers, e.g. {model_name="m"}')
    prom.add_argument(
        "--dialect",
        choices=common.DIALECT_CHOICES,
        help="metric dialect (default: detected from the metric names)",
    )
    common.add_auth_args(c)
    c.add_argument("--level", default="auto", choices=("auto", "instance", "dp"))
    c.add_argument("--window", metavar="DURATION", help="window size (default: >= 24 windows)")
    common.add_config_arg(c)
    c.add_argument(
        "--fail-on",
        choices=[str(f) for f in FailOn],
        help="exit 6 when the after side is still imbalanced (verdict not "
        "converged), or only when it got worse",
    )
    common.add_output_args(c)
    c.set_defaults(run=run)


def _report(
    args: argparse.Namespace, path: str | None, side: str, th: Thresholds
) -> dict[str, Any]:
    """One side as a report dict (the JSON report's form, ``document.report_document``)."""
    from skewscope.analysis.diagnose import diagnose
    from skewscope.report.document import report_document

    window = common.parse_duration(args.window, "--window") if args.window else None
    if args.prometheus:
        start = common.parse_time(getattr(args, f"{side}_start"), f"--{side}-start")
        end = common.parse_time(getattr(args, f"{side}_end"), f"--{side}-end")
        if end <= start:
            raise UsageError(f"--{side}-end must be after --{side}-start")
        evidence = readers.prometheus_loader(args, window)(start, end)
        return report_document(diagnose(evidence, level=args.level, th=th))
    assert path is not None
    p = Path(path)
    if p.exists() and not p.is_dir():  # a file, or a FIFO/device the reader refuses
        return load_json_report(p)
    from skewscope.sources.profiler import load_profiler

    evidence = load_profiler([path], window_s=window, clocks=common.profiler_clocks(args))
    return report_document(diagnose(evidence, level=args.level, th=th))


def load_json_report(path: Path) -> dict[str, Any]:
    """A saved diagnose report; it must carry the per-window series (schema_version >= 2)."""
    from skewscope.cli.saved_report import read_report
    from skewscope.report.model import SCHEMA_VERSION

    doc = read_report(path)  # bounded, parsed, every field compare reads type-checked
    if doc.get("kind") == "compare":
        raise InputError(f"{path}: is a compare report; give a diagnose report")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version < 2 or version > SCHEMA_VERSION:
        raise InputError(
            f"{path}: schema_version {version!r}: compare needs 2..{SCHEMA_VERSION} (a report "
            "with per-window series; re-run diagnose --format json)"
        )
    for key in ("hot_units", "starved_units"):
        if key not in doc:
            raise InputError(f"{path}: field {key!r} is missing (a diagnose report holds it)")
    return doc


def comparison(args: argparse.Namespace) -> Comparison:
    from skewscope.analysis.compare import compare

    if args.prometheus:
        if args.before or args.after:
            raise UsageError("compare: give BEFORE AFTER paths or --prometheus, not both")
        missing = [
            f"--{s}-{e}"
            for s in ("before", "after")
            for e in ("start", "end")
            if not getattr(args, f"{s}_{e}")
        ]
        if missing:
            raise UsageError(f"compare --prometheus needs {', '.join(missing)}")
        labels = (
            f"{args.before_start} .. {args.before_end}",
            f"{args.after_start} .. {args.after_end}",
        )
    else:
        if not (args.before and args.after):
            raise UsageError(
                "compare: give BEFORE and AFTER (profiler folders or JSON reports), "
                "or --prometheus URL with --before-start/--before-end/"
                "--after-start/--after-end"
            )
        labels = (args.before, args.after)
        saved = Path(args.before).is_file() and Path(args.after).is_file()
        applies.check(
            args, {"report"} if saved else {"profiler"}, "compare", {**RANGES, **DIAGNOSIS}
        )
    th = common.thresholds_from_args(args)
    before = _report(args, args.before, "before", th)
    after = _report(args, args.after, "after", th)
    return compare(before, after, labels, th=th)


def gate(fail_on: str | None, verdict: str) -> int:
    """Exit code for --fail-on: 6 when the gate trips, else 0."""
    if fail_on == FailOn.WORSE and verdict == CompareVerdict.WORSE:
        return GATE_EXIT_CODE
    if fail_on == FailOn.IMBALANCED and verdict != CompareVerdict.CONVERGED:
        return GATE_EXIT_CODE
    return 0


def run(args: argparse.Namespace) -> int:
    common.pick_renderer(args)
    common.check_output(args)
    result = comparison(args)
    common.emit_report(result, args)
    return gate(args.fail_on, result.verdict)
