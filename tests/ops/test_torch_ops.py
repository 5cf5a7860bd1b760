"""tessera.ops.torch (tessera/ops/torch.py, torch_autograd.py): the operators as PyTorch
custom operators on CPU tensors (the CPU backend). torch.library.opcheck with all its default checks
(schema, autograd registration, fake tensors, AOT dispatch with dynamic shapes) on every forward and
backward operator; torch.autograd.gradcheck of the four backward passes; torch.compile with the
eager, aot_eager and inductor backends against eager; argument errors in eager mode and under fake
tensors; and a seeded random differential against PyTorch's own autograd of the same math.

Tolerances. The forward operators compute in f32 (they take f16, bf16 and f32, not f64), so
gradcheck runs on f32 inputs: with eps = 1e-3 each central difference carries f32's rounding of the
outputs (2^-24 relative) divided by 2 eps, about 3e-5 of the output's magnitude, plus the truncation
error O(eps^2); atol = rtol = 1e-2 bounds both with margin for the small sizes used. The backward
operators themselves take f64, and there they are held to 1e-10 against PyTorch's autograd in f64.
Gradients of the f32 operators are compared with PyTorch's in f64 at 2e-4 of the largest magnitude
(sums of up to a hundred products of f32 values), times a norm's condition 1 / sqrt(var + eps) where
that exceeds 1 (it multiplies the rounding errors of the row sums; at most 1 / sqrt(eps)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tessera.ops.torch as tops  # noqa: E402 - after the skip
from tessera.base.errors import TesseraError  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.usefixtures("shared_cache")]

F = torch.nn.functional
ACTS = {None: lambda p: p, "relu": torch.relu, "gelu": F.gelu, "silu": F.silu}


def rand(*shape, dtype=None, grad: bool = True, seed: int = 0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g, dtype=dtype or torch.float32).requires_grad_(grad)


# ---- PyTorch's own math, for the differentials ---------------------------------------------------

def torch_matmul(a, b, bias=None, activation=None):
    return ACTS[activation](a @ b + (0 if bias is None else bias))


def torch_layer_norm(x, w, b, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], w, b, eps)


def torch_rms_norm(x, w, eps=1e-6):
    y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w


# ---- opcheck ------------------------------------------------------------------------------------

F64 = dict(dtype=torch.float64, grad=False)
OPCHECK = [
    ("matmul_bias_gelu", tops.matmul, lambda: (rand(2, 5, 7), rand(7, 6), rand(6), "gelu")),
    ("matmul_broadcast_b", tops.matmul, lambda: (rand(5, 7), rand(2, 7, 6))),
    ("matmul_relu_silu", tops.matmul, lambda: (rand(3, 4), rand(4, 5), None, "silu")),
    ("softmax_axis1", tops.softmax, lambda: (rand(3, 4, 5), 1)),
    ("layer_norm", tops.layer_norm, lambda: (rand(3, 9), rand(9), rand(9), 1e-4)),
    ("layer_norm_no_affine", tops.layer_norm, lambda: (rand(2, 3, 9), None, None)),
    ("rms_norm", tops.rms_norm, lambda: (rand(2, 3, 9), rand(9))),
    ("softmax_backward_f64", tops.softmax_backward, lambda: (rand(3, 5, **F64), rand(3, 5, **F64), 0)),
    ("layer_norm_backward_f64", tops.layer_norm_backward,
     lambda: (rand(3, 5, **F64), rand(5, **F64), None, rand(3, 5, **F64), 1e-5)),
    ("rms_norm_backward", tops.rms_norm_backward, lambda: (rand(3, 5, grad=False), None, rand(3, 5, grad=False), 1e-6)),
    ("matmul_backward_f64", tops.matmul_backward,
     lambda: (rand(2, 3, 5, **F64), rand(5, 4, **F64), rand(4, **F64), "relu", rand(2, 3, 4, **F64))),
    ("attention", tops.attention, lambda: tuple(rand(1, 2, 16, 64, dtype=torch.float16, grad=False, seed=i)
                                                for i in range(3)) + (True,)),
    ("depthwise_conv2d", tops.depthwise_conv2d, lambda: (rand(1, 3, 9, 8, grad=False), rand(3, 1, 3, 3, grad=False), 2, 1)),
]


@pytest.mark.parametrize("name,op,make", OPCHECK, ids=[c[0] for c in OPCHECK])
def test_opcheck(name, op, make) -> None:
    torch.library.opcheck(op, make())


# ---- gradcheck ----------------------------------------------------------------------------------

GRADCHECK = [
    ("matmul_bias_gelu", lambda a, b, c: tops.matmul(a, b, c, "gelu"), lambda: (rand(2, 5, 7), rand(7, 6), rand(6))),
    ("matmul_silu_batched_b", lambda a, b, c: tops.matmul(a, b, c, "silu"), lambda: (rand(5, 7), rand(3, 7, 6), rand(6))),
    ("matmul_relu", lambda a, b: tops.matmul(a, b, None, "relu"), lambda: (rand(4, 7), rand(7, 6))),
    ("softmax", lambda x: tops.softmax(x, 1), lambda: (rand(3, 4, 5),)),
    ("layer_norm", lambda x, w, b: tops.layer_norm(x, w, b, 1e-5), lambda: (rand(3, 9), rand(9), rand(9))),
    ("rms_norm", lambda x, w: tops.rms_norm(x, w, 1e-6), lambda: (rand(2, 3, 9), rand(9))),
]


@pytest.mark.filterwarnings("ignore:Input #")  # gradcheck's advice to use f64: the forward is f32 (above)
@pytest.mark.parametrize("name,fn,make", GRADCHECK, ids=[c[0] for c in GRADCHECK])
def test_gradcheck(name, fn, make) -> None:
    assert torch.autograd.gradcheck(fn, make(), eps=1e-3, atol=1e-2, rtol=1e-2)


# ---- torch.compile ------------------------------------------------------------------------------

def block(x, w1, b1, g, beta, w2):
    h = tops.layer_norm(x, g, beta, 1e-5)
    h = tops.matmul(h, w1, b1, "gelu")
    h = tops.rms_norm(h, None, 1e-6)
    return tops.softmax(tops.matmul(h, w2), -1)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_compiled_function_matches_eager(backend) -> None:
    params = [rand(*s, seed=i) for i, s in enumerate([(12, 16), (16,), (12,), (12,), (16, 8)])]
    torch._dynamo.reset()
    compiled = torch.compile(block, backend=backend, fullgraph=True)
    for x in (rand(2, 5, 12), rand(3, 7, 12)):  # the second shape recompiles (or runs the dynamic graph)
        want = block(x, *params)
        grads = torch.autograd.grad(want.pow(2).sum(), [x, *params])
        got = compiled(x, *params)
        got_grads = torch.autograd.grad(got.pow(2).sum(), [x, *params])
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        for g, w in zip(got_grads, grads):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


# ---- argument errors ----------------------------------------------------------------------------

ERRORS = [
    (lambda: tops.matmul(rand(3, 4, dtype=torch.float64), rand(4, 5, dtype=torch.float64)), "'a'"),
    (lambda: tops.matmul(rand(3, 4), rand(5, 6)), "'b'"),
    (lambda: tops.matmul(rand(3, 4), rand(4, 6), rand(5)), "'bias'"),
    (lambda: tops.matmul(rand(3, 4), rand(4, 6), None, "tanh"), "'activation'"),
    (lambda: tops.softmax(rand(3, 4, dtype=torch.float64), -1), "'x'"),
    (lambda: tops.softmax(rand(3, 4), 2), "'axis'"),
    (lambda: tops.layer_norm(rand(3, 4), rand(5), None), "'weight'"),
    (lambda: tops.layer_norm(rand(3, 4), None, rand(4).to(torch.int32)), "'bias'"),
    (lambda: tops.rms_norm(rand(3, 4), None, -1.0), "'eps'"),
    (lambda: tops.attention(*(rand(1, 1, 8, 32, dtype=torch.float16) for _ in range(3))), "'q'"),
    (lambda: tops.depthwise_conv2d(rand(1, 3, 8, 8), rand(4, 1, 3, 3)), "'w'"),
]


@pytest.mark.parametrize("call,name", ERRORS)
def test_unsupported_arguments_raise_a_tessera_error_naming_them(call, name) -> None:
    with pytest.raises(TesseraError, match=name):
        call()
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(TesseraError, match=name):  # what torch.compile traces
        call()


def test_an_unsupported_argument_under_torch_compile_names_it() -> None:
    torch._dynamo.reset()
    f = torch.compile(lambda x: tops.softmax(x, 3), backend="aot_eager", fullgraph=True)
    with pytest.raises(Exception) as e:
        f(rand(2, 3))
    chain, todo = [], [e.value]  # dynamo wraps the fake implementation's error: follow causes and contexts
    while todo:
        err = todo.pop()
        if err is not None and all(err is not c for c in chain):
            chain.append(err)
            todo += [err.__cause__, err.__context__]
    assert any(isinstance(x, TesseraError) and "'axis'" in str(x) for x in chain), chain


def test_attention_has_no_backward() -> None:
    q = rand(1, 2, 16, 64, dtype=torch.float16)  # opcheck's variant
    with pytest.raises(RuntimeError, match="autograd"):
        tops.attention(q, q.detach(), q.detach(), True).float().sum().backward()


def test_f16_gradients_are_f16() -> None:
    x, w = rand(4, 8, dtype=torch.float16), rand(8, dtype=torch.float32)
    tops.rms_norm(x, w).float().sum().backward()
    assert x.grad.dtype == torch.float16 and w.grad.dtype == torch.float32
    ref_x, ref_w = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    torch_rms_norm(ref_x, ref_w).sum().backward()
    torch.testing.assert_close(x.grad.double(), ref_x.grad, rtol=0, atol=2e-2)


# ---- seeded random differentials against PyTorch's autograd ----------------------------------------

@dataclass
class Case:
    """One random operation: its name, options and inputs (None for an absent weight or bias)."""

    op: str
    args: list
    opts: dict

    def ours(self, *args):
        return getattr(tops, self.op)(*args, *self.opts.values())

    def theirs(self, *args):
        return {"matmul": torch_matmul, "softmax": torch.softmax, "layer_norm": torch_layer_norm,
                "rms_norm": torch_rms_norm}[self.op](*args, *self.opts.values())

    def backward(self, y, dy):
        """The gradients of every argument from tessera's backward operator."""
        plain = [None if a is None else a.detach() for a in self.args]
        if self.op == "softmax":
            return (tops.softmax_backward(y.detach(), dy, self.opts["axis"]),)
        if self.op == "matmul":
            return tops.matmul_backward(*plain, self.opts["activation"], dy)
        return getattr(tops, f"{self.op}_backward")(*plain, dy, self.opts["eps"])


