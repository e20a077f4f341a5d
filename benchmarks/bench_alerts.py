"""The fleet-day alert benchmark (issue 21 section 1): a simulated day of a fleet with every kind
of operational noise and every kind of skew, backfilled into a real Prometheus, and side by side
over it, all evaluated at explicit times (no wall-clock replay):
  * skewscope's generated rules (``skewscope rules``), through the backtest evaluator;
  * ``watch``'s verdicts at its cadence: ``Watcher.run_once`` at every ``--every`` instant with
    its ``--last`` look-back, incidents from its own tracker (calm-runs hysteresis) and store;
  * three rules from the field (field_rules.py) through ``query_range`` at the rules' step.
Each is scored against the day's truth.json (alert_score.py) at the instance and the DP level.

    python benchmarks/bench_alerts.py [--short] [--dialect vllm --dialect sglang] [--seed N]
                                      [--work DIR] [--json OUT] [--day DIR]

``--day DIR`` evaluates an existing day (DIR/history.om + DIR/truth.json) instead of writing one.
Needs ``prometheus`` and ``promtool`` on PATH; Prometheus binds 127.0.0.1 on a free port.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from alert_eval import Fired, promql_episodes, watch_episodes
from alert_score import Score, Truth, read_truth, score
from field_rules import field_rules
from skewscope.monitor.incidents import CALM_RUNS
from skewscope.sources.prom_client import PromClient

WATCH_LAST_S = 900.0  # watch's defaults (cli/watch.py): --last 15m, --every 30s
WATCH_EVERY_S = 30.0
# The short day's skews last ~7 min, sized for 1 min windows: watch judges them over 6 of them
# (its --last 15m needs a unit hot for half of 15 windows, longer than such a skew).
SHORT_WATCH = {"last_s": 360.0, "window_s": 60.0}
LEVELS = ("instance", "dp")
SOURCES = ("rules", "watch", "field")
STEP_S = 60.0  # the rules' evaluation step (the backtest's default), the field rules' too


@dataclass(frozen=True)
class DayRun:
    dialect: str
    truth: Truth
    scores: list[Score]
    notes: list[str]
    seconds: dict[str, float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"prometheus exited with {proc.returncode} before it was ready")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/-/ready").status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} not ready after {timeout_s:g} s")


def backfill(history: Path, blocks: Path) -> None:
    """``promtool tsdb create-blocks-from openmetrics`` into ``blocks``."""
    promtool = shutil.which("promtool")
    if promtool is None:
        raise SystemExit("promtool not found: install prometheus (apt-get install prometheus)")
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(history), str(blocks)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"promtool backfill of {history} failed: {done.stderr[-2000:]}")


@contextlib.contextmanager
def prometheus(blocks: Path, work: Path) -> Iterator[str]:
    """A real Prometheus on the backfilled blocks, on 127.0.0.1:<free port>."""
    prom = shutil.which("prometheus")
    if prom is None:
        raise SystemExit("prometheus not found: install prometheus (apt-get install prometheus)")
    (work / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    port = free_port()
    cmd = [
        prom,
        f"--config.file={work / 'prometheus.yml'}",
        f"--storage.tsdb.path={blocks}",
        "--storage.tsdb.retention.time=100y",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with (work / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url, proc)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def write_day(dialect: str, short: bool, seed: int | None, out: Path) -> None:
    """The simulator's fleet day (``skewscope.sim.day``) into ``out``."""
    from skewscope.sim.day import DaySpec
    from skewscope.sim.day import write_day as sim_write_day

    spec = DaySpec.short() if short else DaySpec.full()
    changes: dict[str, object] = {"dialect": dialect}
    if seed is not None:
        changes["seed"] = seed
    from dataclasses import replace

    sim_write_day(replace(spec, **changes), out)


