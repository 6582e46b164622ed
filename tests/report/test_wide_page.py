"""What the report page draws of wide runs (issue 27): the whole-window timeline's step shading
(`html._step_bands`: one band per step, or runs of consecutive steps beyond MAX_STEP_BANDS) and
the roofline table (at most MAX_TABLE_ROWS rows, said on the page)."""

from __future__ import annotations

import pandas as pd

from kernel_atlas.report import html
from kernel_atlas.report.plot import widget


def _steps(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {"step": range(1, n + 1), "start": [10.0 * i for i in range(n)], "end": [10.0 * i + 9 for i in range(n)]}
    )


def test_few_steps_are_one_band_each() -> None:
    bands = html._step_bands(_steps(3))
    assert [(b.label, b.start, b.end, b.shade) for b in bands] == [
        ("step 1", 0.0, 9.0, 1),
        ("step 2", 10.0, 19.0, 0),
        ("step 3", 20.0, 29.0, 1),
    ]


def test_many_steps_are_shaded_in_runs(monkeypatch) -> None:
    monkeypatch.setattr(html, "MAX_STEP_BANDS", 4)
    bands = html._step_bands(_steps(10))  # 10 steps, at most 4 bands: runs of 3
    assert [(b.label, b.start, b.end, b.shade) for b in bands] == [
        ("steps 1–3", 0.0, 29.0, 0),
        ("steps 4–6", 30.0, 59.0, 1),
        ("steps 7–9", 60.0, 89.0, 0),
        ("step 10", 90.0, 99.0, 1),
    ]
    shading = html._step_shading(_steps(10), origin=0.0, scale=1.0)
    assert len(shading["shapes"]) == len(shading["annotations"]) == 4


def test_the_page_table_holds_at_most_max_table_rows(monkeypatch, tmp_path) -> None:
    from kernel_atlas.ingest.fleet import write_outputs
    from kernel_atlas.ingest.pipeline import ingest_paths
    from kernel_atlas.report.build import build_report
    from tests.support.traces import EXAMPLE

    out = tmp_path / "bert.atlas"
    write_outputs(ingest_paths([EXAMPLE]), out)
    analysis = build_report(out).analysis
    monkeypatch.setattr(html, "MAX_TABLE_ROWS", 3)
    table = html.roofline_table(analysis)
    assert f"The first 3 of {len(analysis.roofline):,} rows" in table
    assert table.count("<tr") - table.count("<tr class='detail") <= 3 + 2  # 3 rows, header rows aside
    monkeypatch.setattr(html, "MAX_TABLE_ROWS", len(analysis.roofline))
    assert "The first" not in html.roofline_table(analysis)


def test_the_treemap_keeps_the_heaviest_kernels_and_sums_the_rest_per_op(monkeypatch) -> None:
    from types import SimpleNamespace

    monkeypatch.setattr(html, "MAX_TREEMAP_KERNELS", 2)
    kernels = pd.DataFrame(
        {
            "category": ["gemm", "gemm", "gemm", "attention", "attention"],
            "op_mapping": ["mm", "mm", "mm", "sdpa", "sdpa"],
            "name": ["ka", "kb", "kc", "kd", "ke"],
            "dur_us": [5.0, 3.0, 1.0, 4.0, 0.5],
        }
    )
    tree = widget(html.timeshare_figure(SimpleNamespace(kernels=kernels))).data[0]
    tiles = dict(zip(tree.ids, tree.values, strict=True))
    assert tiles == {
        "attention": 4.5,
        "attention/sdpa": 4.5,
        "attention/sdpa/kd": 4.0,
        "attention/sdpa/… 1 other kernel": 0.5,
        "gemm": 9.0,
        "gemm/mm": 9.0,
        "gemm/mm/ka": 5.0,
        "gemm/mm/… 2 other kernels": 4.0,
    }
    title = widget(html.timeshare_figure(SimpleNamespace(kernels=kernels))).layout.title.text
    assert "the 2 kernels with the most time; the other 3 summed per op" in title
    monkeypatch.setattr(html, "MAX_TREEMAP_KERNELS", 5)
    assert len(widget(html.timeshare_figure(SimpleNamespace(kernels=kernels))).data[0].ids) == 4 + 5