def random_case(rng: np.random.Generator, dtype) -> Case:
    lead = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    n = int(rng.choice([1, 3, 17, 33]))  # ragged: no 16-byte-aligned twins to compile as well
    seed = int(rng.integers(1 << 30))
    op = str(rng.choice(["matmul", "softmax", "layer_norm", "rms_norm"]))
    if op == "matmul":
        m, k = (int(rng.choice([1, 5, 17])) for _ in range(2))
        a = rand(*(tuple(d if rng.random() < 0.7 else 1 for d in lead) + (m, k)), dtype=dtype, seed=seed)
        b = rand(*((lead if rng.random() < 0.5 else ()) + (k, n)), dtype=dtype, seed=seed + 1)
        bias = rand(n, dtype=dtype, seed=seed + 2) if rng.random() < 0.5 else None
        return Case(op, [a, b, bias], {"activation": [None, "relu", "gelu", "silu"][int(rng.integers(4))]})
    x = rand(*(lead + (n,)), dtype=dtype, seed=seed)
    if op == "softmax":
        return Case(op, [x], {"axis": int(rng.integers(-x.dim(), x.dim()))})
    w = rand(n, dtype=dtype, seed=seed + 1) if rng.random() < 0.8 else None
    opts = {"eps": float(rng.choice([1e-6, 1e-5, 0.1]))}
    if op == "rms_norm":
        return Case(op, [x, w], opts)
    return Case(op, [x, w, rand(n, dtype=dtype, seed=seed + 2) if rng.random() < 0.8 else None], opts)


