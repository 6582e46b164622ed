"""Python stacks recorded as `Call stack` strings on CPU ops (PyTorch 1.8-1.10), woven into the
range chains that `link` turns into call stacks.

Before `python_function` events existed, each CPU op recorded the Python stack current when it
ran, as one string of frames joined by `;`, innermost first:
`torch/nn/modules/conv.py(443): forward;torch/nn/modules/module.py(1051): _call_impl;train.py(54): <module>`.
The frames an op adds to the stack of the next enclosing op that recorded one are the Python
frames between the two ops; that is where they go in the chain, as if they had been ranges:
`cudaLaunchKernel <- aten::cudnn_convolution <- aten::conv2d <- torch/nn/modules/conv.py(443): forward <- …`.
No module names: those traces record no `nn.Module` frames (`module` stays null).
"""

from __future__ import annotations

import numpy as np

from kernel_atlas.ingest.columns import CPU_OP, HostTable
from kernel_atlas.ingest.frames import short_frame


def recorded_stacks(host: HostTable) -> list[list[str] | None] | None:
    """Short frames of each parameter set's `Call stack` (None: not recorded); None when no
    op of the trace recorded one."""
    stacks = [None if p.call_stack is None else p.call_stack for p in host.param_sets]
    if all(s is None for s in stacks):
        return None
    return [None if s is None else [short_frame(f) for f in s.split(";") if f] for s in stacks]


def stack_key(host: HostTable, nodes: np.ndarray) -> np.ndarray:
    """Per node, a key that tells apart CPU ops of one name with different recorded stacks."""
    is_op = host.family[nodes] == CPU_OP
    return np.where(is_op, host.params[nodes] + 1, 0).astype(np.uint64) << np.uint64(32)


class StackWeaver:
    """Builds one chain's frames: `add` each range innermost first, then `frames()`."""

    def __init__(self, host: HostTable, stacks: list[list[str] | None] | None):
        self.host, self.stacks = host, stacks
        self.out: list[str] = []
        self.pending: list[str] = []  # the last recorded stack, its frames not yet placed

    def add(self, node: int, frame: str) -> None:
        stack = self._stack(node)
        if stack is not None:
            extra = len(self.pending) - len(stack)
            self.out.extend(self.pending[: max(extra, 0)])
            self.pending = stack
        self.out.append(frame)

    def frames(self) -> list[str]:
        return [*self.out, *self.pending]

    def _stack(self, node: int) -> list[str] | None:
        if self.stacks is None or self.host.family[node] != CPU_OP:
            return None
        params = int(self.host.params[node])
        return self.stacks[params] if params >= 0 else None
