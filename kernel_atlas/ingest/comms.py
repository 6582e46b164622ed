"""Collective fields of NCCL/RCCL kernels, completed from the `record_param_comms` op that
launched them.

PyTorch records a collective's parameters on a `record_param_comms` CPU op; Kineto copies
them onto the kernel, but which fields it copies depends on the version (the sequence number
`Seq` reached kernels only in 2026, process-group fields in 2023). A kernel keeps what it
recorded itself; what it lacks is taken from its launching op when that op is
`record_param_comms`.
"""

from __future__ import annotations

import msgspec
import numpy as np

from kernel_atlas.ingest.columns import GpuTable, HostTable

PARAM_COMMS_OP = "record_param_comms"


class _CommArgs(msgspec.Struct, gc=False):
    collective: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    msg_dtype: str | None = msgspec.field(default=None, name="dtype")
    process_group: str | None = msgspec.field(default=None, name="Process Group Name")
    process_group_desc: str | None = msgspec.field(default=None, name="Process Group Description")
    process_group_ranks: str | list[int] | None = msgspec.field(default=None, name="Process Group Ranks")
    seq: int | None = msgspec.field(default=None, name="Seq")


_COMM_ARGS = msgspec.json.Decoder(_CommArgs)
_TEXT_FIELDS = ("collective", "msg_dtype", "process_group", "process_group_desc", "process_group_ranks")
_INT_FIELDS = ("in_nelems", "out_nelems", "group_size", "seq")


def _decode(raw: msgspec.Raw | None) -> _CommArgs | None:
    if not raw:
        return None
    try:
        return _COMM_ARGS.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def complete_collectives(gpu: GpuTable, host: HostTable, cpu_op_id: np.ndarray) -> int:
    """Fill the collective fields a kernel lacks from its launching `record_param_comms` op
    (`cpu_op_id`: index of the launching CPU op in `host`, -1 none). Returns the rows changed."""
    if PARAM_COMMS_OP not in host.names or not len(gpu):
        return 0
    code = host.names.index(PARAM_COMMS_OP)
    launched = np.flatnonzero(cpu_op_id >= 0)
    rows = launched[host.name_code[cpu_op_id[launched]] == code]
    lacking = rows[(gpu.seq[rows] < 0) | np.array([gpu.process_group[r] is None for r in rows.tolist()], dtype=bool)]
    decoded: dict[int, _CommArgs | None] = {}
    changed = 0
    for r in lacking.tolist():
        op = int(cpu_op_id[r])
        if op not in decoded:
            decoded[op] = _decode(host.args[op])
        args = decoded[op]
        if args is None:
            continue
        before = changed
        for name in _TEXT_FIELDS:
            value = getattr(args, name)
            column = getattr(gpu, name)
            if column[r] is None and value is not None:
                column[r] = value if isinstance(value, str) else "[" + ", ".join(map(str, value)) + "]"
                changed = before + 1
        for name in _INT_FIELDS:
            value = getattr(args, name)
            column = getattr(gpu, name)
            if column[r] < 0 and value is not None:
                column[r] = value
                changed = before + 1
    return changed
