"""Names of call-stack frames: path shortening and `nn.Module` paths."""

from __future__ import annotations

import re

# Everything up to the last of these is install-location noise:
#   /opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py(1743): _call_impl
#   /sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py(2919): run
_PATH_PREFIX = re.compile(r"^[^()]*/(?:site-packages|dist-packages|lib/python3\.\d+|python)/(?=[^()]*\(\d+\): )")
MODULE_PREFIX = "nn.Module: "
STACK_SEPARATOR = " <- "


def short_frame(name: str) -> str:
    """`/usr/lib/python3.10/site-packages/torch/x.py(3): f` → `torch/x.py(3): f`."""
    if "/" in name:
        return _PATH_PREFIX.sub("", name, count=1)
    return name


def module_path(frames: list[str]) -> str | None:
    """`nn.Module` frames of an innermost-first stack, outermost first, joined by '.'."""
    modules = [f[len(MODULE_PREFIX) :] for f in reversed(frames) if f.startswith(MODULE_PREFIX)]
    return ".".join(modules) if modules else None


def is_python_frame(frame: str) -> bool:
    """Python frames as torch.profiler names them (used to rebuild traces from catalogs)."""
    return frame.startswith(("<built-in", MODULE_PREFIX)) or bool(re.search(r"\(\d+\): ", frame))
