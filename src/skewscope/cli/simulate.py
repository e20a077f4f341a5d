"""``skewscope simulate``: run a scenario and write the evidence real systems write."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from skewscope.cli import common
from skewscope.errors import UsageError


def register(sub: Any) -> None:
    s: argparse.ArgumentParser = sub.add_parser(
        "simulate", help="simulate a cluster and write its evidence"
    )
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
    s.add_argument("--metrics-dialect", default="vllm", choices=common.DIALECT_CHOICES)
    s.add_argument("--speed", type=float, default=1.0, help="live mode: simulated s per wall s")
    s.add_argument("--port", type=int, default=0, help="live mode: first port (0 = any free)")
    s.add_argument("--seed", type=int, help="override the scenario's seed")
    s.add_argument("--force", action="store_true", help="write into a non-empty --out DIR")
    s.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
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
            step_s=common.parse_duration(args.metrics_interval, "--metrics-interval"),
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
