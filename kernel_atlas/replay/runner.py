"""`atlas replay`: choose what to replay, replay it, measure it, check it, tabulate it."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_atlas.classify.classifier import default_classifier, rule_id
from kernel_atlas.errors import AtlasError
from kernel_atlas.ingest.pipeline import load_kernels
from kernel_atlas.ingest.recorded import Arg, from_params, parse_call
from kernel_atlas.replay.inputs import NotReplayable, nbytes
from kernel_atlas.roofline.costs import Call, NoCost, cost_of

# Kernels one process on one GPU cannot replay, by their label (a rules.toml rule, else the
# label's category), and why.
NOT_REPLAYABLE = {
    ("rule", "expert-parallel-a2a"): "DeepEP dispatch/combine needs the expert-parallel ranks and their buffers",
    ("rule", "deepep-layout"): "DeepEP's dispatch layout needs the expert-parallel ranks and their buffers",
    ("rule", "deepgemm-grouped"): "grouped DeepGEMM (masked/contiguous layout) needs the per-expert token layout",
    ("category", "communication"): "a collective across ranks: not replayable on one GPU",
}


def not_replayable(target: Target) -> str | None:
    """Why the target's kernel cannot be replayed on one GPU, or None."""
    keys = (("rule", rule_id(target.label_rule) or ""), ("category", target.category))
    return next((NOT_REPLAYABLE[key] for key in keys if key in NOT_REPLAYABLE), None)


@dataclass
class Target:
    kernel: str
    launcher: str
    op_mapping: str
    category: str
    input_dims: str | None
    input_types: str | None
    input_strides: str | None
    concrete_inputs: str | None
    traced_us: float | None
    count: int
    source: str  # "trace" or "catalog"
    label_rule: str = ""  # the kernel's label rule (kernels.parquet label_rule); classified when empty
    args: tuple[Arg, ...] = field(default=())  # the recorded call; parsed from the text columns when empty

    def __post_init__(self) -> None:
        if not self.label_rule or not self.op_mapping or not self.category:
            label = default_classifier().classify(self.kernel, self.launcher or None)
            self.label_rule = self.label_rule or label.rule
            self.op_mapping = self.op_mapping or label.op_mapping
            self.category = self.category or label.category
        if not self.args:
            self.args = parse_call(self.input_dims, self.input_types, self.input_strides, self.concrete_inputs)


@dataclass
class Result:
    kernel: str
    launcher: str
    op_mapping: str
    category: str
    input_dims: str | None
    implementation: str
    device: str
    device_name: str
    method: str
    median_us: float | None
    p10_us: float | None
    p90_us: float | None
    reps: int
    traced_us: float | None
    ratio: float | None
    flops: float | None
    bytes: float | None
    achieved_tflops: float | None
    achieved_gbps: float | None
    check: str
    reason: str


def _text(value: Any) -> str | None:
    return None if value is None or (isinstance(value, float) and value != value) else str(value)


def targets_from_output(out_dir: str | Path) -> list[Target]:
    """One target per distinct (launching op, recorded inputs) of an ingest output; the traced
    time is the mean time of one op call (all of its kernels)."""
    frame = load_kernels(out_dir)
    frame = frame[(frame["kind"] == "kernel") & frame["cpu_op"].notna()].copy()
    if frame.empty:
        return []
    calls = frame.groupby(["trace", "rank", "cpu_op_id"], observed=True).agg(
        call_us=("dur_us", "sum"),
        name=("name", "first"),
        cpu_op=("cpu_op", "first"),
        op_mapping=("op_mapping", "first"),
        category=("category", "first"),
        label_rule=("label_rule", "first"),
        input_dims=("input_dims", "first"),
        input_types=("input_types", "first"),
        input_strides=("input_strides", "first"),
        concrete_inputs=("concrete_inputs", "first"),
    )
    for column in ("name", "cpu_op", "input_dims", "input_types", "input_strides", "concrete_inputs"):
        calls[column] = calls[column].astype(object).fillna("")
    signature = ["cpu_op", "input_dims", "input_types", "input_strides", "concrete_inputs"]
    grouped = (
        calls.groupby(signature, sort=False)
        .agg(
            name=("name", "first"),
            op_mapping=("op_mapping", "first"),
            category=("category", "first"),
            label_rule=("label_rule", "first"),
            traced_us=("call_us", "mean"),
            count=("call_us", "size"),
        )
        .reset_index()
    )
    return [
        Target(
            str(r.name),
            str(r.cpu_op),
            str(r.op_mapping),
            str(r.category),
            r.input_dims or None,
            r.input_types or None,
            r.input_strides or None,
            r.concrete_inputs or None,
            float(r.traced_us),
            int(r.count),
            "trace",
            str(r.label_rule or ""),
        )
        for r in grouped.itertuples(index=False)
    ]


