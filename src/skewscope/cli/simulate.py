"""``skewscope simulate``: run a scenario and write the evidence real systems write."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewscope.catalogue import (
    SIMULATED_DEVICE_EXPORTERS,
    SIMULATED_DIALECTS,
    Generation,
    LiveClock,
)
from skewscope.cli import common
from skewscope.errors import UsageError

if TYPE_CHECKING:
    from skewscope.progress import Progress
    from skewscope.sim.records import SimResult, SinkFactory
    from skewscope.sim.spec import Scenario
    from skewscope.sim.writers.history import HistoryPart, HistorySinks
    from skewscope.sim.writers.live import LiveCluster


def register(sub: Any) -> None:
    s: argparse.ArgumentParser = sub.add_parser(
        "simulate", help="simulate a cluster and write its evidence"
    )
    s.add_argument(
        "scenario",
        nargs="?",
        help="built-in scenario name or a .toml file; 'day' writes a fleet's day "
        "(history.om + truth.json into --out, docs/simulator.md)",
    )
    s.add_argument("--list", action="store_true", help="list the built-in scenarios")
    s.add_argument("--out", metavar="DIR", help="write msServiceProfiler folders here")
    s.add_argument(
        "--generation",
        default=Generation.CURRENT.value,
        choices=tuple(g.value for g in Generation),
        help="profiler CSV header generation",
    )
    s.add_argument("--openmetrics", metavar="FILE", help="write an OpenMetrics history file")
    s.add_argument(
        "--metrics-interval",
        default="5s",
        help="OpenMetrics history, and live mode on --clock scrape: simulated "
        "seconds between samples (default 5s)",
    )
    s.add_argument("--serve", action="store_true", help="serve live /metrics per instance")
    s.add_argument(
        "--metrics-dialect",
        default="vllm",
        choices=SIMULATED_DIALECTS,
        help="engine (or router: dynamo, llm-d) metric names to write",
    )
    s.add_argument(
        "--device-exporter",
        choices=SIMULATED_DEVICE_EXPORTERS,
        help="also write a device exporter's series (one device per DP rank, on the "
        "instance's own target)",
    )
    s.add_argument(
        "--speed", default="1", help="live mode on --clock wall: simulated s per wall s (> 0)"
    )
    s.add_argument(
        "--clock",
        default=LiveClock.WALL.value,
        choices=tuple(c.value for c in LiveClock),
        help="live mode: how simulated time moves: with wall time at --speed "
        "(default), one --metrics-interval per scrape of an instance (scrape), "
        'or only by POST /sim/advance {"seconds": N} (manual)',
    )
    s.add_argument(
        "--port",
        default="0",
        help="live mode: first port, instance k on PORT+k (default 0 = any free)",
    )
    s.add_argument("--seed", help="override the scenario's seed (>= 0)")
    s.add_argument(
        "--gateway",
        metavar="POLICY",
        help="re-run under this gateway policy instead of the scenario's (the same "
        "seed serves the same requests: a counterfactual run)",
    )
    s.add_argument(
        "--dispatcher",
        metavar="POLICY",
        help="re-run under this DP dispatcher policy instead of the scenario's",
    )
    s.add_argument(
        "--jobs",
        default="auto",
        help="worker processes for a gateway that reads no load (default auto: "
        "the usable CPUs for a run of a few million steps, else 1)",
    )
    s.add_argument(
        "--dialect",
        choices=("vllm", "sglang"),
        default="vllm",
        help="day: the engines' metric names (default vllm)",
    )
    s.add_argument(
        "--short",
        action="store_true",
        help="day: the short day (90 min of 8 x 2 DP) instead of 6 h of 16 x 2",
    )
    s.add_argument(
        "--force",
        action="store_true",
        help="write into a non-empty --out DIR; overwrite an --openmetrics FILE",
    )
    s.set_defaults(run=run)


def _number(text: str, what: str, expected: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{what}: expected {expected}, got {text!r}") from None


def _integer(text: str, what: str, lo: int, hi: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = lo - 1
    if not lo <= value <= hi:
        raise UsageError(f"{what}: expected {expected}, got {text!r}")
    return value


def _check_args(args: argparse.Namespace, max_port: int) -> None:
    """Every argument checked before the (possibly long) simulation starts."""
    speed = _number(args.speed, "--speed", "a positive number")
    if not (math.isfinite(speed) and speed > 0):
        raise UsageError(f"--speed: expected a finite positive number, got {args.speed!r}")
    args.speed = speed
    args.clock = LiveClock(args.clock)
    if args.clock is not LiveClock.WALL and speed != 1.0:
        raise UsageError(
            f"--speed: only with --clock wall (time on the {args.clock} clock moves by steps)"
        )
    args.port = _integer(args.port, "--port", 0, max_port, f"a port 0..{max_port}")
    if args.seed is not None:
        args.seed = _integer(args.seed, "--seed", 0, 2**63 - 1, "a non-negative integer")
    if args.jobs != "auto":
        args.jobs = _integer(args.jobs, "--jobs", 1, 1024, "auto or a number 1..1024")
    args.metrics_interval = common.parse_duration(args.metrics_interval, "--metrics-interval")
    if args.out:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out}: exists and is not a folder")
        if out.is_dir() and any(out.iterdir()) and not args.force:
            raise UsageError(f"--out {out}: folder is not empty (use --force)")
    if args.openmetrics:  # refused like -o: a folder, or an existing file without --force
        common.refuse_overwrite(args.openmetrics, "--openmetrics", args.force)


def run(args: argparse.Namespace) -> int:
    from skewscope.sim.scenario import builtin_scenarios, load_scenario
    from skewscope.sim.writers.live import MAX_PORT

    if args.list:
        for name, sc in sorted(builtin_scenarios().items()):
            print(f"{name:18} {sc.summary}")
        return 0
    if not args.scenario:
        raise UsageError("simulate: give a SCENARIO (name or .toml file), or --list")
    if args.scenario == "day":
        return _day(args, MAX_PORT)
    if not (args.out or args.openmetrics or args.serve):
        raise UsageError(
            "simulate: choose at least one output: --out DIR, --openmetrics FILE, --serve"
        )
    _check_args(args, MAX_PORT)
    if args.clock is not LiveClock.WALL and not args.serve:
        raise UsageError(f"--clock {args.clock}: a live mode clock (add --serve)")
    scenario = load_scenario(args.scenario)
    if args.gateway or args.dispatcher:
        from skewscope.sim.counterfactual import policy_spec, rerouted

        scenario = rerouted(
            scenario,
            gateway=policy_spec(args.gateway, "--gateway") if args.gateway else None,
            dispatcher=policy_spec(args.dispatcher, "--dispatcher") if args.dispatcher else None,
        )
    last_port = args.port + scenario.instances - 1
    if args.serve and args.port and last_port > MAX_PORT:
        raise UsageError(
            f"--port {args.port}: {scenario.instances} instances need ports up to "
            f"{last_port}, above {MAX_PORT}"
        )
    if args.openmetrics:  # refused before the run, not after it
        from skewscope.sim.writers.openmetrics import check_scrapes

        check_scrapes(scenario.duration_s, args.metrics_interval, scenario.instances)
    from skewscope.progress import Progress
    from skewscope.sim.engine import simulate
    from skewscope.sim.limits import check_limits

    # live mode answers any time: it keeps the step table; so does a prefill/decode run (two
    # pools run whole, sim/pd.py), whose outputs are written from the result
    pd = scenario.pd is not None
    kept = bool(args.serve) or pd
    check_limits(scenario, keep_steps=kept)
    with contextlib.ExitStack() as stack:
        factories: list[SinkFactory] = []
        folder = stack.enter_context(_atomic_out(Path(args.out))) if args.out else None
        if folder is not None and not kept:
            from skewscope.sim.writers.profiler_sink import ProfilerSinks

            factories.append(ProfilerSinks(folder, args.generation))
        if args.openmetrics and not pd:
            factories.append(_history_sinks(scenario, args, stack))
        from skewscope.sim.records import Sinks

        progress = Progress(f"simulating {scenario.name}", scenario.duration_s, "simulated s")
        try:
            result = simulate(
                scenario,
                seed=args.seed,
                record_members=bool(args.out),
                progress=progress.update,
                keep_steps=kept,
                sinks=Sinks(factories) if factories else None,
                jobs=1 if kept else _jobs(args.jobs, scenario),
            )
        except OSError as e:
            raise _cannot_write(e, args) from None
        finally:
            progress.close()
        if folder is not None:
            _write_out(result, folder, args.generation, kept)
        if args.openmetrics and pd:
            _write_pd_history(result, args)
        elif args.openmetrics:
            _write_history(result, args, [o[-1] for o in result.outputs])
    if args.out:
        print(f"wrote {len(result.instances)} instance folder(s) and truth.json to {args.out}")
    if args.openmetrics:
        print(f"wrote OpenMetrics history to {args.openmetrics}")
    if args.serve:
        return _serve(result, args)
    return 0


def _day(args: argparse.Namespace, max_port: int) -> int:
    """``simulate day``: the fleet's day from arrays (skewscope.sim.day)."""
    from skewscope.sim.day import DaySpec, write_day

    if not args.out:
        raise UsageError("simulate day: give --out DIR (history.om and truth.json go there)")
    _check_args(args, max_port)
    spec = (DaySpec.short if args.short else DaySpec.full)(
        dialect=args.dialect, **({} if args.seed is None else {"seed": args.seed})
    )
    with _atomic_out(Path(args.out)) as folder:
        files = write_day(spec, folder)
    print(
        f"wrote {files.samples:,} samples of {spec.n_instances} instances x {spec.ranks} "
        f"ranks over {spec.hours:g} h ({spec.dialect}) and truth.json to {args.out}"
    )
    return 0


