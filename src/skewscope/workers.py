"""Worker-process pools that never outlive the run that started them.

A ``ProcessPoolExecutor`` left by an exception (SIGTERM or SIGHUP turned into
``cli.streams.Terminated``, Ctrl-C) waits in ``shutdown`` for every running task, and a parent
killed outright leaves its workers replaying for minutes — holding the forkserver and the
resource tracker alive with them (both exit only once no process holds their pipes).
``process_pool`` terminates and reaps the workers instead, so the parent exits promptly and its
helpers follow it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

# A worker still alive this long after its SIGTERM is killed (a replay or simulation part
# holds no resource a kill could corrupt: its results go nowhere once the run is abandoned).
STOP_GRACE_S = 5.0
# The stops a run turns into an exception (cli.streams' SIGTERM/SIGHUP, and Ctrl-C)
DEFERRED_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


@contextlib.contextmanager
def stops_deferred() -> Iterator[None]:
    """The stop signals wait until the block ends, then act as they would have. Deferred at
    the Python level, not by the thread's signal mask: the kernel hands a process-directed
    SIGTERM to any thread that does not block it (the CLI's import warmer, a sampler), and
    Python then runs the handler in the main thread wherever it is — mid-``submit`` too."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {
        s: signal.signal(s, lambda signum, _frame: caught.append(signum)) for s in DEFERRED_SIGNALS
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])


class _Pool(ProcessPoolExecutor):
    """``submit`` may start a worker: the forkserver forks it, then the pool records its pid. A
    stop landing between the two left a worker the pool did not know — not terminated, it took
    a task and replayed on for minutes while the parent waited for it — or one still reading
    its setup when the parent had unlinked its semaphores (a FileNotFoundError traceback on
    the run's stderr). The stop signals wait until ``submit`` returns."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with stops_deferred():
            return super().submit(fn, *args, **kwargs)


@contextlib.contextmanager
def process_pool(
    max_workers: int,
    grace_s: float = STOP_GRACE_S,
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
) -> Iterator[ProcessPoolExecutor]:
    """A forkserver pool (forking a process that runs polars' thread pool can deadlock the
    child; ``multiprocessing.get_context("forkserver")`` is the context its queues need too);
    on any exception its workers are terminated — killed after ``grace_s`` — and joined before
    the exception goes on."""
    ctx = multiprocessing.get_context("forkserver")
    ex = _Pool(max_workers=max_workers, mp_context=ctx, initializer=initializer, initargs=initargs)
    try:
        yield ex
    except BaseException:
        stop_workers(ex, grace_s)
        raise
    ex.shutdown(wait=True)


def stop_workers(ex: ProcessPoolExecutor, grace_s: float) -> None:
    """Terminate the pool's workers mid-task, reap them, then let the pool's manager thread
    wind down (it sees its workers gone and fails the pending futures)."""
    # the pool's own process table: what Python 3.14's terminate_workers() reads too
    procs = list((getattr(ex, "_processes", None) or {}).values())
    for p in procs:
        with contextlib.suppress(ValueError, ProcessLookupError):
            p.terminate()
    for p in procs:
        with contextlib.suppress(ValueError):
            p.join(grace_s)
            if p.is_alive():
                p.kill()
                p.join()
    ex.shutdown(wait=True, cancel_futures=True)
