"""Replay implementations for non-ATen kernels of serving engines, found by the kernel's label.

Each builder is registered for label rule ids (a kernel family of catalogs/rules.toml, e.g.
`triton-fused-moe`) and/or op_mappings, and turns a replay target (its recorded or catalog
arguments, `runner.Target.args`) into a `Case`: the kernel to time, its implementation label and
a check against a plain-torch reference. Lookup: the label's rule first, then its op_mapping. A
key takes one builder; a second registration is refused. Relabelling a kernel in rules.toml
changes its replay with no second list to update.
"""

from __future__ import annotations

from collections.abc import Callable

from kernel_atlas.classify.classifier import rule_id
from kernel_atlas.ingest.recorded import shape_refusal
from kernel_atlas.replay.aten import Case
from kernel_atlas.replay.inputs import NotReplayable

Builder = Callable[..., Case]
REGISTRY: dict[tuple[str, str], Builder] = {}  # ("rule" | "op", key) → builder


def register(*, rules: tuple[str, ...] = (), ops: tuple[str, ...] = ()) -> Callable[[Builder], Builder]:
    def wrap(builder: Builder) -> Builder:
        for kind, keys in (("rule", rules), ("op", ops)):
            for key in keys:
                if (kind, key) in REGISTRY:
                    raise ValueError(f"{kind} {key!r} already has a replay builder ({REGISTRY[kind, key].__name__})")
                REGISTRY[kind, key] = builder
        return builder

    return wrap


def find_implementation(target, device: str, scale: float = 1.0) -> Case | None:  # target: runner.Target
    """The builder's case for `target`; refused (NotReplayable, ATen's reason) where a recorded
    tensor's shape is impossible or not recorded: builders read the shapes that are there
    (`tensor_shapes`), and a call with one missing had been replayed as another problem — a
    [1024, 2] top-k tensor taken for the hidden states, a (1024, 7168) input made up."""
    load()
    for key in (("rule", rule_id(target.label_rule) or ""), ("op", target.op_mapping)):
        if key in REGISTRY:
            refusal = shape_refusal(target.args)
            if refusal is not None:
                raise NotReplayable(refusal)
            return REGISTRY[key](target, device, scale)
    return None


_LOADED = False


def load() -> None:
    """Import the builder modules (they register themselves); without triton only ATen replays."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    try:
        from kernel_atlas.replay.kernels import (  # noqa: F401
            attention,
            ep,
            flashinfer_ops,
            fused_moe,
            gemm,
            norms,
            serving,
        )
    except ImportError as exc:  # triton missing: ATen replay still works
        if "triton" not in str(exc):
            raise
