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

# The op's args carry the same keys as the kernel's: decoded with the kernel's declaration.
from kernel_atlas.ingest.columns import GpuTable, HostTable, _decode_gpu_args, _GpuArgs, _shared_text

PARAM_COMMS_OP = "record_param_comms"
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
    lacking = rows[(gpu.seq[rows] < 0) | np.array([gpu.process_group[r] is None for r in rows.tolist()], dtype=bool)]
    decoded: dict[int, _GpuArgs] = {}
    strings: dict[str, str] = {}
    changed = 0
    for r in lacking.tolist():
        op = int(cpu_op_id[r])
        if op not in decoded:
            decoded[op] = _decode_gpu_args(host.args[op])
        args = decoded[op]
        filled = False
        for name in _TEXT_FIELDS:
            column, value = getattr(gpu, name), getattr(args, name)
            if column[r] is None and value is not None:
                column[r], filled = _shared_text(value, strings), True
        for name in _INT_FIELDS:
            column, value = getattr(gpu, name), getattr(args, name)
            if column[r] < 0 and value is not None:
                column[r], filled = value, True
        changed += filled
    return changed
