"""Training ops that read or write by index: losses, embedding backward, scatters, optimisers, dropout, pooling."""

from __future__ import annotations

import math

from kernel_atlas.core.devices import VECTOR
from kernel_atlas.ingest.recorded import TENSOR_LIST, Arg
from kernel_atlas.roofline.costs.base import (
    Call,
    Cost,
    NoCost,
    concrete_int,
    flops_per_element,
    optional_tensor_at,
    register,
    tensor_at,
    tensor_lists,
)


@register(launchers=("aten::nll_loss_forward", "aten::nll_loss2d_forward"))
def _nll_loss_forward(call: Call) -> Cost:
    """nll_loss_forward(self [N, C, …], target [N, …], weight, reduction, ignore_index): one
    log-probability gathered per target (and its class weight), the loss (per target where
    reduction is 0, none; else one value) and total_weight written; one FLOP per target. It was
    costed as a reduction over all of [N, C]: 32,000× the work for C = 32,000."""
    logp, target = tensor_at(call, 0, "self"), tensor_at(call, 1, "target")
    n = target.numel
    weight = optional_tensor_at(call, 2)
    per_row = n * logp.itemsize + (n * weight.itemsize if weight is not None else 0)
    reduction = concrete_int(call, 3)
    out = n if reduction == 0 else 1
    written = (out + 1) * logp.itemsize  # the loss and total_weight
    formula = (
        f"{n} targets: a log-probability{' and its class weight' if weight is not None else ''} gathered each "
        f"({per_row} B), target {target.nbytes} B read; loss {out} + total_weight 1 × {logp.itemsize} B written"
        + ("" if reduction is not None else " (reduction not recorded: a reduced loss assumed)")
    )
    return Cost(float(n), target.nbytes + per_row + written, logp.precision, VECTOR, formula)


@register(launchers=("aten::nll_loss_backward", "aten::nll_loss2d_backward"))
def _nll_loss_backward(call: Call) -> Cost:
    """nll_loss_backward(grad_output, self [N, C, …], target [N, …], weight, reduction,
    ignore_index, total_weight): one gradient element written per target, into a grad_input an
    op of its own zeroed; grad_output, target, the gathered weights and total_weight read."""
    grad, logp, target = tensor_at(call, 0, "grad_output"), tensor_at(call, 1, "self"), tensor_at(call, 2, "target")
    n = target.numel
    weight, total = optional_tensor_at(call, 3), optional_tensor_at(call, 6)
    read = grad.nbytes + target.nbytes + (n * weight.itemsize if weight is not None else 0)
    read += total.nbytes if total is not None else 0
    written = n * logp.itemsize
    formula = (
        f"{n} targets: one gradient element each written ({written} B); grad_output, target, weights read {read} B"
    )
    return Cost(float(n), read + written, logp.precision, VECTOR, formula)


@register(launchers=("aten::embedding_dense_backward", "aten::embedding_backward"))
def _embedding_backward(call: Call) -> Cost:
    """embedding_dense_backward(grad_output [.., D], indices [..], num_weights, padding_idx,
    scale_grad_by_freq): every gradient row added into its index's row of a dense
    [num_weights, D] gradient, written whole (zeros included); one FLOP per gradient element.
    The gradient had been taken for the destination, and the dense gradient left out."""
    grad, indices = tensor_at(call, 0, "grad_output"), tensor_at(call, 1, "indices")
    rows = concrete_int(call, 2)
    if rows is None or rows < 0:
        raise NoCost(f"{call.what}: num_weights (the embedding's rows) not recorded")
    width = grad.dims[-1] if grad.dims else 1
    written = rows * width * grad.itemsize
    formula = (
        f"{grad.numel} gradient elements added into a dense [{rows}, {width}] gradient; bytes = grad_output "
        f"{grad.nbytes} + indices {indices.nbytes} read + {written} written"
    )
    return Cost(float(grad.numel), grad.nbytes + indices.nbytes + written, grad.precision, VECTOR, formula)


