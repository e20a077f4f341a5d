"""Device exporters (DCGM, Ascend npu-exporter) joined to engine units: is the device full?

Device metrics come from other targets than the engines, with their own labels, so each device
series is placed on a unit here, once, for both online sources:

1. a mapping file (``--device-map``), where given: ``"<instance>" = ["<host>/<device>", ...]``
   or ``"<instance>/dp<r>" = [...]``, ``<host>`` being the exporter's ``instance``, its host,
   or its node-name label (DCGM ``Hostname``);
2. else the pod: the engine series' ``pod`` label equals the device's pod label (DCGM ``pod``,
   npu-exporter ``pod_name``; the namespace too where both have one);
3. else the host: the engine instance's host equals the exporter's host or node-name label.
   Several engines on one host split its devices in order (by port), only when they divide
   evenly; a note says the placement is positional.

An instance's devices are split over its DP ranks in order (rank r gets the r-th equal share)
when they divide evenly; otherwise the DP level has no device signals (note). A unit's
``device_util`` is the mean over its devices, ``device_mem_mb`` the sum.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from skewscope.errors import InputError
from skewscope.frame import Level
from skewscope.smallfile import load_toml
from skewscope.sources.device_exporters import DeviceExporter
from skewscope.sources.evidence import Key, Values

SIGNAL_OF_ROLE = {"device_util": "device_util", "device_mem": "device_mem_mb"}
_ENGINE_POD_LABELS = ("pod", "pod_name", "kubernetes_pod_name")
_UNIT_KEY = re.compile(r"^(?P<inst>.+?)(?:/dp(?P<dp>\d+))?$")


@dataclass(frozen=True)
class DeviceSeries:
    """One device's values of one role per window start (seconds)."""

    exporter: DeviceExporter
    target: str  # the exporter's Prometheus instance (host:port)
    labels: Mapping[str, str]
    role: str
    values: Mapping[float, float]

    @property
    def device(self) -> str:
        return self.labels.get(self.exporter.device_label, "")

    @property
    def hosts(self) -> set[str]:
        """Names this device's host goes by: exporter instance, its host, node-name label."""
        out = {self.target, host_of(self.target)}
        if self.exporter.host_label and self.labels.get(self.exporter.host_label):
            out.add(self.labels[self.exporter.host_label])
        return out

    @property
    def ref(self) -> str:
        return f"{self.target}/{self.device}"


