"""Device peaks (catalogs/devices.toml) and matching a trace's GPU to them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache, lru_cache

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


# Vendor words that may lead a deviceProperties name ("NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-16GB",
# "AMD Instinct MI300X"); the model name after them is what `match` patterns describe.
_VENDOR = r"(?:(?:NVIDIA|Tesla|AMD|Instinct)\s+)*"


@cache
def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(_VENDOR + f"(?:{pattern})", re.IGNORECASE)


# an SR-IOV virtual function of a GPU names it with " VF" after the model ("AMD Instinct MI300X
# VF", every MI300X of TraceLens's traces): the same silicon and peaks, shared with no other tenant
# the trace knows of
_VIRTUAL_FUNCTION = re.compile(r"\s+VF$", re.IGNORECASE)


def _model(gpu_name: str) -> str:
    return _VIRTUAL_FUNCTION.sub("", " ".join(gpu_name.split()))


def match_device(gpu_name: str | None, sms: int | None = None) -> Device | None:
    """The catalog device one of whose `match` patterns is the whole deviceProperties name (after
    leading vendor words, case, runs of spaces and a virtual function's trailing "VF" aside): a
    name that merely contains a known one ("NVIDIA RTX A1000 6GB Laptop GPU", "NVIDIA GH200
    480GB", "NVIDIA H200 NVL" without its own entry) is not that GPU, and stays unknown rather
    than borrow a sibling's peaks. Where several entries fit, the one whose SM count is `sms`
    wins, then the most specific (longest) pattern; entries still tied are ambiguous and give
    None."""
    if not gpu_name:
        return None
    name = _model(gpu_name)
    hits: list[tuple[Device, int]] = []
    for device in load_devices().values():
        fits = [len(p) for p in device.match if _pattern(p).fullmatch(name)]
        if fits:
            hits.append((device, max(fits)))
    if sms is not None and len(hits) > 1:
        hits = [h for h in hits if h[0].sms == sms] or hits
    if len(hits) > 1:
        longest = max(length for _, length in hits)
        hits = [h for h in hits if h[1] == longest]
    return hits[0][0] if len(hits) == 1 else None


def get_device(key: str) -> Device:
    devices = load_devices()
    if key in devices:
        return devices[key]
    raise AtlasError(None, f"unknown device {key!r}; known: {', '.join(sorted(devices))}")