def test_the_module_treemap_holds_module_levels_deep_paths_at_their_last_level(monkeypatch) -> None:
    """A module path of 8,000 levels (a dotted name) made a tile per level, each tile's id the
    whole path down to it: a 217 MB page in 36 s. Deeper than MODULE_LEVELS, a path's time is
    drawn at its ancestor that deep."""
    monkeypatch.setattr(html, "MODULE_LEVELS", 3)
    modules = pd.DataFrame(
        {
            "module": ["(no module)", "a", "a.b.c.d.e", "a.b.c.x", "a.y"],
            "dur_us": [1.0, 2.0, 4.0, 8.0, 16.0],
        }
    )
    fig = widget(html.module_figure(modules))
    tiles = dict(zip(fig.data[0].ids, fig.data[0].values, strict=True))
    # a.b.c.d.e and a.b.c.x: both drawn at a.b.c (4 + 8); `branchvalues` "remainder": own time
    assert tiles == {"(no module)": 1.0, "a": 2.0, "a.b": 0.0, "a.b.c": 12.0, "a.y": 16.0}
    assert "2 paths deeper than 3 levels drawn at level 3" in fig.layout.title.text
    monkeypatch.setattr(html, "MODULE_LEVELS", 16)
    fig = widget(html.module_figure(modules))
    assert len(fig.data[0].ids) == 8 and "deeper" not in fig.layout.title.text


def test_the_summary_lists_at_most_max_device_lines(monkeypatch) -> None:
    from types import SimpleNamespace

    monkeypatch.setattr(html, "MAX_DEVICE_LINES", 2)
    devices = [
        {"rank": 0, "device": d, "span_us": 10.0, "busy_us": 4.0, "idle_us": 6.0, "communication_us": 0.0}
        for d in range(5)
    ]
    facts = {"devices": devices, "gpu_time_us": 20.0, "trust": None}
    page = SimpleNamespace(analysis=SimpleNamespace(facts=facts), device=None, title="t")
    section = html._summary_section(page)
    assert "rank 0 device 1: busy 4.0 µs of 10.0 µs (40.0%), idle 6.0 µs" in section
    assert "rank 0 device 2:" not in section
    assert "… and 3 more devices (report.json `devices`)" in section


def test_the_roofline_figure_plots_the_heaviest_groups(monkeypatch) -> None:
    from types import SimpleNamespace

    monkeypatch.setattr(html, "MAX_ROOFLINE_POINTS", 2)
    n = 3
    roofline = pd.DataFrame(
        {
            "role": ["main"] * n,
            "category": ["gemm"] * n,
            "name": ["mm_a", "mm_b", "mm_c"],
            "launcher": ["aten::mm"] * n,
            "input_dims": ["[[1, 8], [8, 8]]", "[[2, 8], [8, 8]]", "[[3, 8], [8, 8]]"],
            "count": [1, 1, 1],
            "op_time_us": [5.0, 1.0, 9.0],
            "flops": [128.0, 256.0, 384.0],
            "intensity": [1.0, 2.0, 3.0],
            "achieved_tflops": [0.1, 0.2, 0.3],
            "achieved_gbps": [1.0, 1.0, 1.0],
            "sol_pct": [1.0, 2.0, 3.0],
            "bound": ["memory"] * n,
            "headroom_us": [4.0, 0.5, 8.0],
            "call_stack": [None] * n,
        }
    )
    fig = widget(html.roofline_figure(SimpleNamespace(roofline=roofline), None))
    assert list(fig.data[0].x) == [1.0, 3.0]  # mm_a (5 µs) and mm_c (9 µs), in table order
    assert "the 2 kernel groups with the most time of 3 (each one in roofline.parquet)" in fig.layout.title.text
    monkeypatch.setattr(html, "MAX_ROOFLINE_POINTS", 3)
    fig = widget(html.roofline_figure(SimpleNamespace(roofline=roofline), None))
    assert list(fig.data[0].x) == [1.0, 2.0, 3.0] and "<sup>" not in fig.layout.title.text
    # a copy costed by its bytes alone has no place on the FLOP/s axis: said, with its time
    copy = {**roofline.iloc[0].to_dict(), "name": "Memcpy DtoD", "flops": 0.0, "op_time_us": 2.5}
    copy.update(intensity=0.0, achieved_tflops=0.0, achieved_gbps=4.0)
    fig = widget(html.roofline_figure(SimpleNamespace(roofline=pd.concat([roofline, pd.DataFrame([copy])])), None))
    assert len(fig.data[0].x) == 3
    assert "not drawn: 1 costed groups without FLOPs (Memcpy DtoD; 2.5 µs)" in fig.layout.title.text
    # named by their ops, most time first: a gather is no copy, memset or collective (the line
    # had said "copies, memsets, collectives" whatever the groups were)
    moved = pd.DataFrame([copy] * 5).assign(
        name=["Memcpy DtoD", "indexSelectLargeIndex", "indexSelectSmallIndex", "Memset", "ncclKernel"],
        op_mapping=[None, "aten::index_select", "aten::index_select", "memset", "nccl:all_reduce"],
        op_time_us=[2.5, 3.0, 1.5, 1.0, 4.0],
    )
    fig = widget(html.roofline_figure(SimpleNamespace(roofline=pd.concat([roofline, moved])), None))
    assert (
        "not drawn: 5 costed groups without FLOPs (aten::index_select, nccl:all_reduce, Memcpy DtoD and 1 more ops;"
        " 12.0 µs)" in fig.layout.title.text
    )
    # no device peaks: no bound, said as the table says it (the hover read "(None)")
    fig = widget(html.roofline_figure(SimpleNamespace(roofline=roofline.assign(bound=None)), None))
    assert "(–), headroom" in fig.data[0].text[0] and "None" not in fig.data[0].text[0]


