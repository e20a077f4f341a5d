"""Online fleet scale: ``diagnose --prometheus`` over 256 instances x 4 DP ranks (1,024 units), one
hour at 15 s (``--minutes``), backfilled into a real Prometheus (promtool) and a real
VictoriaMetrics (import API), both started here on 127.0.0.1.

For each backend, each in a fresh process (so peak RSS is its own), best of ``--repeat``:
  * baseline: GET the very ``query_range`` requests diagnose sends (recorded from a diagnose
    run), with the same 4 threads, and decode their JSON — simply fetching the results;
  * hand-written: the nine per-rank signals of the method at a 60 s step as an engineer would
    ask for them (``HAND_QUERIES``: 3 rates, 3 gauge means, 3 p95 over ``_bucket`` rates, each
    ``by (instance, engine)``), fetched and decoded the same way (like for like where
    diagnose's own window is 60 s too: ``--minutes 20``; the hour gets 5 min windows);
  * ``skewscope diagnose --prometheus URL`` end to end (load, analysis, Markdown report).
Prints wall and CPU seconds, peak RSS, the diagnose/baseline and diagnose/hand-written ratios
measured in the same run, and the number of queries against the same diagnose restricted to
one instance (4 units).

    python benchmarks/bench_fleet.py [--instances 256] [--minutes 60] [--dir /tmp/skewscope-fleet]
                                     [--repeat 3] [--no-compile]

The package's sources are compiled to bytecode first (as an installed wheel has them), unless
``--no-compile``.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from fleet_history import T0, Fleet, import_chunks, instance_label, openmetrics_chunks

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} not ready after {timeout_s:g} s")


@contextlib.contextmanager
def running(cmd: list[str], log: Path) -> Iterator[None]:
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def backfill(fleet: Fleet, work: Path) -> Path:
    blocks = work / "prom-data"
    stamp = work / f"prom-{fleet.instances}x{fleet.ranks}.done"
    if stamp.exists():
        return blocks
    shutil.rmtree(blocks, ignore_errors=True)
    om = work / "fleet.om"
    t0 = time.perf_counter()
    with om.open("w") as f:
        for chunk in openmetrics_chunks(fleet):
            f.write(chunk)
    print(
        f"  wrote {om} ({om.stat().st_size / 2**20:,.0f} MB) in {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    t0 = time.perf_counter()
    subprocess.run(
        [
            shutil.which("promtool") or "promtool",
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            str(om),
            str(blocks),
        ],
        check=True,
        capture_output=True,
    )
    print(f"  promtool backfill in {time.perf_counter() - t0:.0f} s", flush=True)
    om.unlink()
    stamp.touch()
    return blocks


@contextlib.contextmanager
def prometheus(fleet: Fleet, work: Path) -> Iterator[str]:
    blocks = backfill(fleet, work)
    (work / "prometheus.yml").write_text("global:\n  scrape_interval: 15s\n")
    port = free_port()
    cmd = [
        shutil.which("prometheus") or "prometheus",
        f"--config.file={work / 'prometheus.yml'}",
        f"--storage.tsdb.path={blocks}",
        "--storage.tsdb.retention.time=100y",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with running(cmd, work / "prometheus.log"):
        url = f"http://127.0.0.1:{port}"
        wait_until(f"{url}/-/ready")
        yield url


@contextlib.contextmanager
def victoria(fleet: Fleet, work: Path) -> Iterator[str]:
    data = work / "vm-data"
    stamp = work / f"vm-{fleet.instances}x{fleet.ranks}.done"
    if not stamp.exists():
        shutil.rmtree(data, ignore_errors=True)
    port = free_port()
    cmd = [
        shutil.which("victoria-metrics") or "victoria-metrics",
        f"-storageDataPath={data}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y",
        "-search.disableCache",
    ]
    with running(cmd, work / "vm.log"):
        url = f"http://127.0.0.1:{port}"
        wait_until(f"{url}/health")
        if not stamp.exists():
            t0 = time.perf_counter()
            with httpx.Client(timeout=600) as client:
                for chunk in import_chunks(fleet):
                    r = client.post(f"{url}/api/v1/import/prometheus", content=chunk)
                    r.raise_for_status()
                client.get(f"{url}/internal/force_flush")
            print(f"  VictoriaMetrics import in {time.perf_counter() - t0:.0f} s", flush=True)
            stamp.touch()
        yield url


# --- children: each measured in its own process ------------------------------------------------


def _usage(t0: float, c0: float) -> dict[str, float]:
    """Wall and CPU seconds since (t0, c0) and this process's peak RSS (VmHWM: ru_maxrss
    would carry the parent's peak over the exec)."""
    hwm = next(
        line
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM:")
    )
    return {
        "wall_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "rss_mb": int(hwm.split()[1]) / 1024,
    }


