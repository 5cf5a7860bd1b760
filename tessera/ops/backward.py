"""The backward passes of `tessera.ops`' matmul, softmax, layer_norm and rms_norm.

Each function takes the forward's inputs (and, for softmax, its output) with the gradient of the
output, as NumPy arrays, PyTorch tensors or CuPy arrays (`tessera/ops/arrays.py`), and returns
the input gradients of the first argument's kind, each in its own argument's element type. The
work is done by the kernels in `tessera/ops/kernels/*_bwd.tsr` (what each computes is written at
its top); this module checks the arguments, folds leading dimensions into rows, launches and
unfolds. The forward saves nothing for them: the norms recompute their row statistics and
matmul its pre-activation `a @ b + bias` (one more read of the inputs, no memory kept between
the passes).

The kernels compute in f64 when an argument is f64 and in f32 otherwise (f16 and bf16 are
widened). Any other element type, and shapes that do not fit the operation, raise an
`OpArgumentError` (a `TesseraError`) naming the argument.
"""

from __future__ import annotations

import math
from typing import Any

from tessera.ops import launcher
from tessera.ops.arrays import OpArgumentError, Operand, same_place
from tessera.ops.linalg import (  # ACT codes shared with matmul_bwd.tsr
    ACTIVATIONS,
    check_activation,
    matmul_shapes,
)
from tessera.ops.norms import check_dtype, check_eps

FLOATS = ("f16", "bf16", "f32", "f64")


_BLOCK = 16  # the 16x16 blocks of kernels/matmul_bwd.tsr
_COLUMNS = 128  # the tiles per group of the column sums


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _operand(op: str, name: str, value: Any, shape: tuple[int, ...] | None = None,
             first: Operand | None = None) -> Operand:
    """An array argument with a float type, of shape `shape` when given, where `first` lives."""
    o = Operand.of(op, name, value)
    check_dtype(op, name, o, FLOATS)
    if shape is not None and o.shape != shape:
        raise OpArgumentError(op, name, f"has shape {list(o.shape)}; it needs {list(shape)}")
    if first is not None:
        same_place(op, first, {name: o})
    return o


def _compute_type(*operands: Operand | None) -> str:
    return "f64" if any(o is not None and o.dtype == "f64" for o in operands) else "f32"


def _values(op: str, name: str, o: Operand, ctype: str) -> Any:
    """The operand's values in the compute type (the array itself where it has that type)."""
    if o.dtype == ctype:
        return o.value
    wide = o.as_f32()
    return wide if ctype == "f32" else Operand.of(op, name, wide).as_type(ctype)


def _result(op: str, value: Any, dtype: str) -> Any:
    """A result of the kernels (compute type) converted to an argument's element type."""
    return Operand.of(op, "result", value).as_type(dtype)


def _launch(file: str, kernel: str, on_device: bool, args: tuple, grid: Any, ctype: str, **consts: Any) -> None:
    launcher.launch(launcher.kernel(file, kernel, on_device), args, consts, grid, types={"T": ctype})


def softmax_backward(y: Any, dy: Any, axis: int = -1) -> Any:
    """dx of `y = softmax(x, axis)`, from the forward's output `y` and the gradient `dy`."""
    op = "softmax_backward"
    yo = _operand(op, "y", y)
    dyo = _operand(op, "dy", dy, yo.shape, yo)
    rank = len(yo.shape)
    if isinstance(axis, bool) or not isinstance(axis, int) or not -max(1, rank) <= axis < max(1, rank):
        raise OpArgumentError(op, "axis", f"must be an int naming one of y's {rank} axes, not {axis!r}"[:200])
    if not rank:
        raise OpArgumentError(op, "y", "must have at least one axis")
    ctype = _compute_type(yo, dyo)
    axis %= rank
    yw, dyw = (Operand.of(op, n, _values(op, n, o, ctype)) for n, o in (("y", yo), ("dy", dyo)))
    if axis != rank - 1:
        yw, dyw = (Operand.of(op, n, o.moved(axis, -1)) for n, o in (("y", yw), ("dy", dyw)))
    cols = yw.shape[-1]
    rows = math.prod(yw.shape[:-1])
    dx = yw.empty(yw.shape, ctype)
    if rows and cols:
        _launch("softmax_bwd.tsr", "softmax_bwd", yo.on_device,
                (yw.reshaped((rows, cols)), dyw.reshaped((rows, cols)), dx.reshape(rows, cols)), rows, ctype)
    if axis != rank - 1:
        dx = Operand.of(op, "dx", dx).moved(-1, axis)
    return _result(op, dx, yo.dtype)


