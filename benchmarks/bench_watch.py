"""``watch --prometheus --last 15m --every 30s``: the cost of one incremental run against a full
diagnose of the same range at the same instant, in the same process, on the fleet of
bench_fleet.py (256 instances x 4 DP ranks, 1 h at 15 s, backfilled into a real Prometheus or a
real VictoriaMetrics started here on 127.0.0.1).

The watch's reader is stepped through ``--runs`` runs ``--every`` apart on explicit instants (as
watch's loop on a ManualClock would run them); at each instant a full read + diagnose of the same
range is measured right after it, and the two reports are compared (they must be identical).
Per run, the mean over the runs and the worst run (runs alternate: with 60 s windows and runs
30 s apart every other run finds no new window, reads the few unsettled ones, finds them
unchanged and keeps the previous report):
  * query_range calls and evaluation steps (points per series x calls: "queries x range");
  * samples the server read (Prometheus' prometheus_engine_query_samples_total; VictoriaMetrics
    has no such counter: not shown there);
  * the server's evaluation seconds (prometheus_engine_query_duration_seconds, inner_eval);
  * wall and CPU seconds of this process (the read, the Evidence, the diagnosis).

    python benchmarks/bench_watch.py [--instances 256] [--runs 10] [--backend prometheus]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench_fleet import prometheus, victoria
from fleet_history import T0, Fleet

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))  # this checkout's package, not an editable install

from skewscope.analysis.diagnose import diagnose  # noqa: E402
from skewscope.clock import ManualClock  # noqa: E402
from skewscope.monitor.watch import PrometheusSource, Watcher  # noqa: E402
from skewscope.report.document import report_document  # noqa: E402
from skewscope.sources import prometheus as prom  # noqa: E402
from skewscope.sources.prom_incremental import IncrementalPrometheus  # noqa: E402

LAST, EVERY = 900.0, 30.0
TIMEOUT_S = 600.0  # a loaded 2-core machine answers a 1,024-unit query in tens of seconds


class Meter:
    """Records every request the client sends; afterwards (outside the timed work) replays the
    range queries with ``stats=all`` for the samples the server read and its evaluation time."""

    def __init__(self, url: str, backend: str) -> None:
        self.url, self.backend = url, backend
        self.sent: list[tuple[str, dict[str, Any]]] = []
        real = prom.PromClient._send

        def record(client: Any, path: str, params: Any) -> Any:
            self.sent.append((path, dict(params)))
            return real(client, path, params)

        prom.PromClient._send = record  # type: ignore[method-assign]

    def server(self, ranges: list[dict[str, Any]]) -> dict[str, float]:
        """Samples read and inner evaluation seconds of ``ranges`` (Prometheus' query stats)."""
        if self.backend != "prometheus":
            return {}
        samples = evals = 0.0
        with httpx.Client(base_url=self.url, timeout=120) as client:
            for params in ranges:
                stats = client.get("/api/v1/query_range", params={**params, "stats": "all"}).json()[
                    "data"
                ]["stats"]
                samples += stats["samples"]["totalQueryableSamples"]
                evals += stats["timings"]["innerEvalTime"]
        return {"samples": samples, "eval_s": evals}

    def measure(self, work: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
        del self.sent[:]
        t0, c0 = time.perf_counter(), time.process_time()
        result = work()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        ranges = [p for path, p in self.sent if path == "/api/v1/query_range"]
        steps = sum(
            round((float(p["end"]) - float(p["start"])) / float(p["step"])) + 1 for p in ranges
        )
        cost = {
            "requests": len(self.sent),
            "calls": len(ranges),
            "steps": steps,
            "wall_s": wall,
            "cpu_s": cpu,
            **self.server(ranges),
        }
        return result, cost


def run(name: str, url: str, runs: int) -> None:
    meter = Meter(url, name)
    now = float(T0 + 1800)  # mid-history: the range and every run lie inside the data
    reader = IncrementalPrometheus(url, timeout_s=TIMEOUT_S)
    lines: list[str] = []
    reader.debug = lines.append
    clock = ManualClock(now)  # watch's own run, at explicit instants
    watcher = Watcher(
        PrometheusSource("bench", LAST, reader.load), last_s=LAST, every_s=EVERY, clock=clock
    )
    first, _ = meter.measure(watcher.run_once)
    inc_costs, full_costs, identical, twice = [], [], 0, 0
    for k in range(1, runs + 1):
        t = now + k * EVERY
        clock.set(t)
        good, inc = meter.measure(watcher.run_once)
        got = watcher.status.report
        want, full = meter.measure(
            lambda t=t: diagnose(
                prom.load_prometheus(url, start=t - LAST, end=t, timeout_s=TIMEOUT_S)
            )
        )
        assert good and got is not None, watcher.status.last_error
        again = diagnose(prom.load_prometheus(url, start=t - LAST, end=t, timeout_s=TIMEOUT_S))
        identical += report_document(got) == report_document(want)
        twice += report_document(again) == report_document(want)
        inc_costs.append(inc)
        full_costs.append(full)
    reader.close()
    keys = [
        k
        for k in ("requests", "calls", "steps", "samples", "eval_s", "wall_s", "cpu_s")
        if k in inc_costs[0]
    ]
    mean = {
        k: (
            statistics.mean(c[k] for c in inc_costs),
            max(c[k] for c in inc_costs),
            statistics.mean(c[k] for c in full_costs),
        )
        for k in keys
    }
    print(
        f"{name}: {runs} runs {EVERY:g} s apart over --last {LAST:g}s; the run's report "
        f"identical to a full diagnose at the same instant: {identical}/{runs}; a second full "
        f"diagnose identical to the first: {twice}/{runs} (the server sums a group's series "
        "in no fixed order: the last bits move, and a report value rounded at 6 digits may)"
    )
    for line in lines:
        print(f"  run: {line}")
    label = {
        "requests": "HTTP requests (all API calls)",
        "calls": "query_range calls",
        "steps": "evaluation steps (calls x range)",
        "samples": "samples read by the server",
        "eval_s": "server evaluation s",
        "wall_s": "wall s (read + diagnose)",
        "cpu_s": "CPU s of this process",
    }
    print(
        f"  {'per run (mean of the runs)':34s} {'incremental':>12s} {'worst run':>12s} "
        f"{'full':>12s}  ratio (worst)"
    )
    for k in keys:
        inc, worst, full = mean[k]
        ratio = f"{inc / full:.3f}x ({worst / full:.3f}x)" if full else "-"
        print(f"  {label[k]:34s} {inc:12,.3f} {worst:12,.3f} {full:12,.3f}  {ratio}")
    print(f"  (goal: every ratio <= 0.2x; the first run, a full read, good: {first})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=256)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/skewscope-fleet"))
    ap.add_argument("--backend", choices=("both", "prometheus", "victoria"), default="prometheus")
    args = ap.parse_args()
    fleet = Fleet(instances=args.instances, ranks=args.ranks)
    work = args.dir / f"{fleet.instances}x{fleet.ranks}"
    work.mkdir(parents=True, exist_ok=True)
    print(f"fleet: {fleet.instances} instances x {fleet.ranks} ranks, 1 h at 15 s, in {work}")
    if args.backend in ("both", "prometheus"):
        with prometheus(fleet, work) as url:
            run("prometheus", url, args.runs)
    if args.backend in ("both", "victoria"):
        with victoria(fleet, work) as url:
            run("victoria", url, args.runs)


if __name__ == "__main__":
    main()
