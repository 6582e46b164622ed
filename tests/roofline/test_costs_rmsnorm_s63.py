"""aiter's RMSNorm ops take their outputs as arguments: `rmsnorm(out, input, weight, epsilon)` and
`add_rmsnorm(out, input, residual_in, residual_out, weight, epsilon)` (aiter
csrc/include/rmsnorm_quant.h). An `out` argument is written, not read (costs.toml
`[written_arguments]`); it had been counted as an input and the output counted again.

Hand values, bf16 (2 bytes), T = 32 tokens, D = 4096:
* rmsnorm: read input 32·4096·2 = 262,144 + weight 4096·2 = 8,192 → 270,336; written out
  262,144 → 532,480 B. FLOPs 3 (rms_norm, costs.toml) × 131,072 elements = 393,216.
  Before: inputs 532,480 (out read) + output 262,144 = 794,624 B.
* add_rmsnorm: read input, residual_in 2·262,144 + weight 8,192 = 532,480; written out and
  residual_out 2·262,144 = 524,288 → 1,056,768 B. FLOPs (3 + 1 add) × 131,072 = 524,288.
  Before: 5 tensors read 1,056,768 + output 262,144 = 1,318,912 B, 393,216 FLOPs.
"""

from __future__ import annotations

import json

from kernel_atlas.ingest.recorded import parse_call
from kernel_atlas.roofline.costs import Call, cost_of

BF16 = "c10::BFloat16"


def _call(launcher: str, dims: list, types: list[str]) -> Call:
    args = parse_call(json.dumps(dims), json.dumps(types), None, json.dumps([""] * (len(dims) - 1) + ["1e-06"]))
    return Call(launcher, "rms_norm", args, "rule:rms-norm-fused-add")


def test_aiter_rmsnorm_writes_out_and_does_not_read_it() -> None:
    cost = cost_of(_call("aiter::rmsnorm", [[32, 4096], [32, 4096], [4096], []], [BF16] * 3 + ["Scalar"]))
    assert cost.bytes == 270_336 + 262_144 == 532_480
    assert cost.flops == 3 * 131_072 == 393_216
    assert cost.precision == "bf16"


def test_aiter_add_rmsnorm_writes_out_and_residual_out() -> None:
    dims = [[32, 4096], [32, 4096], [32, 4096], [32, 4096], [4096], []]
    cost = cost_of(_call("aiter::add_rmsnorm", dims, [BF16] * 5 + ["Scalar"]))
    assert cost.bytes == 532_480 + 524_288 == 1_056_768
    assert cost.flops == 4 * 131_072 == 524_288
