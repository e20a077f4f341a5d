"""Read many instance folders at once: a few large ones on threads, many small ones in processes.

Reading one instance is a chain of small polars queries (header peeks, the typed pass, checks,
placement, the per-tick reduction). On a large batch.csv polars works with the GIL released, so
threads read instances side by side; on a tiny folder the chain's fixed cost (~20 ms of mostly
Python, the GIL held) is all there is, and 10,000 of them on threads are as slow as one after
another. Such a fleet is read in batches of folders by worker processes (``ReadBudget``), each
batch's results sent back at once, so the per-folder cost is paid on every core.

Either way the first bad instance in folder order raises its error, as a one-by-one read would,
and ``progress`` is told the CSV bytes read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TypeVar

from skewscope.sources import profiler_range as pr
from skewscope.sources import profiler_schema as ps
from skewscope.sources.profiler_instance import Instance, load_instance
from skewscope.sources.profiler_layout import InstanceFiles

T = TypeVar("T")
Progress = Callable[[int, int], None]  # (CSV bytes of the instances read, of all)
# What is kept of each instance read (a module-level function or a partial of one: the process
# path sends it to the workers): the instance itself, its per-tick partials, replay rows.
Finish = Callable[[Instance], T]


@dataclass(frozen=True)
class ReadBudget:
    """How many instances are read at once: up to ``workers``, while the estimated peak memory
    of the reads in flight (``fixed_bytes`` + ``per_byte`` x an instance's CSV bytes: the
    streaming reader's buffers and the row table of one batch.csv) stays within
    ``memory_bytes``; one instance is always read, whatever its estimate.

    A fleet of at least ``process_min_instances`` folders averaging at most ``small_bytes`` of
    CSV is read by ``workers`` processes, in batches of at most ``batch_instances`` folders
    (a worker holds one read at a time, and its batch's finished results)."""

    workers: int = 2
    memory_bytes: int = 384 << 20
    fixed_bytes: int = 96 << 20
    per_byte: float = 0.25
    process_min_instances: int = 128
    small_bytes: int = 1 << 20
    batch_instances: int = 64
    scheduler: str | None = None  # a Dask scheduler's address: the batches run on its workers

    def estimate(self, csv_bytes: int) -> float:
        return self.fixed_bytes + self.per_byte * csv_bytes

    def in_processes(self, sizes: Sequence[int]) -> bool:
        """Many small folders, and ``workers`` reads of the largest fit the memory budget."""
        return (
            self.workers > 1
            and len(sizes) >= self.process_min_instances
            and sum(sizes) <= self.small_bytes * len(sizes)
            and self.workers * self.estimate(max(sizes)) <= self.memory_bytes
        )


READ_BUDGET = ReadBudget()


def csv_bytes(files: InstanceFiles) -> int:
    return sum(p.stat().st_size for p in files.files.values() if p.is_file())


def read_all(
    found: Sequence[InstanceFiles],
    clocks: pr.ClockPolicy,
    finish: Finish[T],
    budget: ReadBudget = READ_BUDGET,
    progress: Progress | None = None,
) -> list[T]:
    """``finish(instance)`` of every instance, in folder order (see the module docstring)."""
    ps.small_csv_chunks()  # here, before any reading thread starts (setenv races getenv)
    sizes = [csv_bytes(f) for f in found]
    tell = _Told(sizes, progress)
    if budget.scheduler is not None:
        return _on_dask(found, clocks, finish, budget, tell)
    if budget.in_processes(sizes):
        return _in_processes(found, clocks, finish, budget, tell)
    return _in_threads(found, clocks, finish, budget, tell)


class _Told:
    """The bytes read so far, told to ``progress`` (the start and every finished read)."""

    def __init__(self, sizes: Sequence[int], progress: Progress | None) -> None:
        self.sizes, self.progress = sizes, progress
        self.total, self.done = sum(sizes), 0
        if progress is not None:
            progress(0, self.total)

    def read(self, first: int, last: int) -> None:
        self.add(sum(self.sizes[first:last]))

    def add(self, csv_bytes: int) -> None:
        self.done += csv_bytes
        if self.progress is not None:
            self.progress(self.done, self.total)


def _in_threads(
    found: Sequence[InstanceFiles],
    clocks: pr.ClockPolicy,
    finish: Finish[T],
    budget: ReadBudget,
    tell: _Told,
    sizes: Sequence[int] | None = None,
) -> list[T]:
    """Up to ``workers`` reads at once within the memory budget; after a failure the reads in
    flight are finished, no new one is started. ``sizes``: of ``found`` (default: all)."""
    sizes = tell.sizes if sizes is None else sizes
    got: dict[int, T] = {}
    failed: dict[int, BaseException] = {}
    with ThreadPoolExecutor(max_workers=max(1, budget.workers)) as pool:
        running: dict[Future[T], int] = {}
        nxt = 0
        while running or (nxt < len(found) and not failed):
            while (
                nxt < len(found)
                and not failed
                and (
                    not running
                    or (
                        len(running) < budget.workers
                        and sum(budget.estimate(sizes[i]) for i in running.values())
                        + budget.estimate(sizes[nxt])
                        <= budget.memory_bytes
                    )
                )
            ):
                running[pool.submit(_one, found[nxt], clocks, finish)] = nxt
                nxt += 1
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                i = running.pop(fut)
                error = fut.exception()
                if error is not None:
                    failed[i] = error
                    continue
                got[i] = fut.result()
                tell.add(sizes[i])
    if failed:
        raise failed[min(failed)]
    return [got[i] for i in range(len(found))]


def _one(files: InstanceFiles, clocks: pr.ClockPolicy, finish: Finish[T]) -> T:
    return finish(load_instance(files, clocks))


Batch = tuple[list[T], tuple[int, Exception] | None]


def read_batch(
    found: Sequence[InstanceFiles], clocks: pr.ClockPolicy, finish: Finish[T]
) -> Batch[T]:
    """A worker's batch, read in order up to its first bad folder: the results before it, and
    that folder's place in the batch with its error (a user-facing error pickles whole)."""
    ps.small_csv_chunks()
    out: list[T] = []
    for k, files in enumerate(found):
        try:
            out.append(finish(load_instance(files, clocks)))
        except Exception as error:  # sent back, raised in the reading process
            return out, (k, error)
    return out, None


def _in_processes(
    found: Sequence[InstanceFiles],
    clocks: pr.ClockPolicy,
    finish: Finish[T],
    budget: ReadBudget,
    tell: _Told,
) -> list[T]:
    """Batches of consecutive folders on ``workers`` processes (forkserver: forking a process
    that runs polars' thread pool can deadlock the child); batches run in folder order, so on a
    failure the batches not started are dropped and the ones before it are finished."""
    from concurrent.futures.process import BrokenProcessPool

    from skewscope.workers import process_pool

    size = _batch_size(len(found), budget.workers, budget)
    starts = list(range(0, len(found), size))
    got: dict[int, list[T]] = {}
    failed: dict[int, Exception] = {}
    try:
        # on SIGTERM/SIGHUP (cli.streams.Terminated) or Ctrl-C the workers are terminated at
        # once, not waited for batch by batch
        with process_pool(min(budget.workers, len(starts))) as pool:
            _run_batches(pool, found, clocks, finish, starts, size, got, failed, tell)
    except BrokenProcessPool:
        # a worker died (killed for memory, or a script without the ``__main__`` guard whose
        # workers cannot start): the batches not received are read here, on threads
        for s in starts:
            if failed and s > min(failed):
                break
            if s not in got:
                part = found[s : s + size]
                got[s] = _in_threads(
                    part, clocks, finish, budget, tell, tell.sizes[s : s + len(part)]
                )
    if failed:
        raise failed[min(failed)]
    return [r for s in starts for r in got[s]]


def _batch_size(n: int, workers: int, budget: ReadBudget) -> int:
    """Eight batches a worker (a slow batch does not hold up the end), at most
    ``batch_instances`` folders each."""
    return max(1, min(budget.batch_instances, math.ceil(n / (workers * 8))))


def _on_dask(
    found: Sequence[InstanceFiles],
    clocks: pr.ClockPolicy,
    finish: Finish[T],
    budget: ReadBudget,
    tell: _Told,
) -> list[T]:
    """Batches as tasks on a Dask cluster (``profiler_dask``): small folders batched as for
    local processes, a large one a task of its own (a worker holds one read at a time)."""
    from skewscope.sources.profiler_dask import dask_executor

    assert budget.scheduler is not None
    small = sum(tell.sizes) <= budget.small_bytes * len(tell.sizes)
    size = _batch_size(len(found), max(1, budget.workers), budget) if small else 1
    starts = list(range(0, len(found), size))
    got: dict[int, list[T]] = {}
    failed: dict[int, Exception] = {}
    with dask_executor(budget.scheduler) as pool:
        _run_batches(pool, found, clocks, finish, starts, size, got, failed, tell)
    if failed:
        raise failed[min(failed)]
    return [r for s in starts for r in got[s]]


def _run_batches(
    pool: Executor,
    found: Sequence[InstanceFiles],
    clocks: pr.ClockPolicy,
    finish: Finish[T],
    starts: list[int],
    size: int,
    got: dict[int, list[T]],
    failed: dict[int, Exception],
    tell: _Told,
) -> None:
    """Every batch submitted to ``pool``; results kept by batch start, a bad folder's error
    by its place, and the batches after it that have not started cancelled."""
    futures = {pool.submit(read_batch, found[s : s + size], clocks, finish): s for s in starts}
    pending = set(futures)
    while pending:
        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
        for fut in finished:
            if fut.cancelled():
                continue
            s = futures[fut]
            out, error = fut.result()
            got[s] = out
            tell.read(s, s + len(out))
            if error is not None:
                failed[s + error[0]] = error[1]
                for later in pending:
                    later.cancel()  # the batches after it that have not started
