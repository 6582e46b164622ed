"""Forward op ↔ backward node, linked by autograd's sequence number.

PyTorch records on every forward CPU op the autograd `Sequence number` it ran under (and `Fwd
thread id` 0), and on every backward node (`CudnnConvolutionBackward`, `autograd::engine::
evaluate_function: ConvolutionBackward0`, …) the sequence number and the forward thread's id of
the op that created it. One sequence number thus names a forward op and its backward node, and
each may need what only the other recorded: a backward kernel (`aten::cudnn_convolution_backward_
weight`) does not record the weight's shape its forward op did, a forward op without `Concrete
Inputs` does not record the output shape its backward node receives as grad_output.

Per launch (its innermost CPU op, `cpu_op_idx`):

* its autograd op: the innermost enclosing backward node, else the innermost enclosing forward
  op with a sequence number;
* its partner: for a backward node, the forward op of that sequence number that started last
  (the innermost of the nested `aten::conv2d` > `aten::convolution` > … > `aten::cudnn_convolution`,
  the one that created the node; earlier ops sharing the number, e.g. an `aten::add` before a
  batch norm, did not); for a forward op, the innermost (last started) backward node of that
  number.

A sequence number counts per forward thread, and forward ops do not record which thread's
counter they read: a number whose forward ops ran on several threads, or whose backward nodes
name several forward threads, is ambiguous and links nothing. Everything is joins and group-bys
over the ops with a sequence number; only the distinct partner ops' summaries are built one by one.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from kernel_atlas.ingest.columns import CPU_OP, HostTable
from kernel_atlas.ingest.nesting import first_matching


def autograd_links(host: HostTable, parent: np.ndarray, cpu_op_idx: np.ndarray) -> tuple[np.ndarray, pd.Categorical]:
    """(the sequence number of each launch's autograd op, -1 none; its partner as JSON text
    `{"op": name, "seq": n, "backward": bool, "dims": …, "types": …}`, missing when none)."""
    n = len(cpu_op_idx)
    none = pd.Categorical.from_codes(np.full(n, -1), categories=pd.Index([], dtype=object))
    numbered = (host.family == CPU_OP) & (host.seq_nr >= 0)
    if not numbered.any() or n == 0:
        return np.full(n, -1, dtype=np.int64), none
    backward = numbered & (host.fwd_tid > 0)
    forward = numbered & ~backward
    own = first_matching(cpu_op_idx, parent, backward)
    own = np.where(own >= 0, own, first_matching(cpu_op_idx, parent, forward))
    seq = np.where(own >= 0, host.seq_nr[np.maximum(own, 0)], -1)

    rows = np.flatnonzero(numbered)
    ops = pd.DataFrame(
        {
            "row": rows,
            "seq": host.seq_nr[rows],
            "backward": backward[rows],
            "thread": host.thread[rows],
            "fwd_tid": host.fwd_tid[rows],
            "ts": host.ts[rows],
        }
    )
    # the last-started op of each (sequence number, side), and whether the number is ambiguous
    latest = ops.sort_values(["ts", "row"], kind="stable").groupby(["seq", "backward"], sort=False).tail(1)
    threads = ops[~ops["backward"]].groupby("seq")["thread"].nunique()
    forward_threads = ops[ops["backward"]].groupby("seq")["fwd_tid"].nunique()
    ambiguous = np.union1d(threads.index[threads > 1], forward_threads.index[forward_threads > 1])

    # each launch's autograd op: the other side's latest op of its number (looked up on the sorted
    # (number, side) keys, not row by row), unless the number is ambiguous
    used = np.unique(own[own >= 0])
    numbers = np.unique(latest["seq"].to_numpy(np.int64))  # sorted: a number's code is its place here
    keys = _side_key(numbers, latest["seq"].to_numpy(np.int64), latest["backward"].to_numpy(bool))
    order = np.argsort(keys, kind="stable")
    keys, partners = keys[order], latest["row"].to_numpy(np.int64)[order]
    used_numbers = host.seq_nr[used]  # each among `numbers` (a launch's autograd op is a numbered op)
    wanted = _side_key(numbers, used_numbers, ~backward[used])
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    found = (keys[at] == wanted) & ~np.isin(used_numbers, ambiguous)
    rows, partner = used[found], partners[at[found]]
    if not len(rows):
        return seq, none
    distinct_partners = np.unique(partner)
    parsed: dict[int, tuple[object, object]] = {}  # shape code → its dims and types, parsed once
    texts = [_summary(host, p, bool(backward[p]), parsed) for p in distinct_partners.tolist()]
    distinct = sorted(set(texts))
    position = {text: i for i, text in enumerate(distinct)}
    text_code = np.array([position[text] for text in texts], dtype=np.int64)
    code_of_row = np.full(len(host.ts) + 1, -1, dtype=np.int64)  # the last: a launch without one
    code_of_row[rows] = text_code[np.searchsorted(distinct_partners, partner)]
    return seq, pd.Categorical.from_codes(code_of_row[own], categories=distinct)


def _side_key(numbers: np.ndarray, number: np.ndarray, is_backward: np.ndarray) -> np.ndarray:
    """One integer per (sequence number, side): the number's place among the sorted `numbers`
    (any int64 a trace holds, with no overflow) twice, plus the side."""
    return np.searchsorted(numbers, number) * 2 + is_backward.astype(np.int64)


def _summary(host: HostTable, row: int, is_backward: bool, parsed: dict[int, tuple[object, object]]) -> str:
    code = int(host.shape[row])
    if code not in parsed:
        dims, types = (host.shapes[code][0], host.shapes[code][1]) if code >= 0 else (None, None)
        parsed[code] = (json.loads(dims) if dims else None, json.loads(types) if types else None)
    dims, types = parsed[code]
    summary = {
        "op": host.names[host.name_code[row]],
        "seq": int(host.seq_nr[row]),
        "backward": is_backward,
        "dims": dims,
        "types": types,
    }
    return json.dumps(summary, separators=(",", ":"))
