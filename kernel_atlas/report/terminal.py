"""Rich terminal output for `atlas ingest` and `atlas report`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernel_atlas.classify.names import display_name

if TYPE_CHECKING:
    from kernel_atlas.ingest.pipeline import IngestResult


def fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


@contextmanager
def progress(console: Console, paths: list[Path], disable: bool = False) -> Iterator[tuple[Any, Any]]:
    """Progress for `atlas ingest`: per stage of one large trace (over 50 MB), per trace for several.

    Yields (on_done(path), on_progress(stage, fraction)) callbacks."""
    sizes = [p.stat().st_size if p.is_file() else 0 for p in paths]
    if disable or (len(paths) == 1 and sizes[0] < 50 << 20):
        yield (lambda _p: None), None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        if len(paths) == 1:
            task = bar.add_task("reading", total=1.0)
            yield (lambda _p: None), (lambda stage, fraction: bar.update(task, completed=fraction, description=stage))
        else:
            task = bar.add_task(f"ingesting {len(paths)} traces", total=len(paths))
            yield (lambda _p: bar.advance(task)), None


def print_ingest_summary(console: Console, result: IngestResult, files: dict[str, Path], top: int = 10) -> None:
    frame = result.frame
    for facts in result.facts["traces"]:
        gpus = ", ".join(sorted({g.get("name", "?") for g in facts["gpus"]})) or "unknown GPU"
        console.print(
            f"[bold]{facts['file']}[/]  rank {facts['rank']}  {gpus}  "
            f"{facts['events']:,} events  {facts['kernels']:,} kernels  "
            f"{facts['gpu_activities'] - facts['kernels']:,} memcpy/memset",
            highlight=False,
        )
        for dev in facts["devices"]:
            console.print(
                f"  device {dev['device']}: span {fmt_us(dev['span_us'])}, busy {fmt_us(dev['busy_us'])} "
                f"({dev['busy_pct']:.1f}%), idle {fmt_us(dev['idle_us'])}, streams {dev['streams']}",
                highlight=False,
            )
        linked = facts["with_launcher"]
        total = facts["gpu_activities"]
        if total:
            console.print(
                f"  launcher known for {linked:,}/{total:,} ({100 * linked / total:.1f}%), "
                f"shapes for {facts['with_shapes']:,}, graph-replayed {facts['graph_launched_kernels']:,}",
                highlight=False,
            )
    if len(frame):
        kernel_time = float(frame["dur_us"].sum())
        grouped = (
            frame.groupby(["name", "category", "op_mapping"], observed=True)["dur_us"]
            .agg(["count", "sum"])
            .sort_values("sum", ascending=False)
            .head(top)
        )
        table = Table(title=f"Top {len(grouped)} kernels by GPU time", title_justify="left")
        table.add_column("time", justify="right")
        table.add_column("%", justify="right")
        table.add_column("calls", justify="right")
        table.add_column("category")
        table.add_column("op")
        table.add_column("kernel", overflow="fold", min_width=30)
        for (name, category, op), row in grouped.iterrows():
            table.add_row(
                fmt_us(row["sum"]),
                f"{100 * row['sum'] / kernel_time:.1f}",
                f"{int(row['count']):,}",
                str(category),
                str(op),
                display_name(str(name)),
            )
        console.print(table)
    console.print("wrote " + ", ".join(str(p) for p in files.values()), highlight=False)


def print_report(console: Console, report: Any, top: int = 12) -> None:
    analysis = report.analysis
    facts = analysis.facts
    device = report.device
    if device is None:
        console.print(f"[yellow]GPU {report.traced_gpu!r} is not in catalogs/devices.toml: pass --device for peaks[/]")
    else:
        projected = (
            " [bold yellow](projection: the trace ran on " + str(report.traced_gpu) + ")[/]"
            if facts.get("projection")
            else ""
        )
        console.print(
            f"[bold]device[/] {device.name} — {device.memory_gbps:g} GB/s, "
            f"bf16 {device.tensor.get('bf16', float('nan')):g} TFLOP/s{projected}",
            highlight=False,
        )
    for d in facts["devices"]:
        console.print(
            f"rank {d['rank']} device {d['device']}: busy {fmt_us(d['busy_us'])} of {fmt_us(d['span_us'])} "
            f"({100 * d['busy_us'] / d['span_us'] if d['span_us'] else 0:.1f}%), idle {fmt_us(d['idle_us'])}; "
            f"communication {fmt_us(d['communication_us'])}, {d['overlap_pct_of_communication']:.0f}% overlapped",
            highlight=False,
        )
    share = analysis.timeshare[analysis.timeshare["level"] == "category"]
    table = Table(title="GPU time by category", title_justify="left")
    for column in ("category", "time", "%", "count"):
        table.add_column(column, justify="right" if column != "category" else "left")
    for row in share.itertuples(index=False):
        table.add_row(row.key, fmt_us(row.total_us), f"{row.pct:.1f}", f"{row.count:,}")
    console.print(table)
    roof = analysis.roofline
    ranked = roof[roof["headroom_us"].notna()].head(top)
    table = Table(
        title="Where optimisation pays most (headroom = time above the roofline-attainable time)", title_justify="left"
    )
    for column in ("headroom", "time", "TFLOP/s", "GB/s", "SOL%", "bound", "op: kernel ×calls shapes"):
        wide = column.startswith("op:")
        table.add_column(
            column,
            justify="left" if wide or column == "bound" else "right",
            overflow="fold" if wide else "ellipsis",
            no_wrap=not wide,
            min_width=30 if wide else None,
        )
    for row in ranked.itertuples(index=False):
        table.add_row(
            fmt_us(row.headroom_us),
            fmt_us(row.op_time_us),
            f"{row.achieved_tflops:.2f}",
            f"{row.achieved_gbps:.0f}",
            f"{row.sol_pct:.1f}",
            str(row.bound),
            f"{row.op_mapping}: {display_name(str(row.name))} ×{row.count} {row.input_dims}",
        )
    console.print(table)
    missing = facts["no_shape_time_us"] + facts["no_model_time_us"]
    if missing:
        console.print(
            f"{fmt_us(missing)} of GPU time has no cost (no recorded shapes or no cost model); "
            "see `note` in roofline.parquet",
            highlight=False,
        )
    console.print("wrote " + ", ".join(str(p) for p in report.files.values()), highlight=False)


def print_replay(console: Console, results: Any, device: str) -> None:
    table = Table(
        title=f"Replay on {device}" + (" (wall clock: CPU times are not GPU times)" if device == "cpu" else ""),
        title_justify="left",
    )
    for column in (
        "kernel / shapes",
        "implementation",
        "median",
        "p10–p90",
        "traced",
        "ratio",
        "TFLOP/s",
        "GB/s",
        "check",
    ):
        table.add_column(
            column,
            overflow="fold",
            justify="left" if column in ("kernel / shapes", "implementation", "check") else "right",
        )
    for row in results.itertuples(index=False):
        timed = row.median_us == row.median_us and row.median_us is not None
        table.add_row(
            f"{display_name(str(row.kernel))} {row.input_dims or ''}",
            str(row.implementation),
            fmt_us(row.median_us) if timed else "–",
            f"{fmt_us(row.p10_us)}–{fmt_us(row.p90_us)}" if timed else "–",
            fmt_us(row.traced_us) if row.traced_us == row.traced_us and row.traced_us is not None else "–",
            f"{row.ratio:.2f}" if row.ratio == row.ratio and row.ratio is not None else "–",
            f"{row.achieved_tflops:.2f}"
            if row.achieved_tflops == row.achieved_tflops and row.achieved_tflops is not None
            else "–",
            f"{row.achieved_gbps:.0f}"
            if row.achieved_gbps == row.achieved_gbps and row.achieved_gbps is not None
            else "–",
            f"{row.check}: {row.reason}",
        )
    console.print(table)
    done = int((results["check"] != "skipped").sum()) if len(results) else 0
    methods = ", ".join(sorted(set(results["method"].dropna()) - {""})) or "–"
    console.print(f"{done}/{len(results)} replayed; timing method: {methods}")


def print_catalog_costs(console: Console, table: Any, device: str, path: Path, top: int = 12) -> None:
    costed = table[table["flops"].notna()] if "flops" in table else table.iloc[0:0]
    console.print(f"{len(costed)}/{len(table)} catalog entries costed at their example shapes on {device}")
    if len(costed):
        view = Table(title=f"Largest attainable times on {device}", title_justify="left")
        for column in ("attainable", "GFLOP", "MB", "bound", "op: kernel"):
            view.add_column(column, justify="left" if column in ("bound", "op: kernel") else "right", overflow="fold")
        for row in costed.sort_values("attainable_us", ascending=False).head(top).itertuples(index=False):
            view.add_row(
                fmt_us(row.attainable_us),
                f"{row.flops / 1e9:.2f}",
                f"{row.bytes / 1e6:.2f}",
                str(row.bound),
                f"{row.op_mapping}: {display_name(str(row.kernel_name))}",
            )
        console.print(view)
    console.print(f"wrote {path}")
