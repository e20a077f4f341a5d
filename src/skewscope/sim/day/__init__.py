"""A fleet's long day of engine metrics, written from arrays: every kind of operational noise
(diurnal ramp, near-idle night, bursts, a rolling restart, a scale-out, a deploy, per-unit
noise) and seven injected skews at known times (``truth.json``), for the vLLM and SGLang
dialects. See docs/simulator.md ("A fleet's day") and notes/contract-day.md."""

from skewscope.sim.day.plan import DAY_DIALECTS, T0, DaySpec, Plan, make_plan
from skewscope.sim.day.write import DayFiles, write_day

__all__ = ["DAY_DIALECTS", "T0", "DayFiles", "DaySpec", "Plan", "make_plan", "write_day"]
