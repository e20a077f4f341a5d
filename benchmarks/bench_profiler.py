"""Benchmark the profiler reader on a large batch.csv with realistic multi-KB res_list cells.

    python benchmarks/bench_profiler.py --steps 200000 --batch 30 [--dir /tmp/skewscope-bench]
    python benchmarks/bench_profiler.py --steps 54000 --instances 16 --repeat 2   # the fleet
    python benchmarks/bench_profiler.py --tiny 10000 [--repeat 2]   # 10,000 tiny folders

With ``--tiny N``, N tiny instance folders (tests/helpers/profiler_fixtures.tiny_fleet: 20 requests
each, one folder with three times as many, hard links) are timed with ``skewscope diagnose``
and ``skewscope whatif`` against ``read_each``, every CSV read once by ``polars.read_csv`` one
after another in the same run: the floor of a reader that pays a fixed cost per folder (issue
26; docs/performance.md "A fleet of tiny folders"; the lazy ``placed`` pass is no baseline
here: ``collect_all`` of 20,000 scans did not finish in 6 minutes). The folders are read by
worker processes: their CPU is counted (the forkserver that reaped them is stopped and reaped
before the count); peak RSS is the parent's only.

With ``--instances N`` the instance is hard-linked N times as one fleet, and ``skewscope
diagnose`` over it is timed against two bare lazy polars passes over the same files, measured
in the same run (``bare_pass``; docs/performance.md): ``lazy``, the numbers only (batch.csv per
(rank, window), request.csv per window), and ``placed``, the full per-rank table including the
request placement (every rid found in the scheduling rows' res_list, request.csv joined to its
first rank) -- the baseline the issue-14 goal is judged on. Both ratios are printed.

Writes one instance folder (4 DP ranks; a scheduling and an execution row per step; request.csv
with every rid), then times, each in a fresh process so peak RSS is its own:
  * load_profiler over the folder (the full pipeline: cast, res_list join, windows);
  * a baseline: ``polars.read_csv`` of the same batch.csv (all columns as strings).
Prints MB/s, rows/s, CPU seconds, peak RSS / file size and the load/baseline time ratio (CPU
seconds are the steadier figure on a shared machine).

On 2 cores (825 MB batch.csv, 200000 steps x 30 requests): baseline ~1.7-2.5 s, 3.6 CPU s,
~1.4x; load ~4-5.7 s, ~6.4-7.9 CPU s, peak RSS ~0.32x the file size (median 267 MB; the
reader's own passes peak near 0.25x; the rest is the kept row table, request placement and the
frames, see docs/architecture.md "Performance"). Before the unread-column/placement changes it
was 0.33-0.34x, before the categorical/lean-row change 0.39-0.41x; with per-row rid lists
~10 CPU s, 0.9x. Peak RSS varies +-10 MB run to run: compare medians of several runs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import polars as pl

T0_US = 1_745_398_333_000_000
RANKS = 4


def _res_list() -> pl.Expr:
    """res_list text of a step from its member rows: vLLM-style dicts (~130 bytes each)."""
    entry = pl.concat_str(
        pl.lit("{'rid': 'chatcmpl-"),
        pl.col("rid"),
        pl.lit("', 'iter': "),
        pl.col("iter"),
        pl.lit(", 'type': "),
        (pl.col("iter") > 0).cast(pl.Int8),
        pl.lit(", 'num_scheduled_tokens': "),
        pl.when(pl.col("iter") == 0).then(512).otherwise(1),
        pl.lit(", 'num_prompt_tokens': 512, 'num_computed_tokens': "),
        pl.col("iter") + 512,
        pl.lit("}"),
    )
    return pl.concat_str(pl.lit("["), entry.str.join(", "), pl.lit("]"))


def write_instance(folder: Path, steps: int, batch: int) -> Path:
    """A batch.csv of ``2 * steps`` rows and the matching request.csv; returns batch.csv."""
    folder.mkdir(parents=True, exist_ok=True)
    life = 50  # steps a request stays in the batch
    members = (
        pl.DataFrame({"step": pl.int_range(steps, eager=True)})
        .with_columns(pl.int_ranges(0, batch).alias("slot"))
        .explode("slot")
        .with_columns(
            (pl.col("step") % RANKS).alias("rank"),
            # requests of a rank rotate through its slots; each lives ``life`` steps
            (
                (pl.col("step") // RANKS + pl.col("slot")) // life * batch * RANKS
                + pl.col("slot") * RANKS
                + pl.col("step") % RANKS
            ).alias("rid"),
            ((pl.col("step") // RANKS + pl.col("slot")) % life).alias("iter"),
        )
    )
    per_step = members.group_by("step", maintain_order=True).agg(
        pl.col("rank").first(), _res_list().alias("res_list")
    )
    start = pl.lit(T0_US) + pl.col("step") * 5_000
    sched = per_step.select(
        pl.lit("batchFrameworkProcessing").alias("name"),
        "res_list",
        (start / 1000).alias("start_time(ms)"),
        pl.lit(2.0).alias("during_time(ms)"),
        pl.format("ms_service_node-{}", 31000 + pl.col("rank")).alias("prof_id"),
        pl.lit(batch).alias("batch_size"),
        pl.lit(1000).alias("total_blocks"),
        (400 + pl.col("step") % 300).alias("used_blocks"),
        (600 - pl.col("step") % 300).alias("free_blocks"),
        pl.lit(3).alias("blocks_allocated"),
        pl.lit(2).alias("blocks_freed"),
        ((400 + pl.col("step") % 300) / 1000).alias("kvcache_usage_rate"),
        pl.lit(batch - 1).alias("decode_batch_size"),
        pl.lit(512 + batch - 1).alias("total_scheduled_tokens"),
        pl.col("rank").cast(pl.Utf8).alias("dp_rank"),
        pl.col("step"),
    )
    execs = sched.with_columns(
        pl.lit("modelExec").alias("name"),
        pl.lit("[]").alias("res_list"),
        pl.lit(4.0).alias("during_time(ms)"),
    )
    rows = pl.concat([sched, execs]).sort("step", "name").drop("step")
    path = folder / "batch.csv"
    rows.write_csv(path)
    rids = members.group_by("rid").agg(pl.col("step").min())
    rids.select(
        pl.format("chatcmpl-{}", "rid").alias("http_rid"),
        ((pl.lit(T0_US) + pl.col("step") * 5_000) / 1000).alias("start_time(ms)"),
        pl.lit(512).alias("recv_token_size"),
        pl.lit(64).alias("reply_token_size"),
        pl.lit(900.0).alias("execution_time(ms)"),
        pl.lit(5.0).alias("queue_wait_time(ms)"),
        pl.lit(80.0).alias("first_token_latency(ms)"),
        pl.lit("N/A").alias("cache_hit_rate"),
    ).write_csv(folder / "request.csv")
    return path


def copy_instances(first: Path, instances: int) -> Path:
    """``instances`` folders beside ``first`` holding its files (hard links: no extra disk)."""
    run = first.parent / f"run-{instances}"
    for i in range(instances):
        dest = run / f"inst-{i:02d}"
        dest.mkdir(parents=True, exist_ok=True)
        for f in first.iterdir():
            if not (dest / f.name).exists():
                os.link(f, dest / f.name)
    return run


SCHED = "batchFrameworkProcessing"
RID_MATCH = r"'rid': '[^']*'"  # a quoted rid without escapes: all the fixture writes


def _numbers(batch: pl.LazyFrame) -> pl.LazyFrame:
    """batch.csv's per-(rank, step kind, window) numbers: steps, mean batch, scheduled tokens,
    KV mean and max, busy."""
    return batch.group_by(
        pl.col("dp_rank").cast(pl.Int64),
        "name",
        (pl.col("start_time(ms)").cast(pl.Float64) // 10_000).alias("w"),
    ).agg(
        pl.len(),
        pl.col("batch_size").cast(pl.Float64).mean(),
        pl.col("total_scheduled_tokens").cast(pl.Float64).sum(),
        pl.col("kvcache_usage_rate").cast(pl.Float64).mean(),
        pl.col("kvcache_usage_rate").cast(pl.Float64).max().alias("kv_max"),
        pl.col("during_time(ms)").cast(pl.Float64).sum(),
    )


def _first_ranks(batch: pl.LazyFrame) -> pl.LazyFrame:
    """rid -> dp_rank of the first scheduling row whose res_list holds it (the placement the
    per-rank request table needs: request.csv has no rank)."""
    return (
        batch.with_row_index("_row")
        .filter(pl.col("name") == SCHED)
        .select(
            "_row",
            pl.col("dp_rank").cast(pl.Int64),
            pl.col("res_list").str.extract_all(RID_MATCH).alias("m"),
        )
        .explode("m")
        .group_by("m")
        .agg(pl.col("dp_rank").min_by("_row"))
        .select(pl.col("m").str.slice(8).str.head(-1).alias("rid"), "dp_rank")  # 'rid': 'X'
    )


def bare_pass(folders: list[Path], *, place: bool) -> list[pl.DataFrame]:
    """A baseline: one lazy polars pass over the files, every query collected together by the
    streaming engine.

    ``place=False`` (numbers only): the per-(rank, window) numbers of batch.csv and the
    per-WINDOW request counts of request.csv; requests are never put on a rank.
    ``place=True`` (per-rank): the same numbers, and request.csv's requests and tokens per
    (rank, window), each request placed on the rank where its rid is first scheduled (the rids
    taken from every scheduling row's res_list, joined to request.csv's http_rid): the full
    per-rank table the diagnosis computes. docs/performance.md says why the goal is judged
    against this one.
    """
    window = (pl.col("start_time(ms)").cast(pl.Float64) // 10_000).alias("w")
    per = [pl.len(), pl.col("recv_token_size").cast(pl.Float64).sum()]
    queries = []
    for folder in folders:
        batch = pl.scan_csv(folder / "batch.csv", infer_schema=False)
        queries.append(_numbers(batch))
        requests = pl.scan_csv(folder / "request.csv", infer_schema=False)
        if place:
            placed = requests.join(
                _first_ranks(batch), left_on="http_rid", right_on="rid", how="left"
            )
            queries.append(placed.group_by("dp_rank", window).agg(per))
        else:
            queries.append(requests.group_by(window).agg(per))
    return pl.collect_all(queries, engine="streaming")


LABELS = {
    "baseline": "read_csv",
    "lazy": "numbers-only pass",
    "placed": "per-rank pass with request placement: the goal's baseline",
}


def _folders(folder: Path) -> list[Path]:
    if (folder / "batch.csv").exists():
        return [folder]
    return sorted(p for p in folder.iterdir() if (p / "batch.csv").exists())


def _measure(kind: str, folder: Path) -> dict[str, float]:
    """Run one measurement in this process; returns seconds and peak RSS (bytes).

    Peak RSS is VmHWM of /proc/self/status: ru_maxrss survives exec on Linux and would report
    the parent's (generator's) peak.
    """
    t = time.perf_counter()
    if kind == "load":
        from skewscope.sources.profiler import load_profiler

        ev = load_profiler([str(folder)])
        assert ev.dp is not None
    elif kind == "diagnose":
        from skewscope.cli import main as cli_main

        out = folder.parent / f"{folder.name}-report.json"
        code = cli_main(["diagnose", str(folder), "--format", "json", "-o", str(out), "--force"])
        assert code in (0, 1), code
    elif kind == "whatif":
        from skewscope.cli import main as cli_main

        out = folder.parent / f"{folder.name}-whatif.json"
        code = cli_main(["whatif", str(folder), "--format", "json", "-o", str(out), "--force"])
        assert code == 0, code
    elif kind == "read_each":
        for one in sorted(p for p in folder.iterdir() if p.is_dir()):
            for csv in sorted(one.glob("*.csv")):
                pl.read_csv(csv, infer_schema=False)
    elif kind == "lazy":
        bare_pass(_folders(folder), place=False)
    elif kind == "placed":
        bare_pass(_folders(folder), place=True)
    else:
        pl.read_csv(folder / "batch.csv", infer_schema=False)
    seconds = time.perf_counter() - t
    use = resource.getrusage(resource.RUSAGE_SELF)
    cpu = use.ru_utime + use.ru_stime
    if kind in ("diagnose", "whatif"):
        # the worker processes' CPU: the forkserver reaped them; stopped, it is reaped here
        import multiprocessing.forkserver as fs

        fs._forkserver._stop()  # private (3.11): the only way to count its children now
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu += kids.ru_utime + kids.ru_stime
    return {"seconds": seconds, "cpu": cpu, "rss": _peak_rss()}


def _peak_rss() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1]) * 1024
    return float("nan")


def _child(kind: str, folder: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", kind, "--dir", str(folder)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=30)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/skewscope-bench/inst-0"))
    ap.add_argument(
        "--instances",
        type=int,
        default=1,
        help="read N copies of the instance (hard links) as one fleet",
    )
    ap.add_argument("--repeat", type=int, default=1, help="best of N runs of each")
    ap.add_argument(
        "--tiny",
        type=int,
        metavar="N",
        help="N tiny instance folders: diagnose and whatif against reading each CSV",
    )
    ap.add_argument(
        "--measure",
        choices=["load", "baseline", "lazy", "placed", "diagnose", "whatif", "read_each"],
    )
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(_measure(args.measure, args.dir)))
        return
    if args.tiny:
        _tiny(args.tiny, args.dir.parent, args.repeat)
        return
    path = args.dir / "batch.csv"
    if not path.exists():
        t = time.perf_counter()
        write_instance(args.dir, args.steps, args.batch)
        print(f"generated in {time.perf_counter() - t:.1f} s")
    one = path.stat().st_size + (args.dir / "request.csv").stat().st_size
    rows = pl.scan_csv(path, infer_schema=False).select(pl.len()).collect().item()
    print(
        f"batch.csv: {path.stat().st_size / 1e6:.0f} MB, {rows} rows "
        f"(+ request.csv, {one / 1e6:.0f} MB in all)"
    )
    target, kinds = args.dir, ("baseline", "load")
    if args.instances > 1:
        target = copy_instances(args.dir, args.instances)
        kinds = ("lazy", "placed", "diagnose")
        rows, size = rows * args.instances, one * args.instances
        print(f"{args.instances} instances in {target}: {size / 1e9:.2f} GB")
    else:
        size = one
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    for _ in range(args.repeat):  # interleaved: a burst of load hits every kind alike
        for kind in kinds:
            runs[kind].append(_child(kind, target))
    # each figure its best over the runs (wall and CPU separately: load hits them apart)
    best = {
        k: {f: min(r[f] for r in rs) for f in ("seconds", "cpu", "rss")} for k, rs in runs.items()
    }
    for kind in kinds:
        m = best[kind]
        each = ", ".join(f"{r['seconds']:.2f} s/{r['cpu']:.1f}" for r in runs[kind])
        print(
            f"{kind:8s}: {m['seconds']:6.2f} s  {size / 1e6 / m['seconds']:7.1f} MB/s  "
            f"{rows / m['seconds']:10.0f} rows/s  {m['cpu']:5.1f} CPU s  "
            f"peak RSS {m['rss'] / 1e6:6.0f} MB "
            f"({m['rss'] / size:.2f}x file size)  "
            f"[wall s/CPU s of each run: {each}]"
        )
    full = best[kinds[-1]]
    for base_kind in kinds[:-1]:
        base = best[base_kind]
        print(
            f"{kinds[-1]} / {base_kind} ({LABELS[base_kind]}): "
            f"{full['seconds'] / base['seconds']:.2f}x wall, {full['cpu'] / base['cpu']:.2f}x CPU"
        )


def _tiny(n: int, root: Path, repeat: int) -> None:
    """``--tiny N``: the fleet-size case, each kind in a fresh process, interleaved."""
    run = root / f"tiny-{n}"
    if not run.exists():
        sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
        from helpers.profiler_fixtures import tiny_fleet

        t = time.perf_counter()
        tiny_fleet(run, n)
        print(f"{n} tiny folders generated in {time.perf_counter() - t:.1f} s")
    size = sum(p.stat().st_size for p in run.glob("*/*.csv"))
    print(f"{n} folders in {run}: {size / 1e6:.1f} MB of CSV")
    kinds = ("read_each", "diagnose", "whatif")
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    for _ in range(repeat):
        for kind in kinds:
            runs[kind].append(_child(kind, run))
            print(f"  {kind}: {runs[kind][-1]['seconds']:.1f} s", flush=True)
    best = {
        k: {f: min(r[f] for r in rs) for f in ("seconds", "cpu", "rss")} for k, rs in runs.items()
    }
    for kind in kinds:
        m = best[kind]
        print(
            f"{kind:9s}: {m['seconds']:7.1f} s wall, {m['cpu']:7.1f} CPU s (workers "
            f"included; best of {repeat}), parent peak RSS {m['rss'] / 1e6:.0f} MB"
        )
    base = best["read_each"]
    for kind in kinds[1:]:
        print(
            f"{kind} / read_each (each CSV read once by polars.read_csv, one after another): "
            f"{best[kind]['seconds'] / base['seconds']:.2f}x wall, "
            f"{best[kind]['cpu'] / base['cpu']:.2f}x CPU"
        )


if __name__ == "__main__":
    main()
