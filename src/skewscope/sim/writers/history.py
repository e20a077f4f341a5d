"""The OpenMetrics history written as the run goes: no step table, bounded memory.

A ``HistorySinks`` (a ``simulate(sinks=...)`` factory) gives each instance group, in the
process that runs it, a ``HistorySink``: at each time chunk it counts the group's request and
step events into the ranks' running state (``rank_model.RankModel``: counters, histogram
buckets, the last steps a gauge reads) and evaluates every family at the scrape times before
the chunk's cut. The values go to one spill file per family (the OpenMetrics file wants each
family's samples together, the run produces them scrape by scrape). When the run ends each sink
works out the size of each family's text of its group (``openmetrics.lines_size``), so
``write_history`` knows where every group's lines of every family go before any is written:
the groups' texts are formatted side by side, straight into the file at their offsets — the
history is written once, not formatted into temporary texts and copied (on a disk that takes
~400 MB/s, 10 GB written twice was a third of the fleet hour).
"""

from __future__ import annotations

import errno
import io
import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import numpy as np

from skewscope.atomic import atomic_open_binary
from skewscope.sim.records import START_S
from skewscope.sim.writers.exposition import InstanceModel, MetricSpec, Series, model_specs
from skewscope.sim.writers.families import family_values, roles_read
from skewscope.sim.writers.openmetrics import (
    DEFAULT_JOB,
    family_header,
    lines_size,
    scrape_labels,
    stamp_texts,
    write_family,
)
from skewscope.sim.writers.rank_events import RequestEvents
from skewscope.sim.writers.rank_group import RankGroup
from skewscope.sim.writers.rank_model import RankModel

if TYPE_CHECKING:
    from collections.abc import Callable

    import polars as pl
    from numpy.typing import NDArray

    from skewscope.sim.rank import RequestState
    from skewscope.sim.records import RankInfo
    from skewscope.sim.workload import Workload

    F64 = NDArray[np.float64]

Labels = tuple[tuple[str, str], ...]


@dataclass
class HistorySinks:
    """Factory of the groups' sinks (picklable: workers make their own)."""

    model_name: str
    dialect: str
    devices: str | None
    times: F64  # scrape times (epoch s)
    spill: Path  # a folder for the spill files
    meta: dict[str, Any] = field(default_factory=dict)
    job: str = DEFAULT_JOB
    instance_labels: dict[str, str] | None = None  # instance -> ``instance`` label

    def __call__(
        self, lo: int, hi: int, wl: Workload, ranks: list[RankInfo], duration: float
    ) -> HistorySink:
        return HistorySink(self, lo, hi, wl, ranks, duration)


@dataclass
class HistoryPart:
    """What one group's sink leaves for ``write_history``: its instances' series (name and
    labels, per family, per label group), the spill file of each family, the scrape count of
    each chunk, the scrape labels and each family's text size."""

    instances: list[str]
    specs: list[MetricSpec]
    series: list[list[list[list[tuple[str, Labels]]]]]  # [instance][family][group][series]
    files: list[Path]
    times: F64
    chunks: list[int] = field(default_factory=list)
    extra: dict[str, dict[str, str]] = field(default_factory=dict)  # instance -> scrape labels
    sizes: list[int] = field(default_factory=list)  # bytes of each family's lines


_EVENTS = ("arrival", "sched", "first", "finish")


