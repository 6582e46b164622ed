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

from kernel_atlas.ingest.columns import CPU_OP, PYTHON, HostTable
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
    """Builds one chain's frames: `add` each range innermost first, then `frames()`.

    A trace may hold both forms (PyTorch 1.11 wrote `Call stack` strings and `python_function`
    ranges; a TorchScript op still records its JIT stack today): a recorded frame that is also
    one of the chain's Python ranges is that range, not woven a second time; the frames left
    (the JIT's, or all of them where no ranges were recorded) go where the recorded stack says,
    and at the latest just inside the innermost Python range enclosing the op — never outside
    the program's outermost frame."""

    def __init__(self, host: HostTable, stacks: list[list[str] | None] | None):
        self.host, self.stacks = host, stacks
        self.chain: list[tuple[int, str]] = []

    def add(self, node: int, frame: str) -> None:
        self.chain.append((node, frame))

    def frames(self) -> list[str]:
        python = self.host.family[[node for node, _ in self.chain]] == PYTHON if self.chain else []
        ranges = {frame for (_, frame), is_python in zip(self.chain, python, strict=True) if is_python}
        out: list[str] = []
        pending: list[str] = []  # the last recorded stack, its frames not yet placed
        for (node, frame), is_python in zip(self.chain, python, strict=True):
            stack = self._stack(node)
            if stack is not None:
                stack = [f for f in stack if f not in ranges] if ranges else stack
                extra = len(pending) - len(stack)
                out.extend(pending[: max(extra, 0)])
                pending = stack
            elif is_python:  # the Python frame the op ran in: what the op recorded lies inside it
                out.extend(pending)
                pending = []
            out.append(frame)
        return [*out, *pending]

    def _stack(self, node: int) -> list[str] | None:
        if self.stacks is None or self.host.family[node] != CPU_OP:
            return None
        params = int(self.host.params[node])
        return self.stacks[params] if params >= 0 else None