def targets_from_catalog(path: str | Path) -> list[Target]:
    """One target per catalog entry, with the entry's example shapes."""
    try:
        entries = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise AtlasError(path, f"cannot read the catalog ({exc})") from None
    targets = []
    for entry in entries:
        params = entry.get("params", [])
        dims = [p["example_dim"] if isinstance(p.get("example_dim"), list) else [] for p in params]
        types = [p.get("example_dtype") or "" for p in params]
        targets.append(
            Target(
                entry["kernel_name"],
                entry.get("kernel_implementation", ""),
                entry.get("op_mapping", ""),
                entry.get("category", ""),
                json.dumps(dims),  # shown in the results
                json.dumps(types),
                None,
                None,
                None,
                1,
                "catalog",
                args=from_params(params),
            )
        )
    return targets


def select(targets: list[Target], kernel: str | None, op: str | None, category: str | None) -> list[Target]:
    pattern = re.compile(kernel) if kernel else None
    return [
        t
        for t in targets
        if (pattern is None or pattern.search(t.kernel))
        and (op is None or t.op_mapping == op)
        and (category is None or t.category == category)
    ]


def _cost(target: Target) -> tuple[float | None, float | None]:
    try:
        cost = cost_of(Call(target.launcher, target.op_mapping, target.args, target.label_rule))
    except (NoCost, ValueError, IndexError, TypeError, ZeroDivisionError):
        return None, None
    return cost.flops, cost.bytes


def replay_one(target: Target, device: str, max_gib: float = 16.0, scale: float = 1.0) -> Result:
    from kernel_atlas.replay.kernels import find_implementation
    from kernel_atlas.replay.timing import measure

    if not device.startswith("cuda"):
        # Triton kernels run in the interpreter on the CPU; it must be on before they are defined
        os.environ.setdefault("TRITON_INTERPRET", "1")
    flops, nbytes_ = _cost(target)

    fields = {
        "kernel": target.kernel,
        "launcher": target.launcher,
        "op_mapping": target.op_mapping,
        "category": target.category,
        "input_dims": target.input_dims,
        "device": device,
    }

    def skipped(reason: str) -> Result:
        return Result(
            **fields,
            implementation="none",
            device_name="",
            method="",
            median_us=None,
            p10_us=None,
            p90_us=None,
            reps=0,
            traced_us=target.traced_us,
            ratio=None,
            flops=flops,
            bytes=nbytes_,
            achieved_tflops=None,
            achieved_gbps=None,
            check="skipped",
            reason=reason,
        )

    try:
        # ATen ops replay through their schema; other launchers by kernel family (these
        # implementations allocate only what they replay, not the recorded pools)
        special = None if target.launcher.startswith("aten::") else find_implementation(target, device, scale)
        if special is not None:
            case = special
        elif target.launcher.startswith("aten::"):
            size = nbytes(target.args)
            if size > max_gib * (1 << 30):
                return skipped(f"inputs need {size / (1 << 30):.1f} GiB, more than --max-gib {max_gib:g}")
            from kernel_atlas.replay.aten import build_case

            case = build_case(target.launcher, target.args, device)
        else:
            reason = not_replayable(target)
            raise NotReplayable(reason or f"no replay implementation for {target.launcher or 'this kernel'}")
        light = not device.startswith("cuda") and "interpreter" in case.implementation
        timing = measure(case.run, device, **({"warmup": 1, "min_reps": 3, "budget_s": 0.0} if light else {}))
        check, why = case.check()
    except NotReplayable as exc:
        return skipped(str(exc))
    except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError) as exc:
        return skipped(f"replay failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    traced = target.traced_us
    if scale < 1.0 and "scaled" in case.implementation:
        # the replay ran smaller shapes than recorded: costs and traced time do not apply
        flops = nbytes_ = traced = None
    ratio = timing.median_us / traced if traced else None
    tflops = flops / (timing.median_us * 1e6) if flops else None
    gbps = nbytes_ / (timing.median_us * 1e3) if nbytes_ else None
    return Result(
        **fields,
        implementation=case.implementation,
        device_name=timing.device_name,
        method=timing.method,
        median_us=timing.median_us,
        p10_us=timing.p10_us,
        p90_us=timing.p90_us,
        reps=timing.reps,
        traced_us=traced,
        ratio=ratio,
        flops=flops,
        bytes=nbytes_,
        achieved_tflops=tflops,
        achieved_gbps=gbps,
        check=check,
        reason=why,
    )


def replay_all(
    targets: list[Target], device: str, on_done: Callable[[Result], None] | None = None, **options: Any
) -> pd.DataFrame:
    rows = []
    for target in targets:
        result = replay_one(target, device, **options)
        rows.append(asdict(result))
        if on_done:
            on_done(result)
    return pd.DataFrame(rows, columns=list(Result.__dataclass_fields__))


def default_device() -> str:
    try:
        import torch
    except ImportError:
        raise AtlasError(
            None, "replay needs PyTorch: `pip install torch==2.13.0` (or a CUDA build), then retry"
        ) from None
    return "cuda" if torch.cuda.is_available() else "cpu"