def child_diagnose(url: str, end: str, selector: str, out: str, queries: str) -> None:
    from skewscope.cli import main
    from skewscope.sources import prometheus as prom

    seen: list[list[object]] = []

    def recording(real: Any) -> Any:
        def record(self: prom.PromClient, query: str, start: float, end: float, step: float) -> Any:
            seen.append([query, start, end, step])
            return real(self, query, start, end, step)

        return record

    # every range query diagnose sends, through either reader of the answers
    for name in ("query_range", "query_range_series"):
        if hasattr(prom.PromClient, name):  # (an older checkout has the first only)
            setattr(prom.PromClient, name, recording(getattr(prom.PromClient, name)))
    t0, c0 = time.perf_counter(), time.process_time()
    code = main(
        [
            "diagnose",
            "--prometheus",
            url,
            "--start",
            str(T0),
            "--end",
            end,
            "--selector",
            selector,
            "--format",
            "markdown",
            "-o",
            out,
            "--force",
        ]
    )
    usage = _usage(t0, c0)
    Path(queries).write_text(json.dumps(seen))
    print(json.dumps({**usage, "exit": code, "queries": len(seen)}))


def _fetch(url: str, jobs: list[list[Any]]) -> None:
    """GET each ``[query, start, end, step]`` with 4 threads and decode its JSON (the decoding
    is part of what any client pays); print the child's usage and the series count."""
    t0, c0 = time.perf_counter(), time.process_time()
    with httpx.Client(base_url=url, timeout=120) as client:

        def get(job: list[Any]) -> int:
            q, start, end, step = job
            r = client.get(
                "/api/v1/query_range", params={"query": q, "start": start, "end": end, "step": step}
            )
            body = json.loads(r.content)
            return len(body["data"]["result"])

        with ThreadPoolExecutor(max_workers=4) as pool:
            series = sum(pool.map(get, jobs))
    print(json.dumps({**_usage(t0, c0), "series": series}))


def child_fetch(url: str, queries: str) -> None:
    _fetch(url, json.loads(Path(queries).read_text()))


# What a serving engineer would write by hand for the method's nine per-rank signals at a 60 s
# step: the fleet's own vLLM names, literally (not skewscope's dialect tables), one query each.
BY = "instance, engine"
HAND_QUERIES: tuple[str, ...] = (
    *(
        f"sum by ({BY}) (rate({m}[1m]))"
        for m in (
            "vllm:request_success_total",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
        )
    ),
    # the window's mean, as diagnose's per-window gauges (an instant gauge reads 1 sample in 4)
    *(
        f"sum by ({BY}) (avg_over_time({m}[1m]))"
        for m in (
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc",
        )
    ),
    *(
        f"histogram_quantile(0.95, sum by (le, {BY}) (rate({m}_bucket[1m])))"
        for m in (
            "vllm:time_to_first_token_seconds",
            "vllm:e2e_request_latency_seconds",
            "vllm:request_queue_time_seconds",
        )
    ),
)


def child_hand(url: str, start: str, end: str) -> None:
    _fetch(url, [[q, start, end, 60] for q in HAND_QUERIES])