class _Norm:
    """The checked arguments of a norm's backward pass, as the kernels read them."""

    def __init__(self, op: str, x: Any, dy: Any, eps: Any, **vectors: Any) -> None:
        self.x = _operand(op, "x", x)
        if not self.x.shape:
            raise OpArgumentError(op, "x", "must have at least one axis (the normalized one)")
        self.n = self.x.shape[-1]
        self.rows = math.prod(self.x.shape[:-1])
        self.vectors = {k: None if v is None else _operand(op, k, v, (self.n,), self.x) for k, v in vectors.items()}
        dyo = _operand(op, "dy", dy, self.x.shape, self.x)
        self.eps = check_eps(op, eps)
        self.ctype = ctype = _compute_type(self.x, dyo, *self.vectors.values())
        self.xw = _values(op, "x", self.x, ctype).reshape(self.rows, self.n)
        self.dyw = _values(op, "dy", dyo, ctype).reshape(self.rows, self.n)
        w = self.vectors.get("weight")
        self.weight = _values(op, "weight", w, ctype) if w is not None else self.x.zeros((self.n,), ctype) + 1
        self.op = op

    def new(self, *shape: int) -> Any:
        return self.x.zeros(shape, self.ctype)

    def launch(self, kernel: str, args: tuple, grid: int) -> None:
        _launch(f"{self.op.removesuffix('_backward')}_bwd.tsr", kernel, self.x.on_device, args, grid, self.ctype)

    def grads(self, dx: Any, **sums: Any) -> tuple[Any, ...]:
        """dx in x's type and shape, then each vector's gradient in its type (None for a None vector)."""
        out = [_result(self.op, dx.reshape(self.x.shape), self.x.dtype)]
        for name, o in self.vectors.items():
            out.append(None if o is None else _result(self.op, sums[name], o.dtype))
        return tuple(out)


def layer_norm_backward(x: Any, weight: Any, bias: Any, dy: Any, eps: float = 1e-5) -> tuple[Any, Any, Any]:
    """(dx, dweight, dbias) of `layer_norm(x, weight, bias, eps)` over the last axis; dweight
    (dbias) is None when weight (bias) is."""
    a = _Norm("layer_norm_backward", x, dy, eps, weight=weight, bias=bias)
    dx, dw, db = a.new(a.rows, a.n), a.new(a.n), a.new(a.n)
    if a.rows and a.n:
        mean, rstd = a.new(a.rows), a.new(a.rows)
        a.launch("layer_norm_bwd_dx", (a.xw, a.weight, a.dyw, dx, mean, rstd, a.eps), a.rows)
        a.launch("layer_norm_bwd_dwb", (a.xw, a.dyw, mean, rstd, dw, db), _cdiv(a.n, _COLUMNS))
    gx, gw, gb = a.grads(dx, weight=dw, bias=db)
    return gx, gw, gb


def rms_norm_backward(x: Any, weight: Any, dy: Any, eps: float = 1e-6) -> tuple[Any, Any]:
    """(dx, dweight) of `rms_norm(x, weight, eps)` over the last axis; dweight is None when weight is."""
    a = _Norm("rms_norm_backward", x, dy, eps, weight=weight)
    dx, dw = a.new(a.rows, a.n), a.new(a.n)
    if a.rows and a.n:
        rs = a.new(a.rows)
        a.launch("rms_norm_bwd_dx", (a.xw, a.weight, a.dyw, dx, rs, a.eps), a.rows)
        a.launch("rms_norm_bwd_dw", (a.xw, a.dyw, rs, dw), _cdiv(a.n, _COLUMNS))
    gx, gw = a.grads(dx, weight=dw)
    return gx, gw


