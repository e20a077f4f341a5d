"""Device-exporter series placed on engine units: by pod, by host and position, by a mapping
file; split over DP ranks only when they divide evenly."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skewscope.errors import InputError
from skewscope.frame import Level
from skewscope.sources.device_exporters import DEVICE_EXPORTERS, resolve_devices
from skewscope.sources.devices import (
    DeviceSeries,
    EngineInstance,
    device_values,
    load_device_map,
    place,
)

DCGM, NPU = DEVICE_EXPORTERS["dcgm"], DEVICE_EXPORTERS["npu-exporter"]


def gpu(target: str, dev: str, util: float, **labels: str) -> DeviceSeries:
    return DeviceSeries(DCGM, target, {"gpu": dev, **labels}, "device_util", {0.0: util})


def test_pod_label_wins_over_host() -> None:
    series = [
        gpu("n1:9400", "0", 0.9, pod="a", namespace="llm"),
        gpu("n1:9400", "1", 0.1, pod="b", namespace="llm"),
    ]
    engines = [
        EngineInstance("10.0.0.1:8000", (), {"pod": "b", "namespace": "llm"}),
        EngineInstance("10.0.0.2:8000", (), {"pod": "a", "namespace": "llm"}),
    ]
    tables, notes = device_values(series, engines)
    util = tables[Level.INSTANCE]["device_util"]
    assert util == {(0.0, "10.0.0.2:8000", None): 0.9, (0.0, "10.0.0.1:8000", None): 0.1}
    assert "2 of 2 instance(s) joined to devices (2 by pod)" in notes[-1]


def test_namespace_must_agree_when_both_have_one() -> None:
    series = [gpu("n1:9400", "0", 0.9, pod="a", namespace="other")]
    got = place(series, [EngineInstance("x:8000", (), {"pod": "a", "namespace": "llm"})])
    assert got.units == {}


def test_host_split_over_engines_then_ranks_in_order() -> None:
    series = [gpu("h:9400", str(i), i / 10) for i in (3, 0, 2, 1)]
    engines = [EngineInstance("h:8001", (0, 1)), EngineInstance("h:8000", (0, 1))]
    tables, notes = device_values(series, engines)
    dp = tables[Level.DP]["device_util"]
    assert dp[(0.0, "h:8000", 0)] == 0.0 and dp[(0.0, "h:8000", 1)] == 0.1
    assert dp[(0.0, "h:8001", 0)] == 0.2 and dp[(0.0, "h:8001", 1)] == 0.3
    assert tables[Level.INSTANCE]["device_util"][(0.0, "h:8001", None)] == pytest.approx(0.25)
    assert any("placed by host and position" in n for n in notes)


def test_devices_that_do_not_divide_are_not_guessed() -> None:
    series = [gpu("h:9400", str(i), 0.5) for i in range(3)]
    got = place(series, [EngineInstance("h:8000", ()), EngineInstance("h:8001", ())])
    assert got.units == {}
    assert any("do not divide" in n for n in got.notes)
    got = place(series, [EngineInstance("h:8000", (0, 1))])
    assert set(got.units) == {("h:8000", None)}
    assert any("DP ranks" in n for n in got.notes)


def test_mapping_file_places_ranks_by_node_name(tmp_path: Path) -> None:
    f = tmp_path / "map.toml"
    f.write_text('[devices]\n"e:8000/dp0" = ["node-a/1"]\n"e:8000/dp1" = ["node-a/0"]\n')
    series = [
        gpu("x:9400", "0", 0.2, Hostname="node-a"),
        gpu("x:9400", "1", 0.8, Hostname="node-a"),
    ]
    tables, _ = device_values(series, [EngineInstance("e:8000", (0, 1))], load_device_map(str(f)))
    assert tables[Level.DP]["device_util"] == {(0.0, "e:8000", 0): 0.8, (0.0, "e:8000", 1): 0.2}
    assert tables[Level.INSTANCE]["device_util"] == {(0.0, "e:8000", None): 0.5}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x = 1\n", r"expected a \[devices\] table"),
        ('[devices]\n"a" = "b"\n', "must be a list"),
        ("[devices\n", "not TOML"),
    ],
)
def test_bad_mapping_file_is_one_clean_error(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "map.toml"
    f.write_text(text)
    with pytest.raises(InputError, match=message):
        load_device_map(str(f))


def test_resolve_prefers_profiling_ratio_over_percent() -> None:
    got = resolve_devices(
        ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "npu_chip_info_hbm_used_memory"]
    )
    assert [(r, e.name, a.name) for r, e, a in got] == [
        ("device_util", "dcgm", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        ("device_mem", "npu-exporter", "npu_chip_info_hbm_used_memory"),
    ]
    assert NPU.roles["device_util"][0].scale == 0.01
    assert resolve_devices(["DCGM_FI_DEV_GPU_UTIL"])[0][2].scale == 0.01


@given(
    st.lists(st.integers(0, 15), min_size=1, max_size=16, unique=True),
    st.lists(st.integers(8000, 8007), min_size=1, max_size=4, unique=True),
    st.integers(1, 4),
)
def test_no_device_is_placed_on_two_instances(
    devs: list[int], ports: list[int], ranks: int
) -> None:
    series = [gpu("h:9400", str(d), 0.5) for d in devs]
    engines = [EngineInstance(f"h:{p}", tuple(range(ranks)) if ranks > 1 else ()) for p in ports]
    got = place(series, engines)
    inst_refs = [r for (_, dp), refs in got.units.items() if dp is None for r in refs]
    assert len(inst_refs) == len(set(inst_refs))
    for (inst, dp), refs in got.units.items():
        if dp is not None:
            assert set(refs) <= set(got.units[(inst, None)])


def test_watch_sampler_keeps_device_exporter_samples() -> None:
    """watch --scrape keeps only the samples some alias table reads: device exporters' too."""
    from skewscope.sources.collect import Snapshot
    from skewscope.sources.sampler import keep_read

    snap = Snapshot(
        0.0, (("DCGM_FI_DEV_GPU_UTIL", (("gpu", "0"),), 50.0), ("go_gc_duration_seconds", (), 1.0))
    )
    assert keep_read(snap).samples == (("DCGM_FI_DEV_GPU_UTIL", (("gpu", "0"),), 50.0),)
