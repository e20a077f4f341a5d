"""Read a fleet's profiler folders as map tasks on a Dask cluster (``--scheduler ADDRESS``).

When the captures outgrow one machine, every batch of instance folders is one task on a
``distributed`` worker: the same ``profiler_pool.read_batch`` the local worker processes run,
its (small) per-tick partials sent back and merged once here, in folder order — so the report
is the local run's, byte for byte. A task whose worker dies is rescheduled by the scheduler on
another worker (``RETRIES`` more tries on top of its own ``allowed-failures``). The workers must
see the folders under the same paths (a shared file system) and run the same skewscope version.

``distributed`` is an optional extra (``pip install 'skewscope[dask]'``); local processes stay
the default.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from concurrent.futures import Executor
from urllib.parse import urlsplit

from skewscope.errors import SourceError, UsageError

ENV_ADDRESS = "DASK_SCHEDULER_ADDRESS"  # the variable Dask's own clients read
RETRIES = 2  # a failed task (not a bad folder: those are returned, not raised) runs again
CONNECT_TIMEOUT_S = 10.0


def scheduler_address(given: str | None) -> str | None:
    """``--scheduler`` if given, else ``$DASK_SCHEDULER_ADDRESS``, else None (local)."""
    address = given if given is not None else os.environ.get(ENV_ADDRESS, "")
    address = address.strip()
    if given is not None and not address:
        raise UsageError("--scheduler: expected a Dask scheduler address, e.g. tcp://HOST:8786")
    return address or None


def refused(address: str) -> bool:
    """A ``tcp://`` scheduler whose port refuses connections: Dask's client would retry it for
    the whole ``CONNECT_TIMEOUT_S``; a refusal is final, so it is said at once."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme != "tcp" or parts.hostname is None:
        return False
    try:
        port = parts.port or 8786
    except ValueError:
        return False  # Dask's own parser says what is wrong with it
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return True
    except OSError:
        return False  # unresolved, unreachable, timed out: Dask's client tries and says
    return False


@contextlib.contextmanager
def dask_executor(address: str) -> Iterator[Executor]:
    """A ``concurrent.futures`` executor whose tasks run on the cluster at ``address``."""
    try:
        from distributed import Client
    except ImportError:
        raise UsageError(
            "--scheduler needs Dask's distributed: pip install 'skewscope[dask]'"
        ) from None
    if refused(address):
        raise SourceError(
            f"--scheduler {address}: cannot reach the Dask scheduler (connection refused)"
        )
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as error:
        raise SourceError(
            f"--scheduler {address}: cannot reach the Dask scheduler "
            f"({type(error).__name__}: {error})"
        ) from None
    try:
        yield client.get_executor(retries=RETRIES, pure=False)
    except Exception as error:
        if type(error).__name__ == "KilledWorker":  # the task killed every worker it ran on
            raise SourceError(
                f"--scheduler {address}: a read task failed on every worker it was given ({error})"
            ) from None
        raise
    finally:
        client.close()