def _child(*args: str) -> dict[str, float]:
    # this checkout's package first (not whichever one an editable install points at)
    path = os.pathsep.join(filter(None, (str(HERE.parent / "src"), os.environ.get("PYTHONPATH"))))
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": path},
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def measure(name: str, url: str, work: Path, repeat: int, fleet: Fleet) -> None:
    report, queries = work / f"report-{name}.md", work / f"queries-{name}.json"
    end = str(T0 + fleet.span_s)
    small = _child(
        "diagnose",
        url,
        end,
        f'instance="{instance_label(0)}"',
        str(work / "small.md"),
        str(work / "queries-small.json"),
    )
    diag = [_child("diagnose", url, end, "", str(report), str(queries)) for _ in range(repeat)]
    fetch = [_child("fetch", url, str(queries)) for _ in range(repeat)]
    # the first full minute to the range's end: a point a minute of every signal
    hand = [_child("hand", url, str(T0 + 60), end) for _ in range(repeat)]
    window = Counter(job[3] for job in json.loads(queries.read_text())).most_common(1)[0][0]
    d = min(diag, key=lambda r: r["wall_s"])
    f = min(fetch, key=lambda r: r["wall_s"])
    h = min(hand, key=lambda r: r["wall_s"])
    dc, fc = min(r["cpu_s"] for r in diag), min(r["cpu_s"] for r in fetch)
    hc = min(r["cpu_s"] for r in hand)
    print(
        f"{name}: {int(d['queries'])} query_range calls for "
        f"{fleet.instances * fleet.ranks:,} units, {int(small['queries'])} for 4 units "
        f"(one instance); diagnose's window {window:g} s, the hand-written step 60 s"
    )
    print(
        f"  baseline fetch+decode: {f['wall_s']:.1f} s wall, {fc:.1f} CPU s, "
        f"peak RSS {f['rss_mb']:.0f} MB ({int(f['series']):,} series)"
    )
    print(
        f"  hand-written fetch:    {h['wall_s']:.1f} s wall, {hc:.1f} CPU s, "
        f"peak RSS {h['rss_mb']:.0f} MB ({len(HAND_QUERIES)} queries, "
        f"{int(h['series']):,} series)"
    )
    print(
        f"  diagnose:              {d['wall_s']:.1f} s wall, {dc:.1f} CPU s, "
        f"peak RSS {max(r['rss_mb'] for r in diag):.0f} MB (exit {int(d['exit'])})"
    )
    print(
        f"  ratio diagnose/baseline: {d['wall_s'] / f['wall_s']:.2f}x wall, "
        f"{dc / fc:.2f}x CPU  (goal: <= 2x, < 500 MB)"
    )
    print(
        f"  ratio diagnose/hand-written: {d['wall_s'] / h['wall_s']:.2f}x wall, "
        f"{dc / hc:.2f}x CPU  (goal: <= 1.2x)"
    )
    print(
        f"  all wall: diagnose {[round(r['wall_s'], 1) for r in diag]}, "
        f"fetch {[round(r['wall_s'], 1) for r in fetch]}, "
        f"hand {[round(r['wall_s'], 1) for r in hand]}; report {report} "
        f"({len(report.read_text().splitlines())} lines)",
        flush=True,
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, *rest = sys.argv[2:]
        modes: dict[str, Callable[..., None]] = {
            "diagnose": child_diagnose,
            "fetch": child_fetch,
            "hand": child_hand,
        }
        modes[mode](*rest)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=256)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument(
        "--minutes",
        type=int,
        default=60,
        help="the history's span (diagnose's window follows it: 60 -> 5 min, "
        "20 -> 1 min, the hand-written fetch's step)",
    )
    ap.add_argument("--dir", type=Path, default=Path("/tmp/skewscope-fleet"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backend", choices=("both", "prometheus", "victoria"), default="both")
    ap.add_argument(
        "--no-compile",
        action="store_true",
        help="measure without the package's bytecode (each child compiles it)",
    )
    args = ap.parse_args()
    if not args.no_compile:
        # an installed wheel carries its bytecode; under PYTHONDONTWRITEBYTECODE (set here)
        # every child would otherwise compile the ~60 modules diagnose imports (~0.1 CPU s)
        compileall.compile_dir(HERE.parent / "src", quiet=1)
    fleet = Fleet(instances=args.instances, ranks=args.ranks, span_s=60 * args.minutes)
    span = "" if args.minutes == 60 else f"-{args.minutes}m"  # the hour keeps its old cache
    work = args.dir / f"{fleet.instances}x{fleet.ranks}{span}"
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"fleet: {fleet.instances} instances x {fleet.ranks} ranks, {args.minutes} min at 15 s, "
        f"in {work}"
        f"{' (no bytecode)' if args.no_compile else ''}"
    )
    if args.backend in ("both", "prometheus"):
        with prometheus(fleet, work) as url:
            measure("prometheus", url, work, args.repeat, fleet)
    if args.backend in ("both", "victoria"):
        with victoria(fleet, work) as url:
            measure("victoria", url, work, args.repeat, fleet)


if __name__ == "__main__":
    main()
