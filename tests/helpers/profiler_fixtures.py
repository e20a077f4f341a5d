"""Write msServiceProfiler CSVs from explicit per-request / per-step lists (known truth).

Written from docs/profiler-formats.md independently of the simulator's writer, so the reader
and that writer check each other. Cells are written the way pandas ``to_csv`` does: minimal
quoting, None -> empty cell, lists of dicts as Python repr.
"""

from __future__ import annotations

import csv
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

T0 = 1_745_398_333.0  # 2025-04-23 08:52:13 UTC
TZ_S = 8 * 3600.0  # the profiler writes local datetimes (Asia/Shanghai)

REQUEST_HEADERS = {
    "current": "http_rid,start_datetime,recv_token_size,reply_token_size,execution_time(ms),"
    "queue_wait_time(ms),first_token_latency(ms),cache_hit_rate,start_time(ms)",
    "dec2025": "http_rid,start_time,start_datetime,recv_token_size,reply_token_size,"
    "execution_time(ms),queue_wait_time(ms),first_token_latency(ms),cache_hit_rate",
    "cann2025": "http_rid,start_time(ms),recv_token_size,reply_token_size,execution_time(ms),"
    "queue_wait_time(ms),first_token_latency(ms),cache_hit_rate",
}
KV_COLS = "total_blocks,used_blocks,free_blocks,blocks_allocated,blocks_freed,kvcache_usage_rate"
SIZES = (
    "prefill_batch_size,decode_batch_size,prefill_scheduled_tokens,decode_scheduled_tokens,"
    "total_scheduled_tokens"
)
BATCH_HEADERS = {
    "current": f"name,res_list,start_datetime,end_datetime,during_time(ms),batch_type,prof_id,"
    f"batch_size,{KV_COLS},{SIZES},dp_rank,start_time(ms),end_time(ms)",
    "dec2025": f"name,res_list,start_time,end_time,during_time(ms),batch_type,prof_id,"
    f"total_batch_size,{KV_COLS},{SIZES},dp_rank",
    "cann2025": "name,res_list,start_time(ms),end_time(ms),during_time(ms),batch_type,prof_id,"
    "total_batch_size,Prefill_batch_size,Decode_batch_size,Prefill_scheduled_tokens,"
    "Decode_scheduled_tokens,total_scheduled_tokens",
    "mindie": f"name,res_list,start_datetime,end_datetime,during_time(ms),batch_type,prof_id,"
    f"batch_size,{SIZES},dp_rank,start_time(ms),end_time(ms)",
}
# The cells of a batch.csv row after name,res_list, in each generation's BATCH_HEADERS order:
# datetimes = start/end local datetimes, epochs = start_time/end_time numbers, step =
# during_time,batch_type,prof_id,batch_size.
_BATCH_LAYOUT = {
    "current": ("datetimes", "step", "kv", "sizes", "rank", "epochs"),
    "dec2025": ("datetimes", "step", "kv", "sizes", "rank"),
    "cann2025": ("epochs", "step", "sizes"),
    "mindie": ("datetimes", "step", "sizes", "rank", "epochs"),
}
KVCACHE_HEADERS = {
    "vllm": "name,start_time,total_blocks,used_blocks,free_blocks,blocks_allocated,blocks_freed,"
    "kvcache_usage_rate",
    "mindie": "rid,name,start_time,device_kvcache_left,kvcache_usage_rate",
}
STATUS_HEADER = (
    "hostuid,pid,start_datetime,relative_timestamp(ms),waiting,running,swapped,timestamp(ms)"
)


def local_dt(epoch_s: float, tz_s: float = TZ_S) -> str:
    """The profiler's datetime text: local wall clock with a colon before the microseconds."""
    dt = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=round(epoch_s * 1e6))
    return (dt + timedelta(seconds=tz_s)).strftime("%Y-%m-%d %H:%M:%S:%f")


@dataclass
class Req:
    rid: str
    start_s: float
    prompt: int = 100
    output: int = 20
    e2e_ms: float | None = 500.0  # None: the request never finished (blank)
    queue_ms: float = 10.0
    ttft_ms: float = 50.0