def _batched(op: str, name: str, values: Any, batch: tuple[int, ...], rows: int, cols: int) -> Any:
    """An operand's values ([..., rows, cols]) as [B, rows, cols]: its own batches when it has the
    full batch or one (the kernels share a batch of one), else a copy broadcast to the full batch
    (its gradient is then summed back by `_reduce_batch`)."""
    o = Operand.of(op, name, values)
    own = o.shape[:-2]
    if own != batch and math.prod(own) != 1:
        full = batch + (rows, cols)
        if o.kind == "torch":
            values = o.value.expand(full).contiguous()
        else:
            values = o.lib.ascontiguousarray(o.lib.broadcast_to(o.value, full))
        own = batch
    return values.reshape(math.prod(own), rows, cols)


def matmul_backward(a: Any, b: Any, bias: Any, activation: str | None, dy: Any) -> tuple[Any, Any, Any]:
    """(da, db, dbias) of `y = activation(a @ b + bias)` (dbias is None when bias is None). `a` is
    [..., M, K], `b` [..., K, N] with batch axes that broadcast with a's (NumPy's rules), `bias`
    None or [N]."""
    op = "matmul_backward"
    ao = _operand(op, "a", a)
    bo = _operand(op, "b", b, None, ao)
    batch, m, n, k = matmul_shapes(op, ao, bo)
    biaso = None if bias is None else _operand(op, "bias", bias, (n,), ao)
    check_activation(op, activation)
    dyo = _operand(op, "dy", dy, batch + (m, n), ao)
    ctype = _compute_type(ao, bo, biaso, dyo)
    z = math.prod(batch)
    aw = _batched(op, "a", _values(op, "a", ao, ctype), batch, m, k)
    bw = _batched(op, "b", _values(op, "b", bo, ctype), batch, k, n)
    dp = _values(op, "dy", dyo, ctype).reshape(z, m, n)
    da, db, dbias = ao.zeros(tuple(aw.shape), ctype), ao.zeros(tuple(bw.shape), ctype), ao.zeros((n,), ctype)
    on_device = ao.on_device
    if z and m and n:
        if activation is not None:
            bias_w = _values(op, "bias", biaso, ctype) if biaso is not None else ao.zeros((n,), ctype)
            pre = ao.empty((z, m, n), ctype)
            _launch("matmul_bwd.tsr", "matmul_dpre", on_device, (aw, bw, bias_w, dp, pre),
                    (_cdiv(n, _BLOCK), _cdiv(m, _BLOCK), z), ctype, ACT=ACTIVATIONS[activation])
            dp = pre
        if k:
            _launch("matmul_bwd.tsr", "matmul_nt", on_device, (dp, bw, da),
                    (_cdiv(k, _BLOCK), _cdiv(m, _BLOCK), aw.shape[0]), ctype)
            _launch("matmul_bwd.tsr", "matmul_tn", on_device, (aw, dp, db),
                    (_cdiv(n, _BLOCK), _cdiv(k, _BLOCK), bw.shape[0]), ctype)
        if biaso is not None:
            _launch("matmul_bwd.tsr", "col_sum", on_device, (dp.reshape(z * m, n), dbias), _cdiv(n, _COLUMNS), ctype)
    grads = [_reduce_batch(op, g, batch, o.shape) for g, o in ((da, ao), (db, bo))]
    return (_result(op, grads[0], ao.dtype), _result(op, grads[1], bo.dtype),
            None if biaso is None else _result(op, dbias, biaso.dtype))


def _reduce_batch(op: str, grad: Any, batch: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    """The gradient `grad` ([B, rows, cols], B the argument's own batches or the full batch) of an
    argument of shape `shape`: summed over the batch axes that broadcasting stretched (by the
    array's library: only where `_batched` expanded the argument), then reshaped."""
    own = math.prod(shape[:-2])
    if Operand.of(op, "grad", grad).shape[0] == own:
        return grad.reshape(shape)
    full = grad.reshape(batch + shape[-2:])
    lead = len(batch) - len(shape[:-2])
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape[:-2]) if d == 1 and batch[lead + i] != 1)
    total = full.sum(dim=axes) if Operand.of(op, "grad", full).kind == "torch" else full.sum(axis=axes)
    return total.reshape(shape)
