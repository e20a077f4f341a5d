"""``--scheduler ADDRESS``: where the profiler folders are read (sources/profiler_dask.py)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from skewscope.sources.profiler_pool import ReadBudget


def add_scheduler_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="read the profiler folders as tasks on this Dask scheduler, e.g. "
        "tcp://HOST:8786 (default: $DASK_SCHEDULER_ADDRESS, else local processes; "
        "needs skewscope[dask], the folders on a file system the workers share)",
    )


def read_budget(args: argparse.Namespace) -> ReadBudget:
    """The default read budget, on the Dask cluster that --scheduler or the environment
    names."""
    from skewscope.sources.profiler_dask import scheduler_address
    from skewscope.sources.profiler_pool import READ_BUDGET

    address = scheduler_address(getattr(args, "scheduler", None))
    return replace(READ_BUDGET, scheduler=address) if address else READ_BUDGET