@dataclass
class Step:
    """One engine step of a process: a scheduling row (and an execution row) in batch.csv."""

    start_s: float
    prof_id: str = "ms_service_host-100"
    dp_rank: int | None = None
    prefill: Sequence[str] = ()  # rids prefilled in this step
    decode: Sequence[str] = ()  # rids decoded in this step
    dur_ms: float = 20.0
    exec_ms: float = 15.0
    total_blocks: int = 1000
    used_blocks: int = 100
    allocated: int = 5
    freed: int = 3
    prompt_tokens: int = 64  # tokens scheduled for each prefill rid

    @property
    def batch_size(self) -> int:
        return len(self.prefill) + len(self.decode)

    @property
    def scheduled_tokens(self) -> int:
        return self.prompt_tokens * len(self.prefill) + len(self.decode)

    @property
    def usage(self) -> float:
        return self.used_blocks / self.total_blocks


@dataclass
class KvSnap:
    start_s: float
    used_blocks: int
    total_blocks: int = 1000
    allocated: int = 0
    freed: int = 0


@dataclass
class BatchOptions:
    generation: str = "current"
    epoch_unit: str = "us"  # what start_time(ms) really holds: "us" (current code) or "ms"
    exec_name: str | None = "modelExec"  # None: no execution rows
    sched_name: str = "batchFrameworkProcessing"
    rank_cell: str = "value"  # "value", "empty" or "<NA>"
    rid_suffix: bool = False  # res_list rids carry vLLM's -xxxxxxxx suffix
    typed: bool = True  # res_list dicts carry 'type' (vLLM); MindIE has only rid/iter
    extra_rows: list[list[str]] = field(default_factory=list)


