"""A Dask worker preload (``dask worker --preload THIS``) that kills its worker the moment the
worker starts executing its first task: a worker lost mid-run, at a known point, no timing."""

from __future__ import annotations

import os
import signal
from typing import Any

from distributed import WorkerPlugin


class DieOnFirstTask(WorkerPlugin):
    name = "die-on-first-task"

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish == "executing":
            os.kill(os.getpid(), signal.SIGKILL)


async def dask_setup(worker: Any) -> None:
    await worker.plugin_add(DieOnFirstTask())
