"""Recorded arguments (`kernel_atlas.ingest.recorded.Arg`) as replay needs them: their torch
dtypes and the bytes their tensors take (their values are made by `replay.values`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from kernel_atlas.ingest.recorded import Arg, dtypes


class NotReplayable(Exception):
    """This call cannot be replayed here, and why."""


def torch_dtype(name: str):  # -> torch.dtype
    import torch

    spec = dtypes().get(name)
    if spec is None or not hasattr(torch, spec.torch):
        raise NotReplayable(f"unknown dtype {name!r}")
    return getattr(torch, spec.torch)


def nbytes(args: tuple[Arg, ...]) -> int:
    """Bytes the recorded tensors take (tensor-list elements, whose dtype is not recorded: 4)."""
    size = {a.dtype: dtypes()[a.dtype].bytes if a.dtype in dtypes() else 4 for a in args}
    return sum(math.prod(shape) * size[a.dtype] for a in args for shape in a.shapes)


def counting_allocations(limit: float, refusal: Callable[[int], str]) -> Any:  # -> a TorchFunctionMode
    """A mode under which the bytes of the tensors torch calls return are counted (`peak`: the most
    they held at once, a storage counting from its allocation until it is freed; tensors made
    before the mode, views and in-place results are not new) and NotReplayable(`refusal(peak)`)
    is raised once they pass `limit`, before anything more is allocated. What a replay builder
    makes is known only as it makes it: a paged-attention builder allocates the pool its assumed
    lengths need, not the recorded 121 GiB KV pool, and a scaled replay a fraction of its
    recorded tensors. A function mode, not a dispatch mode: entering a dispatch mode imports
    sympy and 880 modules more (140 MiB of resident memory, paid by the first replay)."""
    import weakref

    import torch
    from torch.overrides import TorchFunctionMode

    def tensors(value: Any) -> Iterator[Any]:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, list | tuple):
            for item in value:
                yield from tensors(item)
        elif isinstance(value, dict):
            for item in value.values():
                yield from tensors(item)

    class Allocations(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.live = 0
            self.peak = 0
            self.storages: dict[int, int] = {}  # id of a live storage seen → the bytes counted for it

        def _see(self, value: Any, new: bool) -> None:
            try:
                storage = value.untyped_storage() if value.device.type != "meta" else None
            except (RuntimeError, NotImplementedError):  # sparse, nested: no one storage
                storage = None
            if storage is None or id(storage) in self.storages:
                return
            size = storage.nbytes() if new else 0
            self.storages[id(storage)] = size
            self.live += size
            # torch keeps a storage's Python object while the storage lives: this runs when it is freed
            weakref.finalize(storage, self._freed, id(storage))

        def _freed(self, key: int) -> None:
            self.live -= self.storages.pop(key, 0)

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            for value in tensors((args, kwargs)):
                self._see(value, new=False)
            out = func(*args, **kwargs)
            for value in tensors(out):
                self._see(value, new=True)
            self.peak = max(self.peak, self.live)
            if self.peak > limit:
                raise NotReplayable(refusal(self.peak))
            return out

    return Allocations()


def size_text(size: float) -> str:
    """A byte count in the unit that shows it (GiB, MiB, KiB, bytes), with 3 significant digits:
    `0.0 GiB` had read as no more than a limit of 1e-06 GiB."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            value = size / (1 << shift)
            return f"{value:,.{max(0, 2 - int(math.log10(value)))}f} {unit}"
    return f"{size:.0f} bytes"