@register(launchers=("aten::index_add_", "aten::index_add", "aten::scatter_add_", "aten::scatter_add"))
def _accumulating_scatter(call: Call) -> Cost:
    """index_add_(self, dim, index, source, alpha) and scatter_add_(self, dim, index, src): one
    update per source (index_add_) or index (scatter_add_) element, added into the destination
    (`self`, whatever its size beside an int64 index), whose elements touched — at most all of
    them — are read and written; one FLOP per update. The destination's read and the adds were
    left out, and the larger index taken for the destination."""
    dest = tensor_at(call, 0, "self")
    index, source = tensor_at(call, 2, "index"), tensor_at(call, 3, "source")
    scatter = "scatter" in call.launcher
    updates = index.numel if scatter else source.numel
    if scatter:
        touched = min(updates, dest.numel)
    else:  # whole slices along dim: each index selects a slice of self.numel / self.dims[dim]
        dim = concrete_int(call, 1) or 0
        size = dest.dims[dim % len(dest.dims)] if dest.dims else 1
        touched = min(index.numel, size) * (dest.numel // max(size, 1))
    read_source = updates * source.itemsize
    formula = (
        f"{updates} updates added into {touched} destination elements (read and written, "
        f"{2 * touched * dest.itemsize} B); index {index.nbytes} + source {read_source} B read"
    )
    return Cost(
        float(updates), index.nbytes + read_source + 2 * touched * dest.itemsize, dest.precision, VECTOR, formula
    )


@register(launchers=("aten::_fused_adam_", "aten::_fused_adamw_"))
def _fused_adam(call: Call) -> Cost:
    """_fused_adam(w)_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, …):
    params, grads and both moments read, params and both moments written (max_exp_avg_sqs read
    and written too where recorded: AMSGrad), each step read; FLOPs per parameter from
    costs.toml (`fused_adam`). Only the first list had been counted as written, at 1 FLOP."""
    lists = [a for a in call.args if a.kind == TENSOR_LIST]
    if len(lists) < 4 or not lists[0].dims:
        raise NoCost(f"{call.what}: params, grads, exp_avgs and exp_avg_sqs not recorded as tensor lists")
    _, size, precision, note = tensor_lists(call)
    params = lists[0].numel
    amsgrad = len(lists) > 4 and bool(lists[4].dims) and lists[4].numel == params
    moved = (4 + amsgrad) * params * size + (3 + amsgrad) * params * size
    steps = lists[5].numel * 4 if len(lists) > 5 and lists[5].dims else 0  # float32 step counts
    per = flops_per_element().get("fused_adam", 1.0)
    formula = (
        f"{per:g} FLOP × {params} parameters; bytes = params, grads, moments{', max moments' if amsgrad else ''} "
        f"read ({4 + amsgrad}×) and params, moments written ({3 + amsgrad}×) at {size} B + steps {steps}{note}"
    )
    return Cost(per * params, moved + steps, precision, VECTOR, formula)


@register(launchers=("aten::native_dropout",))
def _dropout(call: Call) -> Cost:
    """native_dropout(input, p, train): the input read, the output and a one-byte keep mask written."""
    x = tensor_at(call, 0, "input")
    written = x.numel * (x.itemsize + 1)
    per = flops_per_element().get(call.op_mapping, 1.0)
    formula = f"{per:g} FLOP × {x.numel} elements; bytes = input {x.nbytes} + output and bool mask {written}"
    return Cost(per * x.numel, x.nbytes + written, x.precision, VECTOR, formula)


@register(launchers=("aten::_foreach_norm",))
def _foreach_norm(call: Call) -> Cost:
    """_foreach_norm(tensors, ord): every element of the list read, one norm per tensor written;
    two FLOPs per element (square and add)."""
    lists, size, precision, note = tensor_lists(call)
    elements, count = lists[0].numel, len(lists[0].dims)
    formula = f"2 FLOP × {elements} elements of {count} tensors; bytes = {elements}·{size} read + {count} norms{note}"
    return Cost(2.0 * elements, elements * size + count * size, precision, VECTOR, formula)


def _pool_output(call: Call, x: Arg) -> tuple[int, ...]:
    """The output shape of max_pool2d(self, kernel_size, stride, padding, dilation, ceil_mode)."""
    spatial = 2
    if len(x.dims) < spatial + 1:
        raise NoCost(f"{call.what}: input of rank {len(x.dims)}")

    def pair(index: int, default: list[int] | None) -> list[int]:
        values = (call.args[index].ints() if index < len(call.args) else None) or default
        if values is None:
            raise NoCost(f"{call.what}: kernel_size not recorded (Concrete Inputs)")
        return values * spatial if len(values) == 1 else values[:spatial]

    kernel = pair(1, None)
    stride = pair(2, kernel)
    padding, dilation = pair(3, [0]), pair(4, [1])
    ceil_mode = call.args[5].flag() if len(call.args) > 5 else False
    sizes = []
    for axis in range(spatial):
        size = x.dims[-spatial + axis] + 2 * padding[axis] - dilation[axis] * (kernel[axis] - 1) - 1
        out = (-(-size // stride[axis]) if ceil_mode else size // stride[axis]) + 1
        if ceil_mode and (out - 1) * stride[axis] >= x.dims[-spatial + axis] + padding[axis]:
            out -= 1  # PyTorch: the last window must start inside the input or its left padding
        sizes.append(max(out, 0))
    return (*x.dims[:-spatial], *sizes)


@register(launchers=("aten::max_pool2d_with_indices",))
def _max_pool(call: Call) -> Cost:
    """max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode): the input
    read, the output and its int64 indices written; one compare per window element. It was
    costed as a reduction whose output is unknown (0 bytes)."""
    x = tensor_at(call, 0, "self")
    out = math.prod(_pool_output(call, x))
    kernel = call.args[1].ints() or [1]
    window = math.prod(kernel * 2 if len(kernel) == 1 else kernel[:2])
    written = out * (x.itemsize + 8)
    formula = (
        f"{out} outputs of a {window}-element window; bytes = input {x.nbytes} + output and int64 indices {written}"
    )
    return Cost(float(out * window), x.nbytes + written, x.precision, VECTOR, formula)


@register(launchers=("aten::max_pool2d_with_indices_backward",))
def _max_pool_backward(call: Call) -> Cost:
    """max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
    ceil_mode, indices): grad_output and the indices read, each gradient added at its index into
    grad_input (self's shape), written whole."""
    grad, x = tensor_at(call, 0, "grad_output"), tensor_at(call, 1, "self")
    indices = optional_tensor_at(call, 7)
    read = grad.nbytes + (indices.nbytes if indices is not None else grad.numel * 8)
    written = x.numel * x.itemsize
    formula = f"{grad.numel} gradients scattered; bytes = grad_output and indices {read} read + grad_input {written}"
    return Cost(float(grad.numel), read + written, x.precision, VECTOR, formula)