def check_against_torch(rng: np.random.Generator) -> None:
    """Forward and every input's gradient (for a random output gradient) of the f32 operator against
    PyTorch's autograd of the same math in f64 on the same values."""
    case = random_case(rng, torch.float32)
    ref = [None if a is None else a.detach().double().requires_grad_() for a in case.args]
    y, y_ref = case.ours(*case.args), case.theirs(*ref)
    dy = torch.from_numpy(rng.standard_normal(tuple(y.shape))).float()
    live = [i for i, a in enumerate(case.args) if a is not None]
    got = torch.autograd.grad(y, [case.args[i] for i in live], dy)
    want = torch.autograd.grad(y_ref, [ref[i] for i in live], dy.double())
    cond = 1.0  # a norm's 1 / sqrt(var + eps) multiplies the rounding errors of its row sums
    if case.op in ("layer_norm", "rms_norm") and ref[0].numel():
        x = ref[0].detach()
        spread = x.var(-1, unbiased=False) if case.op == "layer_norm" else (x * x).mean(-1)
        cond = max(1.0, float((spread + case.opts["eps"]).rsqrt().max()))
    torch.testing.assert_close(y.double(), y_ref, rtol=2e-4, atol=2e-4)
    for g, w in zip(got, want):
        scale = max(1.0, float(w.abs().max())) if w.numel() else 1.0
        torch.testing.assert_close(g.double(), w, rtol=0, atol=2e-4 * scale * cond)


def check_backward_f64(rng: np.random.Generator) -> None:
    """The backward operator alone, in f64, against PyTorch's autograd in f64."""
    case = random_case(rng, torch.float64)
    y = case.theirs(*case.args)
    dy = torch.from_numpy(rng.standard_normal(tuple(y.shape)))
    live = [i for i, a in enumerate(case.args) if a is not None]
    want = torch.autograd.grad(y, [case.args[i] for i in live], dy)
    got = case.backward(y, dy)
    for g, w in zip([got[i] for i in live], want):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-10 * max(1.0, float(w.abs().max()) if w.numel() else 1.0))


def test_random_differential_against_torch_autograd(seed: int = 27, count: int = 16) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        check_against_torch(rng)


def test_backward_operators_in_f64_match_torch_autograd(seed: int = 2027, count: int = 12) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        check_backward_f64(rng)


def test_the_documented_example_runs() -> None:
    from tests.conftest import ROOT

    text = (ROOT / "docs" / "ops.md").read_text()
    start = text.index("```python\nimport torch\nimport tessera.ops.torch as tops\n") + len("```python\n")
    scope: dict = {}
    torch._dynamo.reset()
    exec(compile(text[start:text.index("```", start)], "docs/ops.md", "exec"), scope)
    assert scope["x"].grad is not None and scope["g"].grad.shape == (32,)