class HistorySink:
    """One instance group's running /metrics state; see the module docstring."""

    def __init__(
        self,
        f: HistorySinks,
        lo: int,
        hi: int,
        wl: Workload,
        ranks: list[RankInfo],
        duration: float,
    ) -> None:
        self.f, self.times, self.end = f, f.times, duration
        self.arrival = wl.arrival_s
        self.inp = wl.input_tokens.astype(np.float64)
        self.out = wl.output_tokens.astype(np.float64)
        n_dp = sum(r.instance == ranks[0].instance for r in ranks)
        self.g0, self.g1 = lo * n_dp, hi * n_dp
        infos = ranks[self.g0 : self.g1]
        self.n_dp = n_dp
        specs = model_specs(f.dialect, f.devices, f.meta)
        self.group = RankGroup(infos, roles_read(specs))
        names = list(dict.fromkeys(r.instance for r in infos))
        # the group's ranks instance by instance, DP ranks in order (``families.family_values``)
        assert [(r.instance, r.dp_rank) for r in infos] == [
            (i, d) for i in names for d in range(n_dp)
        ], "ranks out of instance order"
        self.instances = [
            InstanceModel(i, f.model_name, specs, [RankModel(r) for r in infos if r.instance == i])
            for i in names
        ]
        self.specs = specs
        files = [f.spill / f"{lo:05d}-{k:03d}.f64" for k in range(len(specs))]
        self.part = HistoryPart(names, specs, [], files, f.times)
        self.next_t = 0  # index of the next scrape time
        self.next_q = 0  # first request not yet looked at
        self.open = np.zeros(0, dtype=np.int64)  # requests with events still to count
        self.done = np.zeros((len(_EVENTS), 0), dtype=bool)
        self.held: list[F64] = []  # step rows of chunks with no scrape time yet

    def chunk(
        self, rows: F64, members: pl.DataFrame | None, first_id: int, cut: float, reqs: RequestState
    ) -> None:
        final = cut >= self.end
        times = self.times
        stop = len(times) if final else int(np.searchsorted(times, cut + START_S, "left"))
        self.held.append(rows)
        if stop <= self.next_t:
            return
        t = times[self.next_t : stop]
        self.next_t = stop
        steps = np.concatenate(self.held) if len(self.held) > 1 else self.held[0]
        self.held = []
        q_end = len(self.arrival) if final else int(np.searchsorted(self.arrival, cut, "left"))
        self._admit(reqs, q_end)
        self._feed(reqs, steps, float(t[-1]))
        if not self.part.series:
            self.part.series = [inst.layout() for inst in self.instances]
        values = family_values(self.specs, self.group, self.n_dp, t)  # [instance, series, time]
        for k, path in enumerate(self.part.files):
            with path.open("ab") as out:
                values[k].tofile(out)
        self.part.chunks.append(len(t))

    def _admit(self, reqs: RequestState, q_end: int) -> None:
        """Open the requests routed to this group since the last chunk."""
        q = np.arange(self.next_q, q_end, dtype=np.int64)
        self.next_q = q_end
        rank = np.asarray(reqs.rank[q[0] : q_end] if len(q) else [], dtype=np.int64)
        q = q[(rank >= self.g0) & (rank < self.g1)]
        self.open = np.concatenate([self.open, q])
        self.done = np.concatenate([self.done, np.zeros((len(_EVENTS), len(q)), bool)], axis=1)

    def _feed(self, reqs: RequestState, steps: F64, upto: float) -> None:
        """Count every event up to ``upto`` not counted yet, all ranks at once."""
        q = self.open
        arrival = self.arrival[q] + START_S
        times = [arrival] + [_times(lst, q) for lst in (reqs.fsched, reqs.ftok, reqs.finish)]
        now = [~d & (x <= upto) for d, x in zip(self.done, times, strict=True)]  # NaN: False
        rejected = np.asarray(_take(reqs.rejected, q), dtype=bool)
        rank = np.asarray(_take(reqs.rank, q), dtype=np.int64) - self.g0
        a, sc, fi, fn = times
        at = [np.where(n, x, np.nan) for n, x in zip(now, times, strict=True)]
        ev = RequestEvents(
            a, sc, fi, fn, self.inp[q], self.out[q], ~rejected, at[0], at[1], at[2], at[3], rank
        )
        self.group.feed(ev, steps[:, 0].astype(np.int64) - self.g0, steps, upto)
        for d, n in zip(self.done, now, strict=True):
            d |= n
        keep = ~(self.done[3] | (rejected & self.done[0]))
        self.open, self.done = self.open[keep], self.done[:, keep]

    def close(self, reqs: RequestState) -> HistoryPart:
        """The group's part, with the size of each family's text (worked out here, so the
        groups' worker processes share the work)."""
        part, f = self.part, self.f
        part.extra = scrape_labels(part.instances, f.job, f.instance_labels)
        stamps = stamp_texts(self.times)
        part.sizes = [
            lines_size(part_series(part, k, len(self.times)), stamps, part.extra)
            for k in range(len(part.specs))
        ]
        return part


def _take(lst: list[Any], idx: NDArray[np.int64]) -> list[Any]:
    return [lst[i] for i in idx.tolist()]


