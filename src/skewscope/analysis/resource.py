"""Step 4 beyond the KV peak: is the hot unit's device full, and is it short of KV blocks?

The method: "if the NPU is not saturated but the queue grows, it is more likely KV or scheduler
bound"; a slower unit at equal load whose device is busier points at the device or the process
on it; and "queueing plus high KV leads on to the KV block shortage case". Device fullness is
the device exporters' utilisation where joined, or offline the share of the window the devices
spent in forward passes (forward.csv) — both ``device_util`` — else the share of the window the
engine spent executing steps (``busy_ms``; offline from the profiler's batch timing).

A device that is busy all the time (continuous batching keeps it stepping) is not "busier" than
its peers however slow it is, and a slower unit batches more, which hides its slowness per token.
So a slower unit is also judged by its device time against what its peers' devices need for
the same work: a linear cost model fitted on the peers' windows (time = a x steps + c x tokens,
a fixed cost per step plus one per token) predicts the hot unit's device time from its own steps
and tokens. Clearly more device time than predicted is the device or the process on it; device
time as predicted while its steps (``busy_ms``) cost more than predicted is the host and the
scheduler around the device (the profiler's "bubbles" between forwards).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skewscope.analysis.impact import Impact, trend_slope
from skewscope.analysis.matrix import Flags, SignalMatrix
from skewscope.analysis.saturation import Saturation
from skewscope.catalogue import Cause, Kind
from skewscope.config import Thresholds
from skewscope.report.facts import DeviceFacts

# How full a device is, best first: a device exporter's utilisation, else the engine's share of
# the window spent executing steps (catalogue.METRICS keys).
DEVICE_SOURCES = ("device_util", "busy_share")


@dataclass(frozen=True)
class DeviceState:
    """How full the hot unit's device is, against its peers', over the judged windows."""

    basis: str  # "device_util" | "busy_share" | "" (nothing measured)
    hot: float
    reference: float
    saturated: bool  # hot >= device_saturated
    busier: bool  # hot clearly above the peers (ratio and absolute margin)
    # device time over what the peers' cost model predicts for its work (device_util only),
    # and the same for its step time
    cost_ratio: float = math.nan
    step_cost_ratio: float = math.nan
    slower_device: bool = False  # cost_ratio >= capability_ratio
    host_bound: bool = False  # device time as predicted while its steps cost clearly more

    def as_evidence(self) -> dict[str, object]:
        return {
            "device_basis": self.basis or None,
            "device_busy": self.hot,
            "device_busy_reference": self.reference,
            "device_saturated": self.saturated,
            "device_busier": self.busier,
            "device_cost_ratio": self.cost_ratio,
            "step_cost_ratio": self.step_cost_ratio,
            "device_slower": self.slower_device,
            "host_bound": self.host_bound,
        }


def device_state(
    hot: dict[str, float],
    ref: dict[str, float],
    th: Thresholds,
    costs: tuple[float, float] = (math.nan, math.nan),
) -> DeviceState:
    """From the unit summaries (summary.unit_summary): device utilisation, else busy share.

    ``costs``: the hot unit's device time and step time over what its peers' cost model
    predicts for its work (``cost_ratios``)."""
    for basis in DEVICE_SOURCES:
        h, r = hot.get(basis, math.nan), ref.get(basis, math.nan)
        if math.isfinite(h):
            busier = (
                math.isfinite(r)
                and h >= th.capability_ratio * r
                and h - r >= th.device_busier_margin
            )
            if basis != "device_util":
                return DeviceState(basis, h, r, h >= th.device_saturated, busier)
            device, step = costs
            slower = math.isfinite(device) and device >= th.capability_ratio
            host = (
                math.isfinite(device)
                and not slower
                and math.isfinite(step)
                and step >= th.capability_ratio
            )
            return DeviceState(
                basis, h, r, h >= th.device_saturated, busier, device, step, slower, host
            )
    return DeviceState("", math.nan, math.nan, False, False)


def cost_ratio(
    m: SignalMatrix, j: int, ref_cols: list[int], mask: Flags, signal: str, th: Thresholds
) -> float:
    """The hot unit's time (``device_util`` x window, or ``busy_ms``) over what a cost model
    fitted on its peers' windows predicts for its steps and tokens (time = a x steps + c x
    tokens, least squares, no intercept, over at least ``trend_min_points`` peer windows); NaN
    when the model cannot be fitted or predicts 0."""
    if not (m.has(signal) and m.has("steps") and m.has("scheduled_tokens")):
        return math.nan
    scale = m.window_s * 1000.0 if signal == "device_util" else 1.0
    time = m.get(signal) * scale
    steps, tokens = m.get("steps"), m.get("scheduled_tokens")
    cols = np.asarray(ref_cols)
    y, s, t = (a[mask][:, cols].ravel() for a in (time, steps, tokens))
    ok = np.isfinite(y) & np.isfinite(s) & np.isfinite(t)
    if ok.sum() < th.trend_min_points:
        return math.nan
    x = np.stack([s[ok], t[ok]], axis=1)
    coef, _, rank, _ = np.linalg.lstsq(x, y[ok], rcond=None)
    if rank < 2 or (coef < 0).any():  # collinear or unphysical: one cost per token instead
        total = t[ok].sum()
        coef = np.array([0.0, y[ok].sum() / total if total > 0 else math.nan])
    hy, hs, ht = time[mask, j], steps[mask, j], tokens[mask, j]
    hok = np.isfinite(hy) & np.isfinite(hs) & np.isfinite(ht)
    predicted = float((coef[0] * hs[hok] + coef[1] * ht[hok]).sum())
    if not hok.any() or not math.isfinite(predicted) or predicted <= 0:
        return math.nan
    return float(hy[hok].sum()) / predicted


def device_causes(
    kind: Kind | None, dev: DeviceState, imp: Impact
) -> tuple[list[Cause], DeviceFacts | None]:
    """(root-cause keys to put first, what the device state says) for a hot finding."""
    if not dev.basis:
        return [], None
    # Only a device measurement tells device from configuration: a slower unit at equal load
    # always spends more of its time in steps, so its busy share says nothing about why.
    capability = ""  # why a capability skew is slower, when the device evidence says
    if kind == Kind.CAPABILITY and dev.busier and dev.basis == "device_util":
        capability = "busier"
    elif kind == Kind.CAPABILITY and dev.slower_device:
        capability = "slower_device"
    elif kind == Kind.CAPABILITY and dev.host_bound:
        capability = "host_bound"
    causes = {
        "busier": [Cause.DEVICE_OR_PROCESS],
        "slower_device": [Cause.DEVICE_OR_PROCESS],
        "host_bound": [Cause.SCHEDULER_BOUND],
    }.get(capability, [])
    queue_not_compute = (imp.queue_growing or "waiting" in imp.hurting) and not dev.saturated
    if queue_not_compute and not imp.kv_exhausted and Cause.SCHEDULER_BOUND not in causes:
        causes.append(Cause.SCHEDULER_BOUND)
    return causes, DeviceFacts(
        dev.basis,
        dev.hot,
        dev.reference,
        capability,
        dev.cost_ratio,
        dev.step_cost_ratio,
        queue_not_compute,
    )


@dataclass(frozen=True)
class KvShortage:
    keys: tuple[str, ...]  # symptom names, in the method's order
    running_slope_share: float
    free_capacity: float  # most free blocks seen, when the lowest fell low (else NaN)

    @property
    def found(self) -> bool:
        return "kv_high" in self.keys and len(self.keys) >= 2


def kv_shortage(
    m: SignalMatrix,
    j: int,
    mask: Flags,
    hot: dict[str, float],
    imp: Impact,
    sat: Saturation,
    th: Thresholds,
) -> KvShortage:
    """The KV block shortage case's symptoms on unit ``j`` (a finding when KV is near exhaustion
    and at least one other symptom holds)."""
    keys: list[str] = []
    kv_peak = hot.get("kv_usage_max", math.nan)
    free_min = hot.get("free_blocks_min", math.nan)
    free = m.get("free_blocks_min")[mask, j]
    capacity = float(np.nanmax(free)) if np.isfinite(free).any() else math.nan
    free_low = (
        math.isfinite(free_min)
        and math.isfinite(capacity)
        and capacity > 0
        and (free_min <= th.kv_free_low_share * capacity)
    )
    if (math.isfinite(kv_peak) and kv_peak >= th.kv_high) or free_low:
        keys.append("kv_high")
    if sat.saturated:
        keys.append("batch_at_ceiling")
    if imp.kv_filling:
        keys.append("alloc_outpaces_free")
    preempt = hot.get("preemptions", math.nan)
    if math.isfinite(preempt) and preempt > 0:
        keys.append("preemptions")
    running = m.get("running")[mask, j]
    slope = trend_slope(running, th.trend_min_points)
    mean_running = float(np.nanmean(running)) if np.isfinite(running).any() else math.nan
    share = slope / mean_running if math.isfinite(slope) and mean_running > 0 else math.nan
    if imp.queue_growing and math.isfinite(share) and abs(share) <= th.running_flat_share:
        keys.append("waiting_grows_running_flat")
    return KvShortage(tuple(keys), share, capacity if free_low else math.nan)
