"""Collective fields of NCCL/RCCL kernels, completed from the `record_param_comms` op that
launched them.

PyTorch records a collective's parameters on a `record_param_comms` CPU op; Kineto copies
them onto the kernel, but which fields it copies depends on the version (the sequence number
`Seq` reached kernels only in 2026, process-group fields in 2023). A kernel keeps what it
recorded itself; what it lacks is taken from its launching op when that op is
`record_param_comms`.
"""

from __future__ import annotations

import numpy as np

from kernel_atlas.ingest.columns import GpuTable, HostTable, set_rows

PARAM_COMMS_OP = "record_param_comms"
# the op records these under the same keys as the kernel (`events.OpParams`)
_TEXT_FIELDS = ("collective", "msg_dtype", "process_group", "process_group_desc", "process_group_ranks")
_INT_FIELDS = ("in_nelems", "out_nelems", "group_size", "seq")


def complete_collectives(gpu: GpuTable, host: HostTable, cpu_op_id: np.ndarray) -> int:
    """Fill the collective fields a kernel lacks from its launching `record_param_comms` op
    (`cpu_op_id`: index of the launching CPU op in `host`, -1 none). Returns the rows changed."""
    if PARAM_COMMS_OP not in host.names or not len(gpu):
        return 0
    code = host.names.index(PARAM_COMMS_OP)
    launched = np.flatnonzero(cpu_op_id >= 0)
    rows = launched[host.name_code[cpu_op_id[launched]] == code]
    lacking = rows[(gpu.seq[rows] < 0) | (gpu.process_group.codes[rows] < 0)]
    params = host.params[cpu_op_id[lacking]]
    lacking, params = lacking[params >= 0], params[params >= 0]  # ops that record no parameters give none
    recorded = [host.param_sets[k] for k in params.tolist()]
    filled = np.zeros(len(lacking), dtype=bool)
    for name in _TEXT_FIELDS:
        column = getattr(gpu, name)
        values = [getattr(op, name) for op in recorded]
        want = (column.codes[lacking] < 0) & np.array([v is not None for v in values], dtype=bool)
        if want.any():
            setattr(gpu, name, set_rows(column, lacking[want], [v for v, w in zip(values, want, strict=True) if w]))
            filled |= want
    for name in _INT_FIELDS:
        column = getattr(gpu, name)
        values = np.array([getattr(op, name) for op in recorded], dtype=np.int64)
        want = (column[lacking] < 0) & (values >= 0)
        column[lacking[want]] = values[want]
        filled |= want
    return int(filled.sum())
