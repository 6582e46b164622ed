"""Device peaks (catalogs/devices.toml) and matching a trace's GPU to them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from typing import Any

from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.paths import CatalogMatching, catalog_number, catalog_pattern, read_toml

MATRIX = "tensor"
VECTOR = "vector"
# units of work that cross a link rather than the GPU's memory, and the bound each names
TRANSFER_BOUNDS = {"link": "communication", "host": "host link", "peer": "peer link"}


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
    compute: str = ""  # computeMajor.computeMinor: identifies a GPU the trace does not name
    partition: int = 1  # n: this is 1/n of the entry (`partition_of`), its peaks divided by n

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

    def transfer_peak(self, unit: str) -> tuple[float, str] | None:
        """The bandwidth (GB/s) and its label for work that crosses a link rather than the GPU's
        memory — a collective's bus bytes (`link`), a copy to or from the host (`host`), a copy to
        another GPU (`peer`, one way over the GPU-to-GPU link: the catalog's per-direction figure);
        None for any other unit."""
        if unit == "host":
            return self.host_link_gbps, "host bandwidth"
        if unit in ("link", "peer"):
            return self.link_gbps, "peer link bandwidth" if unit == "peer" else "link bandwidth"
        return None


def load_devices() -> dict[str, Device]:
    return _loaded()[0]


@lru_cache(maxsize=1)
def _loaded() -> tuple[dict[str, Device], CatalogMatching]:
    """The catalog's devices, and the time their `match` patterns may take in all
    (`CatalogMatching`). Each entry is checked once here, so that every consumer gets safe values:
    numbers finite and in range (`catalog_number`: a negative or zero peak gave negative or NaN
    roofline numbers), `match` patterns that compile (`catalog_pattern`), texts redacted and cut as
    a trace's own metadata texts are (`reader.META_TEXT`: a device name reaches the terminal and
    report.html — a credential in it was printed, a 50 MB one took minutes to wrap)."""
    from kernel_atlas.core.redact import redact_text
    from kernel_atlas.core.text_limits import META_TEXT, cut_long

    def text(value: object) -> str:
        return redact_text(cut_long(str(value), META_TEXT))

    data = read_toml("devices.toml")
    devices = {}
    for key, raw in data["devices"].items():
        match = tuple(raw.get("match", ()))
        for pattern in match:  # a broken one is said here, in one line, not when a GPU is matched
            where = f"`devices.{key}.match` {str(pattern)[:80]!r}"
            catalog_pattern(pattern, data.path, where)  # alone first: the error's position is the user's
            catalog_pattern(_VENDOR + f"(?:{pattern})", data.path, where, re.IGNORECASE)  # `(?i)` inside: no
        tensor, vector = raw.get("tensor", {}), raw.get("vector", {})
        devices[key] = Device(
            key=key,
            name=text(raw["name"]),
            sms=int(catalog_number(raw, "sms", whole=True)),
            memory_gbps=catalog_number(raw, "memory_gbps"),
            link_gbps=catalog_number(raw, "link_gbps"),
            host_link_gbps=catalog_number(raw, "host_link_gbps"),
            memory_gb=catalog_number(raw, "memory_gb"),
            l2_mb=catalog_number(raw, "l2_mb"),
            boost_ghz=catalog_number(raw, "boost_ghz"),
            tensor={k: catalog_number(tensor, k) for k in tensor},
            vector={k: catalog_number(vector, k) for k in vector},
            match=match,
            source=text(raw.get("source", "")),
            compute=text(raw.get("compute", "")),
        )
    return devices, CatalogMatching(data.path)


# Vendor words that may lead a deviceProperties name ("NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-16GB",
# "AMD Instinct MI300X"); the model name after them is what `match` patterns describe.
_VENDOR = r"(?:(?:NVIDIA|Tesla|AMD|Instinct)\s+)*"


@cache
def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(_VENDOR + f"(?:{pattern})", re.IGNORECASE)  # compiled once already: `load_devices`


# an SR-IOV virtual function of a GPU names it with " VF" after the model ("AMD Instinct MI300X
# VF", every MI300X of TraceLens's traces): the same silicon and peaks, shared with no other tenant
# the trace knows of
_VIRTUAL_FUNCTION = re.compile(r"\s+VF$", re.IGNORECASE)


def _model(gpu_name: str) -> str:
    return _VIRTUAL_FUNCTION.sub("", " ".join(gpu_name.split()))


# a GPU's reported memory against its catalog size in GiB: a little less is reserved (H100 80 GB
# reports 79.2 GiB, A100 40 GB 39.4, an MI300X VF 191.5 of 192)
_MEMORY_FIT = (0.95, 1.005)


@dataclass(frozen=True)
class Properties:
    """What deviceProperties says of a GPU beside its name (None: not recorded)."""

    sms: int | None = None
    compute: str | None = None  # computeMajor.computeMinor
    memory_bytes: int | None = None

    @classmethod
    def of(cls, props: Mapping[str, Any]) -> Properties:
        """From a deviceProperties entry (or summary.json's copy of one)."""
        major, minor = props.get("computeMajor"), props.get("computeMinor")
        known = all(isinstance(v, int) and not isinstance(v, bool) for v in (major, minor))
        sms, memory = props.get("numSms"), props.get("totalGlobalMem")
        return cls(
            sms if isinstance(sms, int) and not isinstance(sms, bool) and sms > 0 else None,
            f"{major}.{minor}" if known else None,
            memory if isinstance(memory, int) and not isinstance(memory, bool) and memory > 0 else None,
        )

    def words(self) -> str:
        """`compute 9.4, 304 SMs/CUs, 191.98 GiB`."""
        memory = f"{self.memory_bytes / 2**30:.2f} GiB" if self.memory_bytes else "memory not recorded"
        return f"compute {self.compute}, {self.sms} SMs/CUs, {memory}"


def match_properties(name: str | None, props: Properties) -> Device | None:
    """`match_device` by name; a GPU the trace does not name (an empty name: vLLM's ROCm graph
    traces) by its properties alone — `by_properties`."""
    if name is not None and name.strip():
        return match_device(name, props.sms)
    return by_properties(props)


def by_properties(props: Properties) -> Device | None:
    """The one catalog entry whose `compute` and SM count are the GPU's and whose memory its
    reported memory fits (`_MEMORY_FIT`); None where not all three are recorded, or where none or
    several fit (an unnamed H200 and H200 NVL are the same silicon and memory: unknown)."""
    if props.sms is None or props.compute is None or props.memory_bytes is None:
        return None
    gib = props.memory_bytes / 2**30
    low, high = _MEMORY_FIT
    fits = [
        d
        for d in load_devices().values()
        if d.compute == props.compute and d.sms == props.sms and low * d.memory_gb <= gib <= high * d.memory_gb
    ]
    return fits[0] if len(fits) == 1 else None


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
    devices, bound = _loaded()
    for device in devices.values():
        with bound.matching(f"`devices.{device.key}.match`"):  # a user's pattern may backtrack for hours
            fits = [len(p) for p in device.match if _pattern(p).fullmatch(name)]
        if fits:
            hits.append((device, max(fits)))
    if sms is not None and len(hits) > 1:
        hits = [h for h in hits if h[0].sms == sms] or hits
    if len(hits) > 1:
        longest = max(length for _, length in hits)
        hits = [h for h in hits if h[1] == longest]
    return partition_of(hits[0][0], sms) if len(hits) == 1 else None


def partition_of(device: Device, sms: int | None) -> Device:
    """`device`, or the partition of it a trace's SM count says it ran on: an MI300X in CPX mode is
    one of its 8 XCDs, named as the whole package with 38 of its 304 CUs (DPX 152, QPX 76). Where
    the entry's SM count is a whole multiple n ≥ 2 of the trace's, the peaks are the partition's:
    compute 1/n (the same CUs at the same clocks: exact), memory bandwidth and L2 1/n too — its
    share of the package's HBM, an estimate (one partition alone may draw more). Other counts keep
    the entry as it is."""
    if not isinstance(sms, int) or isinstance(sms, bool) or not 0 < sms < device.sms or device.sms % sms:
        return device
    parts = device.sms // sms
    return replace(
        device,
        key=f"{device.key}/{parts}",
        name=f"{device.name} (1/{parts} partition: {sms} of {device.sms} SMs/CUs)",
        sms=sms,
        memory_gbps=device.memory_gbps / parts,
        l2_mb=device.l2_mb / parts,
        tensor={k: v / parts for k, v in device.tensor.items()},
        vector={k: v / parts for k, v in device.vector.items()},
        partition=parts,
    )


def get_device(key: str) -> Device:
    devices = load_devices()
    if key in devices:
        return devices[key]
    raise AtlasError(None, f"unknown device {key!r}; known: {', '.join(sorted(devices))}")
