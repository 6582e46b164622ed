"""FLOPs and bytes of one op call from its recorded inputs: a registry of small formulas, one
module per op family (`base` holds the registry, the call model and the helpers they share).

Importing this package registers every family's formulas; `cost_of(call)` then looks one up
(see `base`). A new family is a module here, imported below.
"""

from kernel_atlas.roofline.costs import (  # noqa: F401  (each registers its formulas)
    attention,
    conv,
    gemm,
    memory,
    moe,
    pointwise,
    reductions,
    training,
)
from kernel_atlas.roofline.costs.attention import causal_pairs, window_pairs
from kernel_atlas.roofline.costs.base import (
    PARTNER_LAUNCHERS,
    REGISTRY,
    Call,
    Cost,
    NoCost,
    cost_of,
    flops_per_element,
    register,
)
from kernel_atlas.roofline.costs.moe import expected_experts, moe_flops

__all__ = [
    "PARTNER_LAUNCHERS",
    "REGISTRY",
    "Call",
    "Cost",
    "NoCost",
    "causal_pairs",
    "cost_of",
    "expected_experts",
    "flops_per_element",
    "moe_flops",
    "register",
    "window_pairs",
]