@contextlib.contextmanager
def _atomic_out(out: Path) -> Iterator[Path]:
    """--out written whole or not at all: a temporary folder beside it, renamed at the end."""
    from skewscope.atomic import atomic_folder

    try:
        with atomic_folder(out) as tmp:
            yield tmp
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write ({e.strerror or e})") from None


def _cannot_write(e: OSError, args: argparse.Namespace) -> UsageError:
    """A write failing during the run, named by its output."""
    history = args.openmetrics and Path(str(e.filename or "")).name.startswith(
        f".{Path(args.openmetrics).name}."
    )
    what = f"--openmetrics {args.openmetrics}" if history or not args.out else f"--out {args.out}"
    return UsageError(f"{what}: cannot write ({e.strerror or e})")


def _jobs(jobs: str | int, scenario: Scenario) -> int:
    """Worker processes: as asked, or (auto) the usable CPUs when the run is big enough to
    repay starting them (a few time chunks of steps)."""
    if jobs != "auto":
        return int(jobs)
    from skewscope.sim.engine import CHUNK_ROWS
    from skewscope.sim.limits import max_steps

    return len(os.sched_getaffinity(0)) if max_steps(scenario) > 4 * CHUNK_ROWS else 1


def _history_sinks(
    scenario: Scenario, args: argparse.Namespace, stack: contextlib.ExitStack
) -> HistorySinks:
    """The OpenMetrics history's sinks, spilling into a temporary folder beside the file."""
    from skewscope.sim.records import START_S
    from skewscope.sim.writers.history import HistorySinks
    from skewscope.sim.writers.openmetrics import scrape_times

    path = Path(args.openmetrics)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        spill = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".spill", dir=path.parent))
    except OSError as e:
        raise UsageError(f"--openmetrics {path}: cannot write ({e.strerror})") from None
    stack.callback(shutil.rmtree, spill, True)
    times = scrape_times(START_S, START_S + scenario.duration_s, args.metrics_interval)
    return HistorySinks(
        scenario.model_name, args.metrics_dialect, args.device_exporter, times, spill
    )


