"""CUDA-graph kernels matched exactly to their captured launch through graph node ids.

Nsight Systems records, per graph-launched activity, its `graphNodeId`, and in
CUDA_GRAPH_NODE_EVENTS when each node was created (inside the captured `cudaLaunchKernel` on
the capturing thread, during stream capture) and which node an instantiated node was cloned
from (`nsys.py` turns each creation into a zero-length host range and follows the clones). A
replayed kernel whose node leads to a creation gets the launcher, CPU op, shapes, stack and
module of the runtime call the node was created in (else of the creation itself): an exact
match, made before and instead of the alignment of `capture.py`, which then sees only the
replayed kernels left.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kernel_atlas.ingest.capture import ATTACHED, LINK_GRAPH_NODE  # capture.py leaves such launches unaligned
from kernel_atlas.ingest.columns import RUNTIME, HostTable, set_rows
from kernel_atlas.ingest.link import LinkedColumns, describe_launches


def attach_graph_nodes(host: HostTable, linked: LinkedColumns, node_creation: np.ndarray) -> np.ndarray:
    """Give graph-replayed activities whose node creation is known (`node_creation`: host row per
    activity, -1 none) that creation's context, in place on `linked`; each (graph launch, op
    call) gets a new `cpu_op_id`. Returns the rows matched."""
    if len(node_creation) != len(linked.graph_launch):
        return np.empty(0, np.int64)
    rows = np.flatnonzero(linked.graph_launch & (node_creation >= 0))
    if not len(rows):
        return rows
    ctx = describe_launches(host, _captured_launch(host, linked, node_creation[rows]))
    for column in ATTACHED:
        setattr(linked, column, set_rows(getattr(linked, column), rows, getattr(ctx, column)))
    op = np.asarray(ctx.cpu_op_idx, dtype=np.int64)
    launch = np.asarray(linked.launch_idx, dtype=np.int64)[rows] if len(linked.launch_idx) else np.full(len(rows), -1)
    calls = pd.MultiIndex.from_arrays([launch, op]).factorize()[0]  # one op call per replay of it
    first_id = int(linked.cpu_op_id.max(initial=-1)) + 1
    linked.cpu_op_id[rows] = np.where(op >= 0, first_id + calls, -1)
    linked.link = set_rows(linked.link, rows, [LINK_GRAPH_NODE] * len(rows))
    return rows


def _captured_launch(host: HostTable, linked: LinkedColumns, creation: np.ndarray) -> np.ndarray:
    """The runtime call a node was created in (the captured `cudaLaunchKernel`), else the creation."""
    parent = linked.host_parent[creation] if len(linked.host_parent) else np.full(len(creation), -1)
    in_call = (parent >= 0) & (host.family[np.maximum(parent, 0)] == RUNTIME)
    return np.where(in_call, parent, creation)