def _write(path: Path, header: str, rows: Sequence[Sequence[Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        fh.write(header + "\n")
        writer = csv.writer(fh, lineterminator="\n")
        for row in rows:
            writer.writerow(["" if v is None else v for v in row])
    return path


def write_requests(path: Path, reqs: Sequence[Req], generation: str = "current") -> Path:
    rows = []
    for r in reqs:
        ms = round(r.start_s * 1000, 3)
        common = [r.prompt, float(r.output), r.e2e_ms, r.queue_ms, r.ttft_ms, "N/A"]
        if generation == "current":
            rows.append([r.rid, local_dt(r.start_s), *common, ms])
        elif generation == "dec2025":
            rows.append([r.rid, ms, local_dt(r.start_s), *common])
        else:
            rows.append([r.rid, ms, *common])
    return _write(path, REQUEST_HEADERS[generation], rows)


def _suffix(rid: str, on: bool) -> str:
    return f"{rid}-{zlib.crc32(rid.encode()):08x}" if on else rid


def res_list(step: Step, opts: BatchOptions) -> str:
    items: list[dict[str, Any]] = []
    for kind, rids in ((0, step.prefill), (1, step.decode)):
        for rid in rids:
            d: dict[str, Any] = {
                "rid": _suffix(rid, opts.rid_suffix),
                "iter": 0 if kind == 0 else 3,
            }
            if opts.typed:
                d.update(type=kind, num_scheduled_tokens=step.prompt_tokens if kind == 0 else 1)
            items.append(d)
    return repr(items)


def _epoch(t: float, unit: str) -> float:
    return round(t * 1e6) if unit == "us" else round(t * 1000, 3)


def _rank(step: Step, opts: BatchOptions) -> str:
    if step.dp_rank is None or opts.rank_cell != "value":
        return "<NA>" if opts.rank_cell == "<NA>" else ""
    return str(step.dp_rank)


def _batch_row(s: Step, opts: BatchOptions, name: str, exec_row: bool) -> list[Any]:
    start, dur = s.start_s, (s.exec_ms if exec_row else s.dur_ms)
    end = start + dur / 1000
    btype = ",".join(k for k, v in (("Prefill", s.prefill), ("Decode", s.decode)) if v)
    n_pre = len(s.prefill)
    sizes = [n_pre, len(s.decode), s.prompt_tokens * n_pre, len(s.decode), s.scheduled_tokens]
    kv = [
        s.total_blocks,
        s.used_blocks,
        s.total_blocks - s.used_blocks,
        s.allocated,
        s.freed,
        round(s.usage, 6),
    ]
    if exec_row:
        kv, sizes = [0.0] * 6, [0] * 5  # the exporter fills execution rows' KV with 0.0
    cells: dict[str, list[Any]] = {
        "datetimes": [local_dt(start), local_dt(end)],
        "epochs": [_epoch(start, opts.epoch_unit), _epoch(end, opts.epoch_unit)],
        "step": [dur, btype, s.prof_id, s.batch_size if not exec_row else 0],
        "kv": kv,
        "sizes": sizes,
        "rank": [_rank(s, opts)],
    }
    row: list[Any] = [name, "[]" if exec_row else res_list(s, opts)]
    for part in _BATCH_LAYOUT[opts.generation]:
        row.extend(cells[part])
    return row


def write_batch(path: Path, steps: Sequence[Step], opts: BatchOptions | None = None) -> Path:
    opts = opts or BatchOptions()
    rows: list[list[Any]] = []
    for s in steps:
        rows.append(_batch_row(s, opts, opts.sched_name, exec_row=False))
        if opts.exec_name:
            rows.append(_batch_row(s, opts, opts.exec_name, exec_row=True))
    rows.extend(opts.extra_rows)
    return _write(path, BATCH_HEADERS[opts.generation], rows)


def write_kvcache(path: Path, snaps: Sequence[KvSnap], variant: str = "vllm") -> Path:
    rows: list[list[Any]] = []
    for k in snaps:
        usage = round(k.used_blocks / k.total_blocks, 6)
        if variant == "vllm":
            rows.append(
                [
                    "KVCacheStatus",
                    local_dt(k.start_s),
                    k.total_blocks,
                    k.used_blocks,
                    k.total_blocks - k.used_blocks,
                    k.allocated,
                    k.freed,
                    usage,
                ]
            )
        else:
            rows.append(
                ["r1", "GetCacheStatus", local_dt(k.start_s), k.total_blocks - k.used_blocks, usage]
            )
    return _write(path, KVCACHE_HEADERS[variant], rows)


def write_status(path: Path, samples: Sequence[tuple[float, int, int]]) -> Path:
    """``samples``: (time_s, pid, waiting)."""
    rows = [["h1", pid, local_dt(t), 0, w, None, None, round(t * 1000, 3)] for t, pid, w in samples]
    return _write(path, STATUS_HEADER, rows)


def simple_instance(
    folder: Path,
    n_requests: int = 20,
    *,
    ranks: int = 2,
    period_s: float = 1.0,
    opts: BatchOptions | None = None,
    request_generation: str = "current",
    prefix: str = "r",
) -> tuple[list[Req], list[Step]]:
    """An instance where request i arrives at T0 + i*period_s on rank i % ranks and is
    prefilled in one step then decoded in the next; returns the truth lists."""
    reqs = [
        Req(
            f"{prefix}{i}",
            T0 + i * period_s,
            prompt=100 + i,
            output=10 + i,
            e2e_ms=100.0 + i,
            queue_ms=float(i),
            ttft_ms=20.0 + i,
        )
        for i in range(n_requests)
    ]
    steps = []
    for i, r in enumerate(reqs):
        rank = i % ranks if ranks > 1 else None
        pid = f"ms_service_host-{100 + (rank or 0)}"
        steps.append(Step(r.start_s + 0.01, pid, rank, prefill=[r.rid]))
        steps.append(Step(r.start_s + 0.05, pid, rank, decode=[r.rid]))
    write_requests(folder / "request.csv", reqs, request_generation)
    write_batch(folder / "batch.csv", steps, opts)
    return reqs, steps


def set_cell(path: Path, line: int, column: str, value: str) -> None:
    """Overwrite one cell of a simple CSV (no quoted commas on that line): file ``line``
    (1-based, the header is line 1), header ``column``."""
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[line - 1].split(",")
    cells[header.index(column)] = value
    lines[line - 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


def tiny_fleet(root: Path, n: int, hot: int = 7, *, ranks: int = 1) -> Path:
    """``n`` tiny instance folders ``root/inst-00000`` ... (20 requests, one every 3 s), folder
    ``hot`` with three times the requests (60, one a second): the fleet-size case (issue 26).
    The folders hard-link two written instances (a copy where links are refused), so 10,000
    cost seconds to make; returns ``root``."""
    import os
    import shutil

    kinds = {"base": (20, 3.0), "hot": (60, 1.0)}
    made = {}
    for kind, (count, period) in kinds.items():
        made[kind] = root.parent / f"{root.name}-{kind}"
        simple_instance(made[kind], count, ranks=ranks, period_s=period)
    for i in range(n):
        src = made["hot" if i == hot else "base"]
        dest = root / f"inst-{i:05d}"
        dest.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            try:
                os.link(f, dest / f.name)
            except OSError:
                shutil.copyfile(f, dest / f.name)
    return root
