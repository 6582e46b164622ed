"""deviceProperties names matched to catalogs/devices.toml entries by SKU: each entry's own names map
to it, names that merely contain a known name (another product) and SKUs without an entry stay
unknown, and sibling SKUs get their own peaks. The table is written by hand from NVIDIA's driver
list of PCI device names and the vendors' datasheets, not read from the catalog under test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_atlas.core.devices import _model, _pattern, get_device, load_devices, match_device
from tests.support.hostile import cli

# (deviceProperties name as CUDA / ROCm report it, numSms, expected catalog key or None)
NAMES = [
    # Hopper
    ("NVIDIA H100 80GB HBM3", 132, "h100-sxm"),
    ("NVIDIA H100 PCIe", 114, "h100-pcie"),
    ("NVIDIA H100 NVL", 132, "h100-nvl"),
    ("NVIDIA H200", 132, "h200"),
    ("NVIDIA H200 NVL", 132, "h200-nvl"),
    ("NVIDIA GH200 480GB", 132, "gh200-96gb"),  # PCI 2342: 96 GB HBM3, named by the Grace LPDDR5X
    ("NVIDIA GH200 120GB", 132, "gh200-96gb"),  # PCI 2342 as well
    ("NVIDIA GH200 144G HBM3e", 132, "gh200-144gb"),  # PCI 2348
    ("NVIDIA H100", 132, None),  # PCI 2339, a different SKU (not the 80GB HBM3 SXM)
    ("NVIDIA H800", 132, None),
    ("NVIDIA H800 PCIe", 114, None),
    ("NVIDIA H20", 78, None),
    ("NVIDIA H20-3e", 78, None),
    # Ampere
    ("NVIDIA A100-SXM4-80GB", 108, "a100-sxm-80gb"),
    ("NVIDIA PG509-210", 108, "a100-sxm-80gb"),  # PCI 20B2, as A100-SXM4-80GB
    ("NVIDIA A100-SXM4-40GB", 108, "a100-sxm-40gb"),
    ("NVIDIA A100-PG509-200", 108, "a100-sxm-40gb"),  # PCI 20B0, as A100-SXM4-40GB
    ("NVIDIA A100-PCIE-40GB", 108, "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", 108, "a100-pcie-80gb"),
    ("NVIDIA A100", 108, "a100-sxm-80gb"),  # family only: the entry used before SKUs were told apart
    ("NVIDIA A100-SXM-64GB", 108, None),
    ("NVIDIA A800-SXM4-80GB", 108, None),
    ("NVIDIA A10", 72, None),
    ("NVIDIA A10G", 80, None),
    ("NVIDIA A30", 56, None),
    ("NVIDIA RTX A1000 6GB Laptop GPU", 20, None),
    ("NVIDIA RTX A1000", 18, None),
    # Volta
    ("Tesla V100-SXM2-16GB", 80, "v100"),
    ("Tesla V100-SXM2-32GB", 80, "v100"),
    ("Tesla V100-PCIE-16GB", 80, "v100-pcie"),
    ("Tesla V100-PCIE-32GB", 80, "v100-pcie"),
    ("Tesla V100S-PCIE-32GB", 80, None),
    ("Tesla V100-FHHL-16GB", 80, None),
    # Blackwell, Ada
    ("NVIDIA B200", 148, "b200"),
    ("NVIDIA GB200", 148, "gb200"),
    ("NVIDIA L40S", 142, "l40s"),
    ("NVIDIA L40", 142, None),
    ("NVIDIA L4", 58, None),
    ("NVIDIA GeForce RTX 4090", 128, None),
    # AMD Instinct
    ("AMD Instinct MI300X", 304, "mi300x"),
    ("AMD Instinct MI325X", 304, "mi325x"),
    # an SR-IOV virtual function is its GPU (every MI300X of TraceLens's traces, campaign AT 3);
    # the two letters alone, or glued to the model, are no name of a GPU
    ("AMD Instinct MI300X VF", 304, "mi300x"),
    ("AMD Instinct MI300X  vf", 304, "mi300x"),
    ("VF", 304, None),
    ("AMD Instinct MI300XVF", 304, None),
    ("AMD Instinct MI210", 104, "mi210"),
    ("AMD Instinct MI250X / MI250", 110, None),
    ("AMD Instinct MI300A", 228, None),
    ("AMD Radeon Graphics", 104, None),
]


@pytest.mark.parametrize(("name", "sms", "expected"), NAMES)
def test_device_name_maps_to_its_own_sku(name: str, sms: int, expected: str | None) -> None:
    found = match_device(name, sms)
    assert (found.key if found else None) == expected
    # the SM count is only a tie-break: without it the answer is the same
    found = match_device(name)
    assert (found.key if found else None) == expected


def test_matching_ignores_case_and_spacing_but_not_extra_words() -> None:
    assert match_device("nvidia  a100-sxm4-40gb", 108).key == "a100-sxm-40gb"
    assert match_device("  NVIDIA GB200 ", 148).key == "gb200"
    assert match_device("NVIDIA GB200 Laptop GPU", 148) is None
    assert match_device("", 108) is None and match_device(None) is None


def test_no_two_entries_claim_one_name() -> None:
    """Every named SKU of the table is claimed by its entry's patterns alone (no tie for `sms` or
    pattern length to break), and every entry has a name in the table."""
    devices = load_devices()
    for name, _, expected in NAMES:
        model = _model(name)  # as `match_device` reads the name
        claimed = [key for key, device in devices.items() if any(_pattern(p).fullmatch(model) for p in device.match)]
        assert claimed == ([expected] if expected else []), (name, claimed)
    assert set(devices) == {expected for _, _, expected in NAMES if expected}


def test_new_sku_peaks() -> None:
    # NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): the same dense
    # peaks for all four SKUs (bf16 312, tf32 156, fp32 19.5 TFLOP/s), memory bandwidth 40GB PCIe
    # 1,555, 80GB PCIe 1,935, 40GB SXM 1,555, 80GB SXM 2,039 GB/s
    for key, gbps, gb in (
        ("a100-sxm-40gb", 1555, 40),
        ("a100-pcie-40gb", 1555, 40),
        ("a100-pcie-80gb", 1935, 80),
        ("a100-sxm-80gb", 2039, 80),
    ):
        device = get_device(key)
        assert (device.memory_gbps, device.memory_gb, device.sms) == (gbps, gb, 108)
        assert (device.tensor["bf16"], device.tensor["tf32"], device.vector["fp32"]) == (312.0, 156.0, 19.5)
    # NVIDIA H200 page, H200 NVL column: bf16 1,671 and tf32 835 TFLOPS with sparsity (dense
    # 835.5 / 417.5), fp32 60, fp64 30 TFLOPS, 4.8 TB/s, NVLink 900 GB/s per GPU
    nvl = get_device("h200-nvl")
    assert (nvl.tensor["bf16"], nvl.tensor["tf32"], nvl.vector["fp32"], nvl.vector["fp64"]) == (
        835.5,
        417.5,
        60.0,
        30.0,
    )
    assert (nvl.memory_gbps, nvl.memory_gb, nvl.link_gbps) == (4800, 141, 450)
    # NVIDIA GH200 Grace Hopper Superchip page: H100 SXM compute (dense bf16 989.4, fp32 66.9),
    # 96GB HBM3 at 4 TB/s or 144GB HBM3e at 4.9 TB/s, NVLink-C2C 900 GB/s (450 per direction)
    for key, gbps, gb in (("gh200-96gb", 4000, 96), ("gh200-144gb", 4900, 144)):
        gh = get_device(key)
        assert (gh.tensor["bf16"], gh.vector["fp32"], gh.sms) == (989.4, 66.9, 132)
        assert (gh.memory_gbps, gh.memory_gb, gh.host_link_gbps) == (gbps, gb, 450)
    # NVIDIA V100 datasheet, V100 PCIe column: fp64 7, fp32 14, tensor 112 TFLOPS, 900 GB/s
    pcie = get_device("v100-pcie")
    assert (pcie.vector["fp64"], pcie.vector["fp32"], pcie.tensor["fp16"], pcie.memory_gbps) == (7.0, 14.0, 112.0, 900)
    assert "no bf16 tensor peak" in pcie.peak("bf16", "tensor").label
    for key in (
        "a100-sxm-40gb",
        "a100-pcie-40gb",
        "a100-pcie-80gb",
        "h200-nvl",
        "gh200-96gb",
        "gh200-144gb",
        "v100-pcie",
    ):
        assert get_device(key).source.startswith("https://")


def _tiny_trace(path: Path, gpu: str, sms: int) -> None:
    """One aten::mm launching one kernel, on a GPU of the given deviceProperties name."""
    args = {"External id": 1, "Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["float", "float"]}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1000, "dur": 50, "args": args},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1010, "dur": 5,
         "args": {"correlation": 1, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": 1020, "dur": 500,
         "args": {"correlation": 1, "External id": 1, "device": 0, "stream": 7}},
    ]  # fmt: skip
    props = {"id": 0, "name": gpu, "numSms": sms, "computeMajor": 8, "computeMinor": 0, "totalGlobalMem": 42505273344}
    path.write_text(json.dumps({"traceEvents": events, "deviceProperties": [props]}))


def test_a100_40gb_trace_is_reported_against_the_40gb_bandwidth(tmp_path: Path) -> None:
    trace = tmp_path / "a100_40gb.json"
    _tiny_trace(trace, "NVIDIA A100-SXM4-40GB", 108)
    assert cli("ingest", trace, "-o", tmp_path / "run", "-q").code == 0
    result = cli("report", tmp_path / "run")
    assert result.code == 0, result.stdout
    printed = " ".join(result.stdout.split())
    # A100 40GB SXM datasheet: 1,555 GB/s (the 80GB SXM's 2,039 GB/s must not be used)
    assert "device NVIDIA A100 SXM4 40GB: 1.55 TB/s" in printed
    assert "80GB" not in printed and "2.04 TB/s" not in printed
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["other_gpus"] == []
