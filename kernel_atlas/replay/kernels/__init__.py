"""Replay implementations for non-ATen kernels of serving engines, chosen by kernel name.

Each entry maps a kernel-name pattern to a builder that turns a replay target (recorded or
catalog shapes) into a `Case`: the kernel to time, its implementation label and a check
against a plain-torch reference.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kernel_atlas.replay.aten import Case

Builder = Callable[..., Case]
REGISTRY: list[tuple[re.Pattern[str], Builder]] = []


def register(pattern: str) -> Callable[[Builder], Builder]:
    def wrap(builder: Builder) -> Builder:
        REGISTRY.append((re.compile(pattern), builder))
        return builder

    return wrap


def find_implementation(target, device: str, scale: float = 1.0) -> Case | None:  # target: runner.Target
    _load()
    for pattern, builder in REGISTRY:
        if pattern.search(target.kernel):
            return builder(target, device, scale)
    return None


_LOADED = False


def _load() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    try:
        from kernel_atlas.replay.kernels import attention, ep, flashinfer_ops, fused_moe, norms, serving  # noqa: F401
    except ImportError as exc:  # triton missing: ATen replay still works
        if "triton" not in str(exc):
            raise
