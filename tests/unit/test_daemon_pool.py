"""DaemonPool behaves like ThreadPoolExecutor inside a process (results, exceptions, bounded
workers, nested submits) while its workers are daemon threads a stopping process abandons."""

from __future__ import annotations

import threading

import pytest

from skewscope.sources.daemon_pool import DaemonPool


def test_results_exceptions_and_nested_submits() -> None:
    seen: set[str] = set()
    with DaemonPool(3) as pool:

        def work(n: int) -> int:
            seen.add(threading.current_thread().name)
            assert threading.current_thread().daemon
            if n == 5:
                raise ValueError("five")
            return n * n

        futures = [pool.submit(work, n) for n in range(8)]
        nested = pool.submit(lambda: pool.submit(work, 9))
        assert [f.result() for f in futures if f is not futures[5]] == [0, 1, 4, 9, 16, 36, 49]
        with pytest.raises(ValueError, match="five"):
            futures[5].result()
        assert nested.result().result() == 81
    assert len(pool._threads) <= 3 and not any(t.is_alive() for t in pool._threads)
    with pytest.raises(RuntimeError):
        pool.submit(work, 1)
