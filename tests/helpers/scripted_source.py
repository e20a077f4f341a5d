"""A watch source that plays a script: one Evidence (or an error to raise) per run, the last
step repeating, for the watch, exporter and history tests."""

from __future__ import annotations

from skewscope.frame import Evidence

Step = Evidence | BaseException


class ScriptedSource:
    """Plays a script of evidence or errors, one step per run (the last step repeats)."""

    description = "scripted"

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.calls = 0

    def load(self, now: float) -> Evidence:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        if isinstance(step, BaseException):
            raise step
        return step

    def problems(self, since: float) -> list[str]:
        return []

    def close(self) -> None:
        pass
