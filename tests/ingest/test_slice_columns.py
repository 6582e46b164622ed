"""A decoded slice's CPU-op parameters, worked by hand: one code per distinct set, -1 for an op
that records none of them."""

from __future__ import annotations

import json

from kernel_atlas.ingest.events import decode_slice


def _op(ts: float, **args: object) -> dict[str, object]:
    return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": ts, "dur": 1.0, "args": args}


def test_ops_share_a_code_per_distinct_parameter_set_and_none_recorded_is_minus_one() -> None:
    events = [
        _op(0.0),  # nothing recorded
        _op(1.0, **{"Call stack": "a.py(1): f;b.py(2): g"}),
        _op(2.0, **{"In msg nelems": -5}),  # a count below zero records nothing
        _op(3.0, **{"Call stack": "a.py(1): f;b.py(2): g"}),  # the second op's set again
        _op(4.0, **{"Collective name": "allreduce", "In msg nelems": 4, "Group size": 2}),
        _op(5.0, **{"Seq": 0}),  # a sequence number of 0 is recorded
    ]
    part = decode_slice(json.dumps(events).encode())
    assert part.params.tolist() == [-1, 0, -1, 0, 1, 2]
    stack, collective, seq = part.param_sets
    assert stack.call_stack == "a.py(1): f;b.py(2): g" and stack.in_nelems == -1 and stack.collective is None
    assert (collective.collective, collective.in_nelems, collective.group_size) == ("allreduce", 4, 2)
    assert seq.seq == 0 and seq.call_stack is None
