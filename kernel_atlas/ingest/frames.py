"""Names of call-stack frames: stable short forms and `nn.Module` paths.

Every launcher and call-stack frame that ingest writes goes through `short_frame`, so that the same
frame has the same name in every run:

    /opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py(1743): _call_impl
        → torch/nn/modules/module.py(1743): _call_impl            (install prefix removed)
    <built-in method rmsnorm of pybind11_builtins.pybind11_detail_function_record_v1_… object at 0x786a5118d930>
        → rmsnorm (pybind11)                                       (memory address removed)
    <built-in method inplace_fused_experts of PyCapsule object at 0x7f88b221fcf0>
        → inplace_fused_experts (PyCapsule)
    <function forward at 0x7f88b221fcf0>  → <function forward>
"""

from __future__ import annotations

import re

# Everything up to the last of these is install-location noise:
#   /opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py(1743): _call_impl
#   /sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py(2919): run
_PATH_PREFIX = re.compile(r"^[^()]*/(?:site-packages|dist-packages|lib/python3\.\d+|python)/(?=[^()]*\(\d+\): )")
# `<built-in method NAME of OWNER object at 0xADDR>`: Python's repr of a bound C function.
_BUILTIN_METHOD = re.compile(r"^<built-in method (?P<name>\S*) of (?P<owner>.+?) object at 0x[0-9a-fA-F]+>$")
_PYBIND11_OWNER = "pybind11_builtins."
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# The stable form of a built-in method: `NAME (OWNER)`, OWNER a dotted Python name.
_STABLE_BUILTIN = re.compile(r"^\S+ \((?:[A-Za-z_][\w.]*)\)$")
MODULE_PREFIX = "nn.Module: "
STACK_SEPARATOR = " <- "


def stable_name(name: str) -> str:
    """A frame name without memory addresses (see the module docstring)."""
    if " at 0x" not in name:
        return name
    method = _BUILTIN_METHOD.match(name)
    if method:
        owner = method["owner"]
        owner = "pybind11" if owner.startswith(_PYBIND11_OWNER) else owner
        return f"{method['name'] or '<unnamed>'} ({owner})"
    return _ADDRESS.sub("", name)


def short_frame(name: str) -> str:
    """The stable short form of a frame as ingest writes it: install prefix and memory
    addresses removed (`/usr/lib/python3.10/site-packages/torch/x.py(3): f` → `torch/x.py(3): f`)."""
    if "/" in name:
        name = _PATH_PREFIX.sub("", name, count=1)
    return stable_name(name)


def innermost_modules(path: str, most: int) -> str:
    """An `nn.Module` path (outermost first) cut to its innermost `most` characters, the cut
    marked at its start with `…`; credentials redacted before the cut would hide them."""
    if len(path) <= most:
        return path
    from kernel_atlas.core.redact import redact_text

    path = redact_text(path)
    return "…" + path[len(path) - most + 1 :] if len(path) > most else path


def module_path(frames: list[str]) -> str | None:
    """`nn.Module` frames of an innermost-first stack, outermost first, joined by '.'."""
    modules = [f[len(MODULE_PREFIX) :] for f in reversed(frames) if f.startswith(MODULE_PREFIX)]
    return ".".join(modules) if modules else None


def is_python_frame(frame: str) -> bool:
    """Python frames as torch.profiler names them, or in their stable form (used to rebuild
    traces from catalogs)."""
    return (
        frame.startswith(("<built-in", MODULE_PREFIX))
        or bool(re.search(r"\(\d+\): ", frame))
        or bool(_STABLE_BUILTIN.match(frame))
    )
