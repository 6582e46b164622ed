"""Device peaks (catalogs/devices.toml) and matching a trace's GPU to them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.paths import read_toml

MATRIX = "tensor"
VECTOR = "vector"


@dataclass(frozen=True)
class Peak:
    tflops: float
    label: str  # e.g. "bf16 tensor", "fp32 vector (no bf16 tensor peak on V100)"


@dataclass(frozen=True)
class Device:
    key: str
    name: str
    sms: int
    memory_gbps: float
    link_gbps: float
    host_link_gbps: float
    memory_gb: float
    l2_mb: float
    boost_ghz: float
    tensor: dict[str, float] = field(default_factory=dict)
    vector: dict[str, float] = field(default_factory=dict)
    match: tuple[str, ...] = ()
    source: str = ""

    def peak(self, precision: str, unit: str) -> Peak:
        """The dense peak for math in `precision` on `unit` (tensor or vector), with fallbacks
        stated in the label: int math and missing matrix precisions use the fp32 vector peak."""
        if unit == MATRIX and precision in self.tensor:
            return Peak(self.tensor[precision], f"{precision} tensor")
        if precision in self.vector:
            return Peak(self.vector[precision], f"{precision} vector")
        fallback = self.vector.get("fp32") or max(self.vector.values(), default=0.0)
        why = f"no {precision} {unit} peak on {self.key}" if precision != "int" else "integer math"
        return Peak(fallback, f"fp32 vector ({why})")


@lru_cache(maxsize=1)
def load_devices() -> dict[str, Device]:
    data = read_toml("devices.toml")
    devices = {}
    for key, raw in data["devices"].items():
        devices[key] = Device(
            key=key,
            name=raw["name"],
            sms=int(raw["sms"]),
            memory_gbps=float(raw["memory_gbps"]),
            link_gbps=float(raw["link_gbps"]),
            host_link_gbps=float(raw["host_link_gbps"]),
            memory_gb=float(raw["memory_gb"]),
            l2_mb=float(raw["l2_mb"]),
            boost_ghz=float(raw["boost_ghz"]),
            tensor={k: float(v) for k, v in raw.get("tensor", {}).items()},
            vector={k: float(v) for k, v in raw.get("vector", {}).items()},
            match=tuple(raw.get("match", ())),
            source=raw.get("source", ""),
        )
    return devices


def match_device(gpu_name: str | None, sms: int | None = None) -> Device | None:
    """The catalog device whose `match` patterns fit a deviceProperties name (SM count breaks ties)."""
    if not gpu_name:
        return None
    hits = [d for d in load_devices().values() if any(re.search(p, gpu_name, re.IGNORECASE) for p in d.match)]
    if sms is not None and len(hits) > 1:
        exact = [d for d in hits if d.sms == sms]
        hits = exact or hits
    return hits[0] if hits else None


def get_device(key: str) -> Device:
    devices = load_devices()
    if key in devices:
        return devices[key]
    raise AtlasError(None, f"unknown device {key!r}; known: {', '.join(sorted(devices))}")
