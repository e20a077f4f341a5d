"""Device exporters: how busy and how full each accelerator is (method step 4, "is the device
full?"). They are separate targets, joined to engine units by pod, host or a mapping file
(``devices.py``). Roles: ``device_util`` (fraction of time busy, 0..1) and ``device_mem``
(memory used, MiB)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from skewscope.sources.dialects import Alias, normalise_name


@dataclass(frozen=True)
class DeviceExporter:
    """One device exporter: aliases per role and the labels that say where a device is."""

    name: str
    roles: dict[str, tuple[Alias, ...]]
    device_label: str  # device index on its host
    pod_labels: tuple[str, ...]  # the workload pod using the device (empty: none)
    namespace_label: str
    host_label: str | None  # node name label, when the exporter sets one


DEVICE_ROLES: tuple[str, ...] = ("device_util", "device_mem")

# NVIDIA dcgm-exporter (etc/default-counters.csv, etc/dcp-metrics-included.csv at
# NVIDIA/dcgm-exporter@00d6d344ea4a / 084a245dc715): SM_ACTIVE and GR_ENGINE_ACTIVE are ratios
# (profiling metrics, more faithful than GPU_UTIL, which counts any kernel running), GPU_UTIL is
# a percent; FB_USED is MiB. Labels gpu, UUID, device, modelName, Hostname, and pod, namespace,
# container with the Kubernetes pod mapping on.
# Ascend npu-exporter (collector/npu_collector.go at Ascend/ascend-npu-exporter@3978c3e0bb77):
# npu_chip_info_utilization is the AI Core utilisation in percent, npu_chip_info_hbm_used_memory
# MB; label id (newer versions add pod_name, namespace, container_name).
DEVICE_EXPORTERS: dict[str, DeviceExporter] = {
    d.name: d
    for d in (
        DeviceExporter(
            "dcgm",
            {
                "device_util": (
                    Alias("DCGM_FI_PROF_SM_ACTIVE"),
                    Alias("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
                    Alias("DCGM_FI_DEV_GPU_UTIL", scale=0.01),
                ),
                "device_mem": (Alias("DCGM_FI_DEV_FB_USED"),),
            },
            device_label="gpu",
            pod_labels=("pod",),
            namespace_label="namespace",
            host_label="Hostname",
        ),
        DeviceExporter(
            "npu-exporter",
            {
                "device_util": (Alias("npu_chip_info_utilization", scale=0.01),),
                "device_mem": (Alias("npu_chip_info_hbm_used_memory"),),
            },
            device_label="id",
            pod_labels=("pod_name",),
            namespace_label="namespace",
            host_label=None,
        ),
    )
}


def resolve_devices(metric_names: Iterable[str]) -> list[tuple[str, DeviceExporter, Alias]]:
    """(role, exporter, first alias present) for every exporter and role present."""
    present = {normalise_name(n) for n in metric_names}
    found: list[tuple[str, DeviceExporter, Alias]] = []
    for exporter in DEVICE_EXPORTERS.values():
        for role in DEVICE_ROLES:
            alias = next(
                (a for a in exporter.roles.get(role, ()) if normalise_name(a.name) in present),
                None,
            )
            if alias is not None:
                found.append((role, exporter, alias))
    return found
