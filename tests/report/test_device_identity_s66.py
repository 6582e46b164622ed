"""GPUs whose name alone does not say which peaks apply. One the trace names "" (vLLM's ROCm graph
traces: TraceLens's vllm_decode_full) is identified by its deviceProperties — compute capability,
SM/CU count and memory fitting one catalog entry alone — and the report says so; where two entries
fit, or the name is a model the catalog lacks, it stays unknown (campaign AT 3, left out at stop
65). A partition — an MI300X in CPX mode, named as the package with 38 of its 304 CUs — gets 1/8 of
its peaks (campaign AZ 3). Values by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.core.devices import Properties, by_properties, match_device, match_properties
from tests.support.hostile import cli

# TraceLens's inference/vllm_decode_full/graph_execution.json.gz, deviceProperties[0] (less its id)
UNNAMED_MI300X = {"name": "", "numSms": 304, "totalGlobalMem": 206_141_652_992, "computeMajor": 9, "computeMinor": 4}


def test_properties_identify_one_entry_alone() -> None:
    assert match_properties("", Properties.of(UNNAMED_MI300X)).key == "mi300x"  # type: ignore[union-attr]
    # an MI300X VF's 205,571,227,648 B = 191.45 GiB of 192: in 95–100.5 %
    vf = {**UNNAMED_MI300X, "totalGlobalMem": 205_571_227_648}
    assert by_properties(Properties.of(vf)).key == "mi300x"  # type: ignore[union-attr]
    # 256 GiB at 9.4 with 304 CUs: the MI325X; 128 GiB: no entry
    assert by_properties(Properties.of({**UNNAMED_MI300X, "totalGlobalMem": 274_877_906_944})).key == "mi325x"  # type: ignore[union-attr]
    assert by_properties(Properties.of({**UNNAMED_MI300X, "totalGlobalMem": 137_438_953_472})) is None  # 128 GiB
    # an unnamed H200 (9.0, 132 SMs, 141 GiB) fits the H200 and the H200 NVL: unknown, not a guess
    h200 = {"name": "", "numSms": 132, "totalGlobalMem": 150_000_000_000, "computeMajor": 9, "computeMinor": 0}
    assert by_properties(Properties.of(h200)) is None
    # a property not recorded: nothing to go on
    assert by_properties(Properties.of({k: v for k, v in UNNAMED_MI300X.items() if k != "computeMinor"})) is None
    # a name is a model: one the catalog lacks stays unknown whatever its properties (an MI250 GCD has
    # an MI210's 104 CUs, 64 GiB and gfx90a, and calls itself "AMD Radeon Graphics" on old ROCm)
    radeon = {"name": "AMD Radeon Graphics", "numSms": 104, "totalGlobalMem": 68_702_699_520}
    assert match_properties(radeon["name"], Properties.of({**radeon, "computeMajor": 9, "computeMinor": 0})) is None


def _trace(path: Path, gpu: dict[str, Any] = UNNAMED_MI300X, n: int = 256, dur: float = 10) -> Path:
    """One aten::mm of [n, 2n] × [2n, 4n] bf16 whose kernel runs `dur` µs on `gpu`."""
    ids = {"correlation": 11, "External id": 5}
    events: list[dict[str, Any]] = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 1,
            "tid": 1,
            "ts": 100,
            "dur": 20,
            "args": {
                "External id": 5,
                "Input Dims": [[n, 2 * n], [2 * n, 4 * n]],
                "Input type": ["c10::BFloat16", "c10::BFloat16"],
            },
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 105,
            "dur": 5,
            "args": ids,
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1_SN",
            "pid": 2,
            "tid": 1,
            "ts": 120,
            "dur": dur,
            "args": {**ids, "device": 2, "stream": 1},
        },
    ]
    path.write_text(json.dumps({"deviceProperties": [{"id": 2, **gpu}], "traceEvents": events}))
    return path


def test_an_unnamed_gpu_gets_the_peaks_its_properties_identify(tmp_path: Path) -> None:
    out = tmp_path / "o"
    assert cli("ingest", _trace(tmp_path / "vllm.json"), "-o", out).code == 0
    report = cli("report", out)
    assert report.code == 0, report.output
    text = " ".join(report.stdout.split())
    assert "GPU '' is not in catalogs" not in text
    # 206,141,652,992 B / 2^30 = 191.98 GiB
    said = "the trace names no GPU model: identified as AMD Instinct MI300X by its properties (compute 9.4, 304 SMs/CUs, 191.98 GiB)"
    assert said in text
    facts = json.loads((out / "report.json").read_text())
    assert facts["traced_gpu"] == "" and facts["traced_gpu_identified"] == said
    roofline = pd.read_parquet(out / "roofline.parquet")
    mm = roofline[roofline["launcher"] == "aten::mm"].iloc[0]
    # 2·256·512·1024 = 268,435,456 FLOP in 10 µs = 26.84 TFLOP/s against the MI300X's bf16 1,307.4
    assert mm["flops"] == 268_435_456 and mm["peak_tflops"] == 1307.4
    assert "identified as AMD Instinct MI300X by its properties" in (out / "report.html").read_text()


def test_an_unnamed_gpu_that_fits_no_one_entry_is_said_so(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.json")
    data = json.loads(trace.read_text())
    data["deviceProperties"][0]["numSms"] = 300  # no entry has 300 CUs at 9.4
    trace.write_text(json.dumps(data))
    assert cli("ingest", trace, "-o", tmp_path / "o").code == 0
    report = cli("report", tmp_path / "o")
    text = " ".join(report.stdout.split())
    assert report.code == 0 and "GPU ''" not in text, report.output
    assert (
        "the trace's GPU has no name, and its properties fit no single catalog entry: pass --device for peaks" in text
    )
    assert json.loads((tmp_path / "o" / "report.json").read_text())["traced_gpu_identified"] == ""


def test_a_partition_gets_its_share_of_the_peaks() -> None:
    whole = match_device("AMD Instinct MI300X", 304)
    assert whole is not None and whole.tensor["bf16"] == 1307.4 and whole.partition == 1
    cpx = match_device("AMD Instinct MI300X", 38)  # one XCD: 304 / 38 = 8
    assert cpx is not None and cpx.partition == 8 and cpx.sms == 38
    assert cpx.tensor["bf16"] == 1307.4 / 8 == 163.425 and cpx.memory_gbps == 5300 / 8 == 662.5
    assert match_device("AMD Instinct MI300X", 76).tensor["bf16"] == 1307.4 / 4  # type: ignore[union-attr]
    # 300 CUs is no whole fraction of 304: the entry as it is (no partition to divide by)
    assert match_device("AMD Instinct MI300X", 300).tensor["bf16"] == 1307.4  # type: ignore[union-attr]


def test_a_partition_through_the_commands(tmp_path: Path) -> None:
    # campaign AZ 3's case: aten::mm 8192³ bf16 in 8,000 µs on "AMD Instinct MI300X" with 38 CUs:
    # 2·8192³ = 1,099,511,627,776 FLOP / 8 ms = 137.44 TFLOP/s against 1307.4/8 = 163.425 → SOL 84.10 %
    # (the package's 1307.4 had given 10.51 %)
    cpx = {
        "name": "AMD Instinct MI300X",
        "numSms": 38,
        "totalGlobalMem": 206_141_652_992,
        "computeMajor": 9,
        "computeMinor": 4,
    }
    # the helper's mm is [n, 2n] × [2n, 4n]: its recorded dims replaced by the square 8192³
    trace = _trace(tmp_path / "cpx.json", cpx, n=8192, dur=8000)
    data = json.loads(trace.read_text())
    data["traceEvents"][0]["args"]["Input Dims"] = [[8192, 8192], [8192, 8192]]
    trace.write_text(json.dumps(data))
    out = tmp_path / "o"
    assert cli("ingest", trace, "-o", out).code == 0
    report = cli("report", out)
    assert report.code == 0, report.output
    text = " ".join(report.stdout.split())
    assert "device AMD Instinct MI300X (1/8 partition: 38 of 304 SMs/CUs)" in text
    assert "compute peaks 1/8 of the model's, memory bandwidth 1/8 of its HBM's (an estimate" in text
    mm = pd.read_parquet(out / "roofline.parquet").iloc[0]
    assert mm["flops"] == 1_099_511_627_776 and mm["peak_tflops"] == 163.425
    assert round(mm["sol_pct"], 2) == 84.10