@dataclass(frozen=True)
class EngineInstance:
    """An engine instance as the device join sees it: its ranks and its series' labels."""

    instance: str
    ranks: tuple[int, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def pod(self) -> str:
        return next((self.labels[k] for k in _ENGINE_POD_LABELS if self.labels.get(k)), "")


def host_of(instance: str) -> str:
    """``host`` of ``host:port`` (IPv6 ``[::1]:80`` -> ``::1``)."""
    if instance.startswith("["):
        return instance[1 : instance.find("]")]
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def _port(instance: str) -> int:
    tail = instance.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _device_order(s: DeviceSeries) -> tuple[str, int, str]:
    d = s.device
    return (s.target, int(d) if d.isdigit() else 1 << 30, d)


DeviceMap = dict[str, tuple[str, ...]]


def load_device_map(path: str) -> DeviceMap:
    """Read a ``--device-map`` TOML file: ``[devices]`` of unit -> list of ``host/device``."""
    doc = load_toml(path, f"--device-map {path}")  # regular, small, UTF-8, shallow (exit 3)
    table = doc.get("devices")
    if not isinstance(table, dict):
        raise InputError(f"--device-map {path}: expected a [devices] table")
    out: DeviceMap = {}
    for unit, refs in table.items():
        if not (
            isinstance(refs, list) and refs and all(isinstance(r, str) and "/" in r for r in refs)
        ):
            raise InputError(
                f'--device-map {path}: devices."{unit}" must be a list like ["node-1/0"]'
            )
        out[unit] = tuple(refs)
    return out


def _by_ref(series: Sequence[DeviceSeries], ref: str) -> list[DeviceSeries]:
    host, _, dev = ref.rpartition("/")
    return [s for s in series if s.device == dev and host in s.hosts]


def _split(devices: list[str], n: int) -> list[list[str]] | None:
    if n <= 0 or not devices or len(devices) % n:
        return None
    k = len(devices) // n
    return [devices[i * k : (i + 1) * k] for i in range(n)]


@dataclass
class Placement:
    """Device refs per (instance, rank or None), and how they were placed."""

    units: dict[tuple[str, int | None], list[str]] = field(default_factory=dict)
    how: dict[str, str] = field(default_factory=dict)  # instance -> map / pod / host
    notes: list[str] = field(default_factory=list)


def place(
    series: Sequence[DeviceSeries],
    engines: Sequence[EngineInstance],
    device_map: DeviceMap | None = None,
) -> Placement:
    """Which devices belong to which unit (see the module docstring for the order of rules)."""
    out = Placement()
    refs = sorted({s.ref: s for s in series}.values(), key=_device_order)
    by_inst: dict[str, list[str]] = {}
    explicit: dict[tuple[str, int | None], list[str]] = {}
    for unit, wanted in (device_map or {}).items():
        m = _UNIT_KEY.match(unit)
        assert m is not None
        inst, dp = m["inst"], (int(m["dp"]) if m["dp"] is not None else None)
        found = sorted({s.ref for r in wanted for s in _by_ref(series, r)})
        if not found:
            out.notes.append(f"--device-map: no device series match {unit} ({', '.join(wanted)})")
            continue
        explicit[(inst, dp)] = found
        out.how[inst] = "map"
    per_host: dict[str, list[EngineInstance]] = defaultdict(list)
    for eng in engines:
        if eng.instance in out.how:
            continue
        pod = eng.pod
        if pod:
            mine = [s.ref for s in refs if _same_pod(s, pod, eng.labels)]
            if mine:
                by_inst[eng.instance] = mine
                out.how[eng.instance] = "pod"
                continue
        per_host[host_of(eng.instance)].append(eng)
    positional: list[str] = []
    for host, group in per_host.items():
        mine = [s.ref for s in refs if host in s.hosts]
        if not mine:
            continue
        group = sorted(group, key=lambda e: (_port(e.instance), e.instance))
        parts = _split(mine, len(group))
        if parts is None:
            out.notes.append(
                f"device metrics: {len(mine)} device(s) on host {host} do not divide over its "
                f"{len(group)} engine(s); give --device-map to place them"
            )
            continue
        for eng, part in zip(group, parts, strict=True):
            by_inst[eng.instance] = part
            out.how[eng.instance] = "host"
        if len(group) > 1 or len(mine) > 1:
            positional.append(host)
    if positional:
        out.notes.append(
            "device metrics placed by host and position (engines on a host take its devices in "
            f"device order, by port) on {', '.join(sorted(positional))}; if that is not how they "
            "are pinned, give --device-map"
        )
    ranks = {e.instance: e.ranks for e in engines}
    for (inst, dp), devs in explicit.items():
        if dp is None:
            by_inst[inst] = devs
        else:
            out.units[(inst, dp)] = devs
    for inst, devs in by_inst.items():
        out.units[(inst, None)] = devs
        rk = sorted(ranks.get(inst, ()))
        if len(rk) < 2 or any((inst, r) in out.units for r in rk):
            continue
        parts = _split(devs, len(rk))
        if parts is None:
            out.notes.append(
                f"device metrics: {len(devs)} device(s) of {inst} do not divide over its "
                f"{len(rk)} DP ranks; no device signals at DP level for it (give --device-map)"
            )
            continue
        for r, part in zip(rk, parts, strict=True):
            out.units[(inst, r)] = part
    for inst, dp in list(out.units):  # an instance mapped rank by rank
        if dp is not None and (inst, None) not in out.units:
            rk = sorted(r for (i, r) in out.units if i == inst and r is not None)
            out.units[(inst, None)] = [d for r in rk for d in out.units[(inst, r)]]
    return out


def _same_pod(s: DeviceSeries, pod: str, engine_labels: Mapping[str, str]) -> bool:
    if not any(s.labels.get(k) == pod for k in s.exporter.pod_labels):
        return False
    ns_dev = s.labels.get(s.exporter.namespace_label, "")
    ns_eng = engine_labels.get("namespace", "")
    return not (ns_dev and ns_eng and ns_dev != ns_eng)


def device_values(
    series: Sequence[DeviceSeries],
    engines: Sequence[EngineInstance],
    device_map: DeviceMap | None = None,
) -> tuple[dict[Level, Values], list[str]]:
    """Per-level value tables of the device signals (``device_util``, ``device_mem_mb``)."""
    placement = place(series, engines, device_map)
    by_ref_role: dict[tuple[str, str], DeviceSeries] = {(s.ref, s.role): s for s in series}
    roles = sorted({s.role for s in series})
    out: dict[Level, Values] = {Level.INSTANCE: {}, Level.DP: {}}
    for (inst, dp), refs in placement.units.items():
        level = Level.INSTANCE if dp is None else Level.DP
        for role in roles:
            cols = [by_ref_role[(r, role)].values for r in refs if (r, role) in by_ref_role]
            if not cols:
                continue
            table = out[level].setdefault(SIGNAL_OF_ROLE[role], {})
            for t in sorted({t for c in cols for t in c}):
                vals = [c[t] for c in cols if t in c]
                key: Key = (t, inst, dp)
                table[key] = sum(vals) / len(vals) if role == "device_util" else sum(vals)
    notes = list(placement.notes)
    if series:
        joined = sorted(placement.how.items())
        names = sorted({s.exporter.name for s in series})
        hows = defaultdict(list)
        for inst, how in joined:
            hows[how].append(inst)
        summary = "; ".join(f"{len(v)} by {k}" for k, v in sorted(hows.items())) or "none"
        unmatched = sorted({e.instance for e in engines} - set(placement.how))
        notes.append(
            f"device metrics ({', '.join(names)}): {len(placement.how)} of {len(engines)} "
            f"instance(s) joined to devices ({summary})"
            + (f"; none for {', '.join(unmatched[:5])}" if unmatched else "")
        )
    return out, notes


def merge_values(base: Values, extra: Values) -> Values:
    """``base`` with the tables of ``extra`` added (device signals next to engine signals)."""
    out = dict(base)
    out.update({k: v for k, v in extra.items() if v})
    return out


def engines_from_keys(values: Iterable[Mapping[Key, float]]) -> list[EngineInstance]:
    """Engine instances and their ranks from DP-level value tables (scrape: no labels)."""
    ranks: dict[str, set[int]] = defaultdict(set)
    for table in values:
        for _, inst, dp in table:
            ranks[inst]
            if dp is not None:
                ranks[inst].add(dp)
    return [EngineInstance(i, tuple(sorted(r))) for i, r in sorted(ranks.items())]
