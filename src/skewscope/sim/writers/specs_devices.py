"""The device exporters' metric families, one device per DP rank: dcgm-exporter, npu-exporter."""

from __future__ import annotations

from skewscope.catalogue import SIMULATED_DEVICE_EXPORTERS
from skewscope.sim.writers.metric_spec import GAUGE, MetricSpec

DEVICE_EXPORTERS: tuple[str, ...] = SIMULATED_DEVICE_EXPORTERS

# Device exporters, one device per DP rank (names and labels as sources/device_exporters.py
# cites them:
# NVIDIA dcgm-exporter etc/*.csv, Ascend npu-exporter collector/npu_collector.go).
# ``device_util`` is the share of the last DEVICE_AVERAGE_S the rank spent in steps;
# ``device_mem`` the model's weights plus the KV blocks in use (DEVICE_MODEL_MB, DEVICE_BLOCK_MB).
DEVICE_AVERAGE_S = 5.0
DEVICE_MODEL_MB = 20_000.0
DEVICE_BLOCK_MB = 2.0


def device_specs(exporter: str) -> list[MetricSpec]:
    """The device families of ``exporter`` ("dcgm" or "npu-exporter")."""
    if exporter == "dcgm":

        def dcgm(name: str, role: str, help_: str, scale: float = 1.0) -> MetricSpec:
            return MetricSpec(
                name,
                GAUGE,
                role,
                help_,
                "gpu",
                labels=(
                    ("DCGM_FI_DRIVER_VERSION", "550.54.15"),
                    ("modelName", "NVIDIA A100-SXM4-80GB"),
                ),
                model_label=False,
                scale=scale,
                host_label="Hostname",
            )

        return [
            dcgm("DCGM_FI_DEV_GPU_UTIL", "device_util", "GPU utilization (in %).", 100.0),
            dcgm(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                "device_util",
                "Ratio of time the graphics engine is active.",
            ),
            dcgm("DCGM_FI_DEV_FB_USED", "device_mem", "Framebuffer memory used (in MiB)."),
        ]
    if exporter == "npu-exporter":

        def npu(name: str, role: str, help_: str, scale: float = 1.0) -> MetricSpec:
            return MetricSpec(name, GAUGE, role, help_, "id", model_label=False, scale=scale)

        return [
            npu("npu_chip_info_utilization", "device_util", "the ai core utilization", 100.0),
            npu("npu_chip_info_hbm_used_memory", "device_mem", "the npu hbm used memory"),
        ]
    raise ValueError(f"unknown device exporter {exporter!r}; expected one of {DEVICE_EXPORTERS}")
