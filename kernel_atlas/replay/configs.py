"""Launch configurations of the Triton kernels replay re-implements: the traced one where the
trace says enough, else the best of the kernel's usual configurations.

A kernel's spec in `catalogs/replay.toml` [triton.<kernel>] lists its usual configurations
(`configs`, from the serving engines' tuned tables and defaults), the values its grid-shaping
parameters take (`values`) and a small configuration for the Triton interpreter on the CPU.
The trace records each launch's `grid` and `block`: the block gives `num_warps` (threads / warp
size), the grid the tile sizes that produce it for the recorded problem (the kernel module
supplies the grid formula). Parameters the grid and block do not show (K tile, group size,
stages) are autotuned on a GPU over the usual configurations; the CPU takes the first one.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kernel_atlas.core.paths import read_toml

LAUNCH = ("num_warps", "num_stages")
MAX_AUTOTUNE = 16  # configurations timed at most per replay (each compiles once on the GPU)


@dataclass(frozen=True)
class Config:
    meta: tuple[tuple[str, int], ...]  # constexpr parameters, in the spec's order
    num_warps: int
    num_stages: int

    def __getitem__(self, key: str) -> int:
        return dict(self.meta)[key]

    def kwargs(self) -> dict[str, int]:
        """Keyword arguments of a Triton launch."""
        return {**dict(self.meta), "num_warps": self.num_warps, "num_stages": self.num_stages}

    def text(self) -> str:
        launch = (("num_warps", self.num_warps), ("num_stages", self.num_stages))
        return " ".join(f"{k}={v}" for k, v in (*self.meta, *launch))

    def with_(self, **changes: int) -> Config:
        meta = tuple((k, changes.get(k, v)) for k, v in self.meta)
        return Config(meta, changes.get("num_warps", self.num_warps), changes.get("num_stages", self.num_stages))


def _config(raw: dict[str, int]) -> Config:
    meta = tuple((k, int(v)) for k, v in raw.items() if k not in LAUNCH)
    return Config(meta, int(raw.get("num_warps", 4)), int(raw.get("num_stages", 1)))


@dataclass(frozen=True)
class Spec:
    configs: tuple[Config, ...]
    values: dict[str, tuple[int, ...]]  # values of the grid-shaping parameters
    interpreter: Config


@cache
def spec(kernel: str) -> Spec:
    raw = read_toml("replay.toml")["triton"][kernel]
    return Spec(
        tuple(_config(c) for c in raw["configs"]),
        {k: tuple(int(x) for x in v) for k, v in raw.get("values", {}).items()},
        _config(raw["interpreter"]),
    )


def _dims(text: str | None) -> tuple[int, ...] | None:
    try:
        value = json.loads(text) if text else None
    except ValueError:
        return None
    if isinstance(value, list) and value and all(isinstance(x, int) and x > 0 for x in value):
        return tuple(value)
    return None


def _volume(text: str | None) -> int | None:
    """x·y·z of a recorded "[x, y, z]" (a grid or a block)."""
    dims = _dims(text)
    return None if dims is None else math.prod(dims[:3])


def traced_programs(target: Any) -> int | None:
    """The number of programs (x·y·z) of the traced launch."""
    return _volume(getattr(target, "grid", None))


def traced_warps(target: Any, device: str) -> int | None:
    """num_warps of the traced launch (threads per block / warp size: 64 on AMD GPUs)."""
    threads = _volume(getattr(target, "block", None))
    if threads is None:
        return None
    warp = 64 if _hip(device) else 32
    return threads // warp if threads % warp == 0 and threads >= warp else None


def _hip(device: str) -> bool:
    if not device.startswith("cuda"):
        return False
    import torch

    return getattr(torch.version, "hip", None) is not None


@dataclass(frozen=True)
class Choice:
    candidates: tuple[Config, ...]  # the configurations to run (more than one: autotune them)
    source: str  # where they came from


def candidates(kernel: str, target: Any, device: str, programs: Callable[[Config], int] | None = None) -> Choice:
    """The configurations consistent with the traced launch (else the usual ones); on the CPU
    (Triton interpreter) one: the traced tiling where known, else the interpreter's."""
    kernel_spec = spec(kernel)
    traced = traced_programs(target) if programs is not None else None
    warps = traced_warps(target, device)
    pool = list(kernel_spec.configs)
    notes = []
    if traced is not None and programs is not None:
        names = list(kernel_spec.values)
        tilings = [
            dict(zip(names, combo, strict=True))
            for combo in itertools.product(*(kernel_spec.values[n] for n in names))
            if programs(pool[0].with_(**dict(zip(names, combo, strict=True)))) == traced
        ]
        if tilings:
            pool = [c.with_(**tiling) for tiling in tilings for c in pool]
            shown = ", ".join(" ".join(f"{k}={v}" for k, v in t.items()) for t in tilings)
            notes.append(f"{shown} from the traced grid ({traced} programs)")
        else:
            notes.append(f"no usual tiling gives the traced grid ({traced} programs)")
    if warps is not None:
        pool = [c.with_(num_warps=warps) for c in pool]
        notes.append(f"num_warps={warps} from the traced block")
    pool = list(dict.fromkeys(pool))  # unique, in order
    traced_text = "; ".join(notes)
    if not device.startswith("cuda"):
        if traced_text and "from the traced grid" in traced_text:
            return Choice((pool[0],), f"{traced_text}; the rest the first usual config (no autotuning on the CPU)")
        interpreter = kernel_spec.interpreter
        return Choice((interpreter,), "interpreter config (a GPU autotunes over the usual configs)")
    if len(pool) == 1:
        return Choice(tuple(pool), traced_text or "the only usual config")
    shown = f"{len(pool)}" if len(pool) <= MAX_AUTOTUNE else f"the first {MAX_AUTOTUNE} of {len(pool)}"
    text = f"autotuned over {shown} configs" + (f" ({traced_text})" if traced_text else "")
    return Choice(tuple(pool[:MAX_AUTOTUNE]), text)


def pick(
    choice: Choice, make_run: Callable[[Config], Callable[[], Any]], device: str
) -> tuple[Config, Callable[[], Any], str]:
    """The fastest candidate (a short timing of each on a GPU), its run callable and the text
    that names it and where it came from."""
    if len(choice.candidates) == 1:
        config = choice.candidates[0]
        return config, make_run(config), f"{config.text()} ({choice.source})"
    from kernel_atlas.replay.timing import measure

    best: tuple[float, Config, Callable[[], Any]] | None = None
    for config in choice.candidates:
        run = make_run(config)
        try:
            timing = measure(run, device, warmup_ms=2.0, min_reps=5, max_reps=20, budget_s=0.02, graphs=False)
        except RuntimeError:  # e.g. out of shared memory for this tile size on this GPU
            continue
        if best is None or timing.median_us < best[0]:
            best = (timing.median_us, config, run)
    if best is None:
        raise RuntimeError(f"none of {len(choice.candidates)} configs launched")
    _, config, run = best
    return config, run, f"{config.text()} ({choice.source})"
