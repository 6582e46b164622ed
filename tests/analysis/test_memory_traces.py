"""The memory analysis on the shared real traces: peaks equal the largest totals of the events, and
what is live at the peak plus what was held before the window adds up to it."""

from __future__ import annotations

import pytest

from kernel_atlas.analysis.memory import analyse_memory
from tests.support.traces import ingested, raw_events

# (trace, device) → (largest Total Allocated, largest Total Reserved, first event's Total Allocated −
# its Bytes), read with the standard library alone:
#   python -c "import gzip,json,sys; e=[x['args'] for x in json.load(gzip.open(sys.argv[1]))['traceEvents']
#     if x.get('name')=='[memory]' and x['args']['Device Type']!=0];
#     print(max(a['Total Allocated'] for a in e), max(a['Total Reserved'] for a in e),
#     e[0]['Total Allocated']-e[0]['Bytes'])" TRACE
# (the events of these traces are in time order per device, so e[0] is the first).
PEAKS = {
    ("h100_bert_small_infer", "cuda:0"): (101305344, 121634816, 91360768),
    ("h100_vit_image_classify_infer", "cuda:0"): (231332864, 245366784, 214877184),
    ("mi300x_sglang_qwen3_8b_decode_capture_bs32", "hip:0"): (151821681664, 152171446272, 151811695616),
}
# mi300x_normalization_layers: two threads, not in time order in the file; the peak is the max all the same
PEAK_ONLY = {("mi300x_normalization_layers", "hip:0"): (8154624, 8388608)}


def _entries(stem: str) -> dict[str, dict]:
    result = ingested(stem)
    assert result.memory is not None
    return {e["device"]: e for e in analyse_memory({(stem, 0): result.memory.drop(columns=["rank"])}).entries}


@pytest.mark.parametrize(("stem", "device"), sorted(PEAKS))
def test_peak_equals_largest_total(stem: str, device: str) -> None:
    entry = _entries(stem)[device]
    peak, reserved, baseline = PEAKS[stem, device]
    assert (entry["peak_allocated_bytes"], entry["peak_reserved_bytes"], entry["baseline_bytes"]) == (
        peak,
        reserved,
        baseline,
    )
    held = entry["baseline_bytes"] - entry["baseline_freed_before_peak_bytes"]
    assert abs(held + entry["live_at_peak_bytes"] - peak) <= 0.005 * peak
    for holders in entry["holders"].values():  # every byte of the peak has a holder (or a reason why not)
        assert sum(h["bytes"] for h in holders) == held + entry["live_at_peak_bytes"]


@pytest.mark.parametrize(("stem", "device"), sorted(PEAK_ONLY))
def test_peak_of_unordered_threads(stem: str, device: str) -> None:
    entry = _entries(stem)[device]
    assert (entry["peak_allocated_bytes"], entry["peak_reserved_bytes"]) == PEAK_ONLY[stem, device]
    held = entry["baseline_bytes"] - entry["baseline_freed_before_peak_bytes"]
    assert (
        abs(held + entry["live_at_peak_bytes"] - entry["peak_allocated_bytes"]) <= 0.005 * entry["peak_allocated_bytes"]
    )


def test_every_memory_event_is_decoded() -> None:
    stem = "v100_resnet50_train_pt19"  # PyTorch 1.9: no category, no address, no totals
    expected = sum(1 for e in raw_events(stem) if e.get("name") == "[memory]" and e.get("ph") == "i")
    assert expected == 12838
    entries = _entries(stem)
    assert sum(e["events"] for e in entries.values()) == expected
    assert entries["cuda:0"]["peak_allocated_bytes"] is None  # no Total Allocated: no absolute peak
    assert entries["cuda:0"]["unpaired_events"] == 8220


def test_host_memory_apart() -> None:
    entries = _entries("h100_bert_small_infer")
    assert list(entries) == ["cuda:0", "cpu"] and entries["cpu"]["host"]
    assert entries["cpu"]["peak_allocated_bytes"] == 16  # the largest Total Allocated of Device Type 0