def _times(lst: list[float], idx: NDArray[np.int64]) -> F64:
    """Event times of the requests (run s -> epoch s; never: NaN), as ``requests_frame``."""
    a = np.asarray(_take(lst, idx), dtype=np.float64)
    out: F64 = np.where(a < 0, np.nan, a + START_S)
    return out


def part_series(part: HistoryPart, k: int, n_times: int) -> list[tuple[str, list[list[Series]]]]:
    """Family ``k`` of every instance of the part, at every scrape time, from its spill."""
    flat = np.fromfile(part.files[k], dtype=np.float64)
    sizes = [sum(len(g) for g in part.series[i][k]) for i in range(len(part.instances))]
    blocks: list[list[F64]] = [[] for _ in part.instances]
    at = 0
    for n in part.chunks:
        for i, size in enumerate(sizes):
            blocks[i].append(flat[at : at + size * n].reshape(size, n))
            at += size * n
    out = []
    for i, inst in enumerate(part.instances):
        vals = np.concatenate(blocks[i], axis=1) if blocks[i] else np.zeros((sizes[i], 0))
        it = iter(vals)
        groups = [[Series(name, labels, next(it)) for name, labels in g] for g in part.series[i][k]]
        assert vals.shape[1] == n_times
        out.append((inst, groups))
    return out


def write_history(
    path: Path,
    parts: list[HistoryPart],
    *,
    jobs: int | None = None,
    progress: Callable[[float], None] | None = None,
) -> Path:
    """The OpenMetrics file of the parts (in instance order), written whole or not at all (as
    ``openmetrics.write_openmetrics`` writes a kept run's): every family's header, then each
    part's lines of it. The parts' sizes place every (family, part) text before any is
    written, so ``jobs`` threads (polars formats and the kernel writes outside the GIL) write
    them side by side; a text that does not come out at its size is an error, not a
    shifted file. ``progress`` gets the families written, in fractions."""
    specs = parts[0].specs
    stamps = stamp_texts(parts[0].times)
    headers = [family_header(spec) for spec in specs]
    at, heads, places = 0, [], []
    for k, header in enumerate(headers):
        heads.append(at)
        at += len(header)
        for p in parts:
            places.append((p, k, at))
            at += p.sizes[k]
    with atomic_open_binary(path) as out:
        fd = out.fileno()
        _reserve(fd, at + len(_EOF))
        for where, header in zip(heads, headers, strict=True):
            _pwrite(fd, header, where)
        _pwrite(fd, _EOF, at)
        workers = max(1, min(jobs or len(os.sched_getaffinity(0)), len(places)))
        ex = ThreadPoolExecutor(workers)
        try:
            todo = [ex.submit(_write_lines, fd, p, k, where, stamps) for p, k, where in places]
            for done, fut in enumerate(as_completed(todo), 1):
                fut.result()
                if progress is not None:
                    progress(done / len(parts))
        finally:  # on a failure, the texts not begun are not written
            ex.shutdown(wait=True, cancel_futures=True)
    for p in parts:
        for spill in p.files:
            spill.unlink(missing_ok=True)
    return path


_EOF = b"# EOF\n"


def _reserve(fd: int, size: int) -> None:
    """The file's blocks allocated up front where the file system can: a full disk is
    found before gigabytes are formatted, not at the end."""
    os.ftruncate(fd, size)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            raise


def _write_lines(fd: int, part: HistoryPart, k: int, where: int, stamps: list[str]) -> None:
    """Family ``k`` of ``part`` at byte ``where`` of the file (its place, worked out from the
    parts' sizes)."""
    out = _At(fd, where)
    series = part_series(part, k, len(part.times))
    write_family(cast(BinaryIO, out), part.specs[k], series, stamps, part.extra, header=False)
    if out.at != where + part.sizes[k]:
        raise RuntimeError(
            f"history text of {part.specs[k].name} is {out.at - where} bytes, "
            f"{part.sizes[k]} were placed"
        )


class _At(io.RawIOBase):
    """A writer at a byte position of a file (``pwrite``: threads share the descriptor)."""

    def __init__(self, fd: int, at: int) -> None:
        super().__init__()
        self.fd, self.at = fd, at

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        n = _pwrite(self.fd, b, self.at)
        self.at += n
        return n


def _pwrite(fd: int, data: Any, at: int) -> int:
    """All of ``data`` at byte ``at`` (a short write goes on where it stopped)."""
    view = memoryview(data).cast("B")
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], at + done)
    return done