def test_dashboard_dropdowns_and_a_kernels_shapes_are_bounded(monkeypatch) -> None:
    from types import SimpleNamespace

    from kernel_atlas.report import dashboard

    monkeypatch.setattr(dashboard, "MAX_CHOICES", 2)
    kernels = pd.DataFrame(
        {
            "step": [3, 1, 2],
            "rank": [0, 0, 0],
            "stream": [9, 7, 8],
            "category": ["gemm", "gemm", "other"],
            "module": ["Net.a.x", "Net.b", None],
        }
    )
    assert dashboard.choices(kernels) == {
        "step": [1, 2],
        "rank": [0],
        "stream": [7, 8],
        "category": ["gemm", "other"],
        "module": ["Net.a", "Net.b"],
    }
    columns = ["input_dims", "role", "count", "achieved_tflops", "achieved_gbps", "sol_pct", "bound", "headroom_us"]
    roofline = pd.DataFrame({"name": ["k", "other", "k"], "op_time_us": [1.0, 9.0, 5.0], "note": [None] * 3})
    roofline = roofline.assign(**{c: [0] * 3 for c in columns})
    shapes = dashboard.kernel_roofline(SimpleNamespace(roofline=roofline), "k")
    assert shapes["op_time_us"].tolist() == [5.0, 1.0]  # the most time first


def test_the_diff_page_keeps_the_largest_changes_of_each_level(monkeypatch) -> None:
    # 3 levels, at most 5 rows: the op level's one row, then 2 each of the others' largest |changes|
    table = pd.DataFrame(
        {
            "level": ["category"] * 3 + ["op_mapping"] + ["kernel"] * 4,
            "key": ["a", "b", "c", "mm", "k1", "k2", "k3", "k4"],
            "delta_us": [5.0, -1.0, -9.0, 0.0, 3.0, 2.0, 0.5, -7.0],
        }
    )
    assert html._largest_changes(table, 5)["key"].tolist() == ["a", "c", "mm", "k1", "k4"]
    # 6 rows: category's share is 2 of its 3, the kernels take the 3 left
    assert html._largest_changes(table, 6)["key"].tolist() == ["a", "c", "mm", "k1", "k2", "k4"]
    assert html._largest_changes(table, 8) is table


def test_kernels_of_one_short_name_are_tiles_of_their_own() -> None:
    """a100_alexnet_train's `fft2d_r2c_32x32<float, false, 5u, true>` (137 µs) and `<float, false,
    0u, false>` (130 µs) share a short name: they were one 267 µs tile that matched no row of
    timeshare.csv (stop 57's HTML campaign). Two tiles now, each labelled with the short name and its number."""
    from types import SimpleNamespace

    first = "void fft2d_r2c_32x32<float, false, 5u, true>(float2*, float const*, int, int)"
    second = "void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int)"
    kernels = pd.DataFrame(
        {"category": ["gemm/conv"] * 2, "op_mapping": ["conv"] * 2, "name": [first, second], "dur_us": [137.0, 130.0]}
    )
    tree = widget(html.timeshare_figure(SimpleNamespace(kernels=kernels))).data[0]
    op = "gemm/conv/conv"
    leaves = [
        (i, lab, v) for i, lab, v, p in zip(tree.ids, tree.labels, tree.values, tree.parents, strict=True) if p == op
    ]
    assert sorted(v for _, _, v in leaves) == [130.0, 137.0]
    # numbered apart (stop 66, campaign AY 7: siblings of one short name had read alike)
    assert {lab for _, lab, _ in leaves} == {"fft2d_r2c_32x32 [1/2]", "fft2d_r2c_32x32 [2/2]"}
    assert len({i for i, _, _ in leaves}) == 2
