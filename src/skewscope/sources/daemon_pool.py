"""A thread pool whose workers are daemon threads, for network fetches a stopping process may
abandon.

``concurrent.futures.ThreadPoolExecutor`` joins its workers when the interpreter exits, so a
process stopped by SIGTERM or Ctrl-C (``watch``) waits until every query or scrape in flight
reaches its deadline (``--timeout``, 30 s by default). These workers are daemons: a fetch in
flight at exit is dropped with the process. Inside a live process it behaves like the
executor: ``submit`` returns a ``Future``, leaving the ``with`` block waits for the work.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")
_Task = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]] | None


class DaemonPool:
    """At most ``max_workers`` daemon threads, one started per submit until there are that
    many."""

    def __init__(self, max_workers: int, name: str = "skewscope-fetch") -> None:
        self.max_workers = max(1, max_workers)
        self.name = name
        self._tasks: queue.SimpleQueue[_Task] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("submit after shutdown")
            self._tasks.put((future, fn, args, kwargs))
            if len(self._threads) < self.max_workers:
                t = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._threads.append(t)
                t.start()
        return future

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            future, fn, args, kwargs = task
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:  # handed to whoever waits on the future
                    future.set_exception(e)

    def shutdown(self, wait: bool = True) -> None:
        """Let the workers end once the queued work is done; ``wait`` joins them (a process
        that is stopping does not: its fetches are abandoned)."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._tasks.put(None)
        if wait:
            for t in threads:
                t.join()

    def __enter__(self) -> DaemonPool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown(wait=kind is None)  # interrupted: do not wait out the deadlines
