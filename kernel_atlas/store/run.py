"""One ingest output opened once: its checked summary, ranks, traced GPU, replay results and
kernels one rank (or all) at a time — what report, diff, the dashboard and replay read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.core.devices import Device, Properties, match_properties
from kernel_atlas.core.redact import redact_text
from kernel_atlas.store.outputs import (
    REQUIRED_COLUMNS,
    Output,
    check_derived,
    load_kernels,
    open_output,
    output_ranks,
    read_parquet,
)

REPLAY = "replay.parquet"


@dataclass(frozen=True)
class TracedGpu:
    """The GPU the run's first trace ran on (name and SM count from `deviceProperties`) and the
    world size of the first trace that names one (`distributedInfo`); None where none says. A
    trace's `gpus` hold only the entries that describe its activities' devices (a device its table
    does not list is an unknown GPU, summary.json `undescribed_devices`), so a run whose devices no
    trace describes has no GPU here, rather than its table's other one."""

    name: str | None = None
    sms: int | None = None
    world_size: int | None = None
    properties: Properties = field(default_factory=Properties, compare=False)  # of the same entry as name

    def catalog_device(self) -> Device | None:
        """Its catalog entry: by name, or by its properties where the trace does not name it."""
        return match_properties(self.name, self.properties)

    def identified(self) -> str:
        """How the GPU was identified where its name alone does not say, in words: an unnamed GPU by
        its properties, a partition by its SM count ('' otherwise, or where it is not identified)."""
        device = self.catalog_device()
        if device is None:
            return ""
        said = []
        if not (self.name or "").strip():
            how = f"by its properties ({self.properties.words()})"
            said.append(f"the trace names no GPU model: identified as {device.name} {how}")
        if device.partition > 1:
            said.append(
                f"{device.sms} SMs/CUs of the {device.sms * device.partition} its model has: a 1/{device.partition} "
                f"partition (an MI300X in CPX mode is 1/8); compute peaks 1/{device.partition} of the model's, "
                f"memory bandwidth 1/{device.partition} of its HBM's (an estimate: one partition alone may draw more)"
            )
        return "; ".join(said)


@dataclass
class Run:
    """An ingest output that passed `open_output`'s checks. Open it under the folder's lock
    (`outputs.lock`) when something may write it meanwhile."""

    output: Output

    @classmethod
    def open(cls, out_dir: str | Path, required: Sequence[str] = REQUIRED_COLUMNS) -> Run:
        return cls(open_output(out_dir, required))

    @property
    def out_dir(self) -> Path:
        return self.output.path

    @property
    def summary(self) -> dict[str, Any]:
        return self.output.summary

    @property
    def run_id(self) -> str | None:
        return self.output.run_id

    @property
    def label(self) -> str:
        """The folder's name, as diffs and pages show it (a token in it redacted)."""
        return redact_text(self.out_dir.name.removesuffix(".atlas"))

    @cached_property
    def ranks(self) -> list[int]:
        return sorted(self.output.files) if self.output.files else output_ranks(self.out_dir)

    @cached_property
    def gpu(self) -> TracedGpu:
        traces = self.summary.get("traces", [])
        sizes = (trace.get("distributed", {}).get("world_size") for trace in traces)
        world = next((size for size in sizes if size is not None), None)
        # only the traces that ran GPU activities: one without any lists its machine's every GPU, none
        # of which ran the run's kernels (a run without GPU activities at all keeps those)
        ran = [t for t in traces if not isinstance(t.get("gpu_activities"), int) or t["gpu_activities"] > 0]
        for trace in ran or traces:
            for gpu in trace.get("gpus", []):
                return TracedGpu(gpu.get("name"), gpu.get("numSms"), world, Properties.of(gpu))
        return TracedGpu(world_size=world)

    @property
    def gpu_names(self) -> list[str]:
        return gpu_names(self.summary)

    def kernels(self, rank: int | None = None) -> pd.DataFrame:
        """One rank's kernels, or every rank's (for a few ranks: analyses of many go rank by rank)."""
        return load_kernels(self.out_dir, None if rank is None else [rank])

    def replay(self) -> pd.DataFrame | None:
        """`replay.parquet` (made from this run's kernels), or None without one."""
        path = self.out_dir / REPLAY
        if not (path.exists() or path.is_symlink()):
            return None
        check_derived(path, self.output)
        return read_parquet(path)


def process_group_sizes(summary: dict[str, Any]) -> dict[int, dict[str, int]]:
    """Per rank, its process groups' sizes by name (each trace's `distributed.process_groups`, from
    `distributedInfo.pg_config`): what the roofline and the cross-rank view read a collective's
    group size from where its kernel records none. Where several traces claim a rank, a name they
    size differently is left out. Empty for a summary written before ingest kept them."""
    sizes: dict[int, dict[str, int]] = {}
    conflicting: set[tuple[int, str]] = set()
    for trace in summary.get("traces", []):
        rank = int(trace.get("rank", 0))
        kept = sizes.setdefault(rank, {})
        for name, size in (trace.get("distributed", {}).get("process_groups") or {}).items():
            if kept.setdefault(name, size) != size:
                conflicting.add((rank, name))
    for rank, name in conflicting:
        del sizes[rank][name]
    return {rank: groups for rank, groups in sizes.items() if groups}


def gpu_names(summary: dict[str, Any]) -> list[str]:
    """Every traced GPU's name in a summary, sorted, each once."""
    return sorted({g.get("name", "?") for t in summary.get("traces", []) for g in t.get("gpus", [])})