def skewscope_rule_episodes(
    url: str, truth: Truth, step_s: float, notes: list[str]
) -> list[Fired] | None:
    """The generated rules' alert episodes (``skewscope rules`` for the day's dialect, at the
    day's window) through the backtest evaluator; None (with a note) where this tree has none."""
    try:
        from skewscope.monitor.backtest import backtest_url
    except ImportError:
        notes.append(
            "skewscope rules: no backtest evaluator in this tree (skewscope.monitor."
            "backtest): not evaluated"
        )
        return None
    notes.append(
        f"rules: skewscope rules --dialect {truth.dialect} --window "
        f"{truth.window_s:g}s, evaluated every {step_s:g}s"
    )
    episodes = backtest_url(
        url, truth.t0, truth.t1, dialect=truth.dialect, window_s=truth.window_s, step_s=step_s
    )
    return [
        Fired("rules", e.level, e.instance, e.dp_rank, e.kind or None, e.start, e.end)
        for e in episodes
    ]


def field_episodes(client: PromClient, truth: Truth, step_s: float) -> dict[str, list[Fired]]:
    """Each field rule's episodes; a group rule names no unit (at the DP level: the instance
    whose ranks it compares, no rank)."""
    out: dict[str, list[Fired]] = {}
    for rule in field_rules(truth.dialect):
        unit = ("instance" if rule.level == "dp" else None, None)
        out.setdefault(rule.name, []).extend(
            promql_episodes(
                client,
                rule.name,
                rule.level,
                rule.expr,
                rule.for_s,
                truth.t0,
                truth.t1,
                step_s,
                unit,
            )
        )
    return out


def run_day(
    day: Path,
    work: Path,
    *,
    grace_s: float,
    watch_every_s: float = WATCH_EVERY_S,
    watch_last_s: float = WATCH_LAST_S,
    watch_window_s: float | None = None,
    step_s: float = STEP_S,
    sources: tuple[str, ...] = SOURCES,
    log: bool = True,
) -> DayRun:
    """Backfill ``day`` into a fresh Prometheus and score ``sources`` on it."""
    truth = read_truth(day / "truth.json")
    notes: list[str] = []
    seconds: dict[str, float] = {}
    blocks = work / "blocks"
    shutil.rmtree(blocks, ignore_errors=True)
    t = time.perf_counter()
    backfill(day / "history.om", blocks)
    seconds["backfill"] = time.perf_counter() - t
    fired: dict[str, list[Fired]] = {}
    with prometheus(blocks, work) as url:
        client = PromClient(url, timeout_s=120)
        t = time.perf_counter()
        rules = skewscope_rule_episodes(url, truth, step_s, notes) if "rules" in sources else None
        if rules is not None:
            fired["skewscope rules"] = rules
        seconds["rules"] = time.perf_counter() - t

        def progress(k: int, n: int) -> None:
            if log and (k % 60 == 0 or k == n):
                print(f"  watch {truth.dialect}: run {k}/{n}", file=sys.stderr, flush=True)

        t = time.perf_counter()
        watched: list[Fired] = []
        errors: dict[str, int] = {}
        if "watch" in sources:
            watched, errors = watch_episodes(
                url,
                truth.dialect,
                truth.t0,
                truth.t1,
                last_s=watch_last_s,
                every_s=watch_every_s,
                window_s=watch_window_s,
                work=work,
                progress=progress,
            )
            fired["skewscope watch"] = watched
            notes.append(
                f"watch: --last {watch_last_s:g}s --every {watch_every_s:g}s --window"
                f" {watch_window_s or 'auto'}, calm runs {CALM_RUNS}"
            )
        seconds["watch"] = time.perf_counter() - t
        failed = {k: v for k, v in errors.items() if v}
        if failed:
            notes.append(f"watch: failed runs by reason {failed}")
        t = time.perf_counter()
        if "field" in sources:
            fired.update(field_episodes(client, truth, step_s))
        seconds["field rules"] = time.perf_counter() - t
        client.close()
    scores = [score(src, level, f, truth, grace_s) for src, f in fired.items() for level in LEVELS]
    return DayRun(truth.dialect, truth, scores, notes, seconds)


def _f(x: float, fmt: str = "{:.2f}") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)