def _write_history(result: SimResult, args: argparse.Namespace, parts: list[HistoryPart]) -> None:
    from skewscope.progress import Progress
    from skewscope.sim.writers.history import write_history

    progress = Progress("writing OpenMetrics history", len(parts[0].specs), "families")
    try:
        write_history(Path(args.openmetrics), parts, progress=progress.update)
    except OSError as e:
        raise UsageError(f"--openmetrics {args.openmetrics}: cannot write ({e.strerror})") from None
    finally:
        progress.close()


def _write_pd_history(result: SimResult, args: argparse.Namespace) -> None:
    """A prefill/decode run's history, each instance's pool in the dialect's role label."""
    from skewscope.sim.writers.openmetrics import write_openmetrics

    try:
        write_openmetrics(
            result,
            Path(args.openmetrics),
            args.metrics_dialect,
            args.metrics_interval,
            devices=args.device_exporter,
        )
    except OSError as e:
        raise UsageError(f"--openmetrics {args.openmetrics}: cannot write ({e.strerror})") from None


def _write_out(result: SimResult, folder: Path, generation: str, kept: bool) -> None:
    """What the profiler sinks could not write as the run went (request.csv needs the
    requests' final state) and truth.json; a kept run's folders whole."""
    from skewscope.sim.writers.profiler import write_profiler
    from skewscope.sim.writers.profiler_sink import write_requests
    from skewscope.sim.writers.truth import write_truth

    if kept:
        write_profiler(result, folder, generation=generation)
    else:
        write_requests(result, folder, generation)
    write_truth(result, folder)


def _serve(result: SimResult, args: argparse.Namespace) -> int:
    from skewscope.sim.writers.live import serve

    try:
        cluster = serve(
            result,
            args.metrics_dialect,
            base_port=args.port,
            speed=args.speed,
            devices=args.device_exporter,
            live_clock=args.clock,
            step_s=args.metrics_interval,
        )
    except OSError as e:
        raise UsageError(
            f"--port {args.port}: cannot listen on {e.filename} ({e.strerror}); "
            "choose another port, or 0 for any free one"
        ) from None
    with cluster:
        try:
            for name, url in cluster.urls.items():
                print(f"serving {name} at {url}", flush=True)
            if args.clock is LiveClock.MANUAL:
                base = next(iter(cluster.urls.values())).removesuffix("/metrics")
                print(
                    f'advance simulated time: POST {base}/sim/advance {{"seconds": N}}', flush=True
                )
            wait_with_progress(cluster, _progress_for(cluster))
        except KeyboardInterrupt:
            print("skewscope: interrupted, live servers stopped", file=sys.stderr)
    return 0


def _progress_for(cluster: LiveCluster) -> Progress:
    from skewscope.progress import Progress

    how = {
        LiveClock.WALL: f"replaying at {cluster.speed:g}x",
        LiveClock.SCRAPE: f"replaying {cluster.step_s:g} simulated s per scrape",
        LiveClock.MANUAL: "replaying as POST /sim/advance moves it",
    }[cluster.live_clock]
    return Progress(how, cluster.model.end_s - cluster.start_s, "simulated s")


def wait_with_progress(cluster: LiveCluster, progress: Progress, slice_s: float = 0.5) -> None:
    """Until the servers stop: the replay position on stderr (a bar, or a line now and then)."""
    try:
        while not cluster.wait(slice_s):
            progress.update(cluster.sim_time() - cluster.start_s)
    finally:
        progress.close()
