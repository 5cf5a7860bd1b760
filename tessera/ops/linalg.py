"""`matmul` of `tessera.ops`: act(a @ b + bias) with NumPy's batching rules, on the kernels of
`tessera/ops/kernels/matmul.tsr` (f16/bf16 and i8 on the tensor cores, f32 on the FMA pipes).

Whether the epilogue (bias, activation) is fused into the GEMM or left to a map kernel is the
`fuse` axis of the GEMM's autotune space: the launch tunes the fused candidates first and falls
back to the unfused ones (the GEMM, then the map kernel `mm_epilogue`) where pruning drops every
fused one (`fused_config`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessera.base.errors import LaunchError
from tessera.ops import launcher
from tessera.ops.arrays import OpArgumentError, Operand, same_place
from tessera.ops.norms import check_dtype

ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "silu": 3}
KERNELS = {"f16": "mm_tc", "bf16": "mm_tc", "f32": "mm_f32", "i8": "mm_i8"}


def _batched(op: str, name: str, o: Operand, batch: tuple[int, ...], rows: int, cols: int) -> Any:
    """`o` as a [batch, rows, cols] array: its own batch when it has the full one (or none: a batch
    of one, broadcast by the kernel), else broadcast to it and copied."""
    mine = o.shape[:-2]
    if mine == batch or math.prod(mine) == 1:
        return o.reshaped((max(1, math.prod(mine)), rows, cols))
    full = batch + (rows, cols)
    if o.kind == "torch":
        wide = o.value.expand(full).contiguous()
    else:
        wide = o.lib.ascontiguousarray(o.lib.broadcast_to(o.value, full))
    return wide.reshape((math.prod(batch), rows, cols))


def check_activation(op: str, activation: Any) -> None:
    """OpArgumentError unless `activation` is one of ACTIVATIONS (None, 'relu', 'gelu', 'silu')."""
    if not (activation is None or isinstance(activation, str)) or activation not in ACTIVATIONS:
        raise OpArgumentError(op, "activation", f"must be None, 'relu', 'gelu' or 'silu', not {activation!r}"[:200])


def matmul_shapes(op: str, ao: Operand, bo: Operand) -> tuple[tuple[int, ...], int, int, int]:
    """(batch, M, N, K) of a @ b; OpArgumentError naming the argument that does not fit."""
    for name, o in (("a", ao), ("b", bo)):
        if len(o.shape) < 2:
            raise OpArgumentError(op, name, f"has shape {list(o.shape)}; it needs at least two axes ([..., rows, cols])")
    (m, k), (k2, n) = ao.shape[-2:], bo.shape[-2:]
    if k != k2:
        raise OpArgumentError(op, "b", f"has {k2} rows but a has {k} columns (a: {list(ao.shape)}, b: {list(bo.shape)})")
    try:
        batch = tuple(np.broadcast_shapes(ao.shape[:-2], bo.shape[:-2]))
    except ValueError:
        raise OpArgumentError(op, "b", f"batch axes {list(bo.shape[:-2])} do not broadcast with a's "
                                       f"{list(ao.shape[:-2])}") from None
    return batch, m, n, k


def matmul(a: Any, b: Any, bias: Any = None, activation: str | None = None) -> Any:
    """act(a @ b + bias). a: [..., M, K], b: [K, N] or [..., K, N] (batch axes broadcast as in
    NumPy); f16, bf16 (tensor cores, f32 accumulation, rounded once), f32 (full f32 on the FMA
    pipes) or i8 (tensor cores, exact i32 result). `bias`: [N], added before the activation (f32 for
    the float types, any float type converted; i32 or i8 for i8). `activation`: None, "relu",
    "gelu" (the erf form, as PyTorch's default) or "silu" (i8: None or "relu"). The result has a's
    kind, the batch shape + [M, N], and a's element type (i32 for i8)."""
    op = "matmul"
    ao, bo = Operand.of(op, "a", a), Operand.of(op, "b", b)
    check_dtype(op, "a", ao, tuple(KERNELS))
    if bo.dtype != ao.dtype:
        raise OpArgumentError(op, "b", f"element type {bo.dtype} differs from a's {ao.dtype}; pass both of one type")
    same_place(op, ao, {"b": bo})
    check_activation(op, activation)
    if ao.dtype == "i8" and activation not in (None, "relu"):
        raise OpArgumentError(op, "activation", f"{activation!r} is not defined on i8 inputs (i32 results): "
                                                "use None or 'relu'")
    batch, m, n, k = matmul_shapes(op, ao, bo)
    out_type = "i32" if ao.dtype == "i8" else ao.dtype
    bias_type = "i32" if ao.dtype == "i8" else "f32"
    bo_bias = None
    if bias is not None:
        bo_bias = Operand.of(op, "bias", bias)
        check_dtype(op, "bias", bo_bias, ("i32", "i8") if ao.dtype == "i8" else ("f32", "f16", "bf16"))
        if bo_bias.shape != (n,):
            raise OpArgumentError(op, "bias", f"has shape {list(bo_bias.shape)}; it needs [{n}] (b's columns)")
        same_place(op, ao, {"bias": bo_bias})
    bb = math.prod(batch)
    out = ao.empty((bb, m, n), out_type)
    if bb and m and n:
        A = _batched(op, "a", ao, batch, m, k)
        consts = {"act": ACTIVATIONS[activation], "has_bias": int(bias is not None)}
        if bo_bias is None:
            vec = ao.zeros((1,), bias_type)
        elif ao.dtype == "i8":
            vec = bo_bias.as_type("i32")
        else:
            vec = bo_bias.as_f32()
        if ao.dtype == "i8":
            _gemm_i8(A, Operand.of(op, "b", _batched(op, "b", bo, batch, k, n)), vec, out, consts, ao.on_device)
        else:
            _gemm(ao, A, _batched(op, "b", bo, batch, k, n), vec, out, consts, (m, n))
    return out.reshape(batch + (m, n))


def _grid(m: int, n: int, bb: int) -> Any:
    return lambda c: ((n + c["BN"] - 1) // c["BN"], (m + c["BM"] - 1) // c["BM"], bb)


def _gemm_i8(A: Any, bo: Operand, vec: Any, out: Any, consts: dict[str, Any], on_device: bool) -> None:
    bb, m, n = out.shape
    k = launcher.kernel("matmul.tsr", "mm_i8", on_device)
    launcher.launch(k, (A, bo.swapped_last(), vec, out), consts, _grid(m, n, bb))


def _gemm(ao: Operand, A: Any, B: Any, vec: Any, out: Any, consts: dict[str, Any], mn: tuple[int, int]) -> None:
    """The float GEMM, its epilogue fused or not (`fused_config`)."""
    bb = out.shape[0]
    m, n = mn
    name = KERNELS[ao.dtype]
    k = launcher.kernel("matmul.tsr", name, ao.on_device)
    types = {"T": ao.dtype} if name == "mm_tc" else {}
    grid = _grid(m, n, bb)
    tiny = ao.empty((1, 1, 1), "f32")
    if consts["act"] == 0 and not consts["has_bias"]:  # no epilogue: nothing to fuse
        launcher.launch(k, (A, B, vec, out, tiny), {**consts, "fuse": 1}, grid, types=types)
        return
    scratch = None
    tuned = fused_config(k, (A, B, vec, out, tiny), consts, types, grid)
    if tuned is None:  # every fused candidate was pruned
        scratch = ao.empty((bb, m, n), "f32")
        tuned = launcher.config(k, (A, B, vec, out, scratch), {**consts, "fuse": 0}, types, grid)
    used = launcher.launch(k, (A, B, vec, out, tiny if scratch is None else scratch), consts, grid, tuned, types)
    if scratch is None or used.get("fuse", 1):
        return
    row = vec if consts["has_bias"] else ao.zeros((n,), "f32")
    epi = launcher.kernel("matmul.tsr", "mm_epilogue", ao.on_device)
    launcher.launch(epi, (scratch.reshape(bb * m, n), row, out.reshape(bb * m, n)), {"act": consts["act"]}, None,
                    types={"T": ao.dtype})


def fused_config(k: Any, args: tuple, consts: dict[str, Any], types: dict[str, str], grid: Any) -> dict | None:
    """The tuned configuration of `k` among its fused candidates (`fuse=1`), or None when every one
    of them is pruned (spills, registers, shared memory): then the unfused ones are tuned. The cost
    model judges the GEMM alone and cannot see what leaving the epilogue to a map kernel costs (a
    second launch, the f32 accumulator written and read back), so a fused candidate that survives
    pruning is preferred to every unfused one."""
    try:
        return {"fuse": 1, **launcher.config(k, args, {**consts, "fuse": 1}, types, grid)}
    except LaunchError as e:
        if "every autotuning candidate was pruned" not in str(e):
            raise
        return None