def table(run: DayRun) -> str:
    head = (
        "| source | level | episodes | TP | FP | misses | precision | recall | F1 | "
        "delay median | delay p90 | false/day | false firing | kind right |"
    )
    rows = [head, "|" + "---|" * 14]
    for s in run.scores:
        kind = "n/a (no kind)" if s.kind_correct is None else f"{s.kind_correct}/{s.tp}"
        rows.append(
            f"| {s.source} | {s.level} | {s.episodes} | {s.tp} | {s.false_alerts} | "
            f"{s.misses} | {_f(s.precision)} | {_f(s.recall)} | {_f(s.f1)} | "
            f"{_f(s.delay_median_s / 60, '{:.1f} min')} | {_f(s.delay_p90_s / 60, '{:.1f} min')}"
            f" | {_f(s.false_per_day, '{:.1f}')} | {_f(100 * s.false_time_share, '{:.0f} %')}"
            f" | {kind} |"
        )
    return "\n".join(rows)


def details(run: DayRun) -> str:
    lines = []
    for s in run.scores:
        if s.missed:
            lines.append(f"  {s.source} {s.level}: missed {', '.join(s.missed)}")
        wrong = [
            f"{i}->{k}"
            for i, k in s.kinds
            if k != next(e.kind for e in run.truth.episodes if e.id == i)
        ]
        if wrong:
            lines.append(f"  {s.source} {s.level}: wrong kind {', '.join(wrong)}")
    return "\n".join(lines + [f"  note: {n}" for n in run.notes])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--short", action="store_true", help="the short day (DaySpec.short())")
    p.add_argument("--dialect", action="append", choices=("vllm", "sglang"))
    p.add_argument("--seed", type=int)
    p.add_argument("--day", type=Path, help="evaluate this day folder instead of writing one")
    p.add_argument("--work", type=Path, help="working folder (default: a temporary one)")
    p.add_argument(
        "--grace",
        type=float,
        default=600.0,
        help="seconds after an episode's end an alert still counts for it",
    )
    p.add_argument(
        "--short-watch",
        action="store_true",
        help="watch with the short day's look-back (with --day of a short day)",
    )
    p.add_argument(
        "--sources",
        default=",".join(SOURCES),
        help="which to evaluate, of rules,watch,field (default: all)",
    )
    p.add_argument(
        "--step",
        type=float,
        default=STEP_S,
        help="seconds between rule evaluations (generated and field rules)",
    )
    p.add_argument("--json", type=Path, help="also write the scores as JSON")
    a = p.parse_args(argv)
    dialects = a.dialect or ["vllm", "sglang"]
    with contextlib.ExitStack() as stack:
        work = a.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-")))
        work.mkdir(parents=True, exist_ok=True)
        runs = []
        for dialect in [None] if a.day else dialects:
            if a.day:
                day = a.day
            else:
                day = work / f"day-{dialect}"
                t = time.perf_counter()
                write_day(str(dialect), a.short, a.seed, day)
                print(
                    f"wrote the {dialect} day in {time.perf_counter() - t:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
            sub = work / f"eval-{dialect or 'day'}"
            sub.mkdir(exist_ok=True)
            watch = SHORT_WATCH if (a.short or a.short_watch) else {}
            run = run_day(
                day,
                sub,
                grace_s=a.grace,
                step_s=a.step,
                sources=tuple(a.sources.split(",")),
                watch_last_s=watch.get("last_s", WATCH_LAST_S),
                watch_window_s=watch.get("window_s"),
            )
            runs.append(run)
            span_h = (run.truth.t1 - run.truth.t0) / 3600
            units = {(e.instance, e.dp_rank) for e in run.truth.episodes}
            print(
                f"\n## {run.dialect}: {span_h:.1f} h, {len(run.truth.episodes)} skew episodes "
                f"on {len(units)} units, {len(run.truth.noise)} noise events "
                f"(timings: {', '.join(f'{k} {v:.0f} s' for k, v in run.seconds.items())})\n"
            )
            print(table(run))
            print(details(run), flush=True)
        if a.json:
            a.json.write_text(
                json.dumps(
                    [
                        {
                            "dialect": r.dialect,
                            "notes": r.notes,
                            "seconds": r.seconds,
                            "scores": [asdict(s) for s in r.scores],
                        }
                        for r in runs
                    ],
                    indent=1,
                    default=str,
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
