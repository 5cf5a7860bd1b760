"""`tessera.ops` on the CPU backend (spec section 17): every operator against a float64 NumPy
reference at ragged sizes within the tolerances of docs/ops.md, batched leading axes, the kind of
array in is the kind out, and arguments that do not fit raise OpArgumentError naming them.

Autotuning is off here (the const parameters' defaults: one variant per element type), so that the
suite stays fast; tests/ops/test_ops_tuning.py tunes."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import autotune, ops
from tessera.autotune.store import TuneStore
from tessera.ops import OpArgumentError, norms
from tests.ops import reference as ref
from tests.ops.reference import close, make


@pytest.fixture(autouse=True)
def cpu_untuned(shared_cache, monkeypatch):
    monkeypatch.setenv("TESSERA_BACKEND", "cpu")
    monkeypatch.setattr(autotune, "_store", TuneStore())
    monkeypatch.setattr(autotune, "_settings", {**autotune._settings, "enabled": False})
    monkeypatch.setattr(autotune, "_memo", {})


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_matmul_batched_ragged_with_epilogue(dtype: str) -> None:
    rng = np.random.default_rng(1)
    a, b = make(rng, (2, 37, 45), dtype), make(rng, (45, 29), dtype)
    bias = make(rng, (29,), "f32")
    close(ops.matmul(a, b), ref.matmul(a, b), dtype)
    close(ops.matmul(a, b, bias, "gelu"), ref.matmul(a, b, bias, "gelu"), dtype)


def test_matmul_bf16_through_torch_and_broadcast_batches() -> None:
    pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    a, b = make(rng, (19, 33), "bf16"), make(rng, (3, 33, 21), "bf16")
    y = ops.matmul(a, b, activation="silu")
    assert type(y) is type(a) and tuple(y.shape) == (3, 19, 21) and y.dtype == a.dtype
    close(y, ref.matmul(a, b, activation="silu"), "bf16")


def test_matmul_i8_gives_exact_i32() -> None:
    rng = np.random.default_rng(3)
    a, b = make(rng, (2, 21, 70), "i8"), make(rng, (2, 70, 13), "i8")
    bias = rng.integers(-1000, 1000, 13).astype(np.int32)
    y = ops.matmul(a, b, bias, "relu")
    assert y.dtype == np.int32
    assert (y == ref.matmul(a, b, bias, "relu")).all()


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_softmax_any_axis(dtype: str) -> None:
    x = make(np.random.default_rng(4), (3, 5, 37), dtype)
    close(ops.softmax(x), ref.softmax(x), dtype)
    close(ops.softmax(x, axis=1), ref.softmax(x, axis=1), dtype)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_norms(dtype: str) -> None:
    rng = np.random.default_rng(5)
    x, w, b = make(rng, (2, 7, 131), dtype), make(rng, (131,), "f32"), make(rng, (131,), "f32")
    close(ops.layer_norm(x, w, b), ref.layer_norm(x, w, b), dtype)
    close(ops.rms_norm(x, w, eps=1e-3), ref.rms_norm(x, w, eps=1e-3), dtype)
    xd = ref.as_f64(x)
    _, mean, rstd = norms.layer_norm_forward(x, w, b)
    close(mean, xd.mean(-1), "f32")
    close(rstd, 1 / np.sqrt(xd.var(-1) + 1e-5), "f32")
    _, rstd = norms.rms_norm_forward(x, w)
    close(rstd, 1 / np.sqrt((xd * xd).mean(-1) + 1e-6), "f32")


@pytest.mark.parametrize("causal", [False, True])
def test_attention_ragged_sequence(causal: bool) -> None:
    rng = np.random.default_rng(6)
    q, k, v = (make(rng, (1, 2, 77, 64), "f16") for _ in range(3))
    close(ops.attention(q, k, v, causal=causal), ref.attention(q, k, v, causal=causal), "f16",
          ref.ATTENTION_TOLERANCE)


@pytest.mark.parametrize("dtype, shape, k, stride, padding", [
    ("f32", (2, 3, 17, 23), 3, 1, 1), ("f16", (1, 2, 40, 70), 5, 2, 2), ("f32", (1, 1, 9, 9), 1, 1, 0)])
def test_depthwise_conv2d(dtype: str, shape, k: int, stride: int, padding: int) -> None:
    rng = np.random.default_rng(9)
    x, w = make(rng, shape, dtype), make(rng, (shape[1], 1, k, k), "f32")
    close(ops.depthwise_conv2d(x, w, stride, padding), ref.depthwise_conv2d(x, w, stride, padding), dtype)


def test_torch_cpu_tensors_in_give_torch_tensors_out() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    x = make(rng, (4, 33), "f32", kind="torch").requires_grad_(True)
    y = ops.softmax(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and tuple(y.shape) == (4, 33)
    close(y, ref.softmax(x), "f32")
    w = make(rng, (33,), "bf16")
    y = ops.rms_norm(x.detach().to(torch.bfloat16), w)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    close(y, ref.rms_norm(x.detach().to(torch.bfloat16), w), "bf16")


def test_torch_i8_matmul_with_an_i8_bias() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    a, b, bias = make(rng, (5, 40), "i8", "torch"), make(rng, (40, 7), "i8", "torch"), make(rng, (7,), "i8", "torch")
    y = ops.matmul(a, b, bias, "relu")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.int32
    assert (ref.as_f64(y) == ref.matmul(a, b, bias, "relu")).all()


def test_non_contiguous_and_other_host_arrays() -> None:
    x = make(np.random.default_rng(8), (40, 24), "f32")
    close(ops.softmax(x.T), ref.softmax(x.T), "f32")
    xp = pytest.importorskip("array_api_strict")
    y = ops.softmax(xp.asarray(x))
    assert isinstance(y, np.ndarray)  # other libraries' host arrays give NumPy arrays
    close(y, ref.softmax(x), "f32")


@pytest.mark.parametrize("call, argument", [
    (lambda: ops.matmul(np.zeros((3, 4), np.float64), np.zeros((4, 5), np.float64)), "a"),
    (lambda: ops.matmul(np.zeros((3, 4), np.float32), np.zeros((5, 5), np.float32)), "b"),
    (lambda: ops.matmul(np.zeros((3, 4), np.float32), np.zeros((4, 5), np.float16)), "b"),
    (lambda: ops.matmul(np.zeros((3, 4), np.float32), np.zeros((4, 5), np.float32), np.zeros(4, np.float32)), "bias"),
    (lambda: ops.matmul(np.zeros((3, 4), np.float32), np.zeros((4, 5), np.float32), activation="tanh"), "activation"),
    (lambda: ops.matmul(np.zeros((3, 4), np.int8), np.zeros((4, 5), np.int8), activation="gelu"), "activation"),
    (lambda: ops.matmul(np.zeros(4, np.float32), np.zeros((4, 5), np.float32)), "a"),
    (lambda: ops.matmul([[1.0]], np.zeros((1, 1), np.float32)), "a"),
    (lambda: ops.softmax(np.zeros((3, 4), np.int32)), "x"),
    (lambda: ops.softmax(np.zeros((3, 4), np.float32), axis=2), "axis"),
    (lambda: ops.layer_norm(np.zeros((3, 4), np.float32), np.ones(5, np.float32), np.zeros(4, np.float32)), "weight"),
    (lambda: ops.layer_norm(np.zeros((3, 4), np.float32), None, np.zeros(3, np.float32)), "bias"),
    (lambda: ops.rms_norm(np.zeros((3, 4), np.float32), np.ones(4, np.float32), eps=-1.0), "eps"),
    (lambda: ops.attention(*(np.zeros((1, 1, 8, 64), np.float32),) * 3), "q"),
    (lambda: ops.attention(*(np.zeros((1, 1, 8, 32), np.float16),) * 3), "q"),
    (lambda: ops.attention(np.zeros((1, 1, 8, 64), np.float16), np.zeros((1, 1, 9, 64), np.float16),
                           np.zeros((1, 1, 8, 64), np.float16)), "k"),
    (lambda: ops.attention(*(np.zeros((1, 1, 8, 64), np.float16),) * 3, causal=1), "causal"),
    (lambda: ops.depthwise_conv2d(np.zeros((1, 2, 8, 8), np.float32), np.zeros((3, 1, 3, 3), np.float32)), "w"),
    (lambda: ops.depthwise_conv2d(np.zeros((2, 8, 8), np.float32), np.zeros((2, 1, 3, 3), np.float32)), "x"),
    (lambda: ops.depthwise_conv2d(np.zeros((1, 2, 2, 2), np.float32), np.zeros((2, 1, 3, 3), np.float32)), "x"),
    (lambda: ops.depthwise_conv2d(np.zeros((1, 2, 8, 8), np.float32), np.zeros((2, 1, 3, 3), np.float32), 0), "stride"),
    (lambda: ops.depthwise_conv2d(np.zeros((1, 2, 8, 8), np.float32), np.zeros((2, 1, 3, 3), np.float32), 1, -1),
     "padding"),
])
def test_bad_arguments_are_named(call, argument: str) -> None:
    with pytest.raises(OpArgumentError, match=f"argument '{argument}'") as e:
        call()
    assert e.value.argument == argument


def test_empty_inputs_give_empty_results() -> None:
    assert ops.matmul(np.zeros((0, 4), np.float32), np.zeros((4, 5), np.float32)).shape == (0, 5)
    assert ops.softmax(np.zeros((3, 0), np.float32)).shape == (3, 0)
    k0 = ops.matmul(np.zeros((2, 0), np.float32), np.zeros((0, 3), np.float32), np.ones(3, np.float32))
    assert (k0 == 1.0).all()


@pytest.mark.parametrize("doc", ["README.md", "docs/ops.md"])
def test_the_documented_examples_run(doc: str) -> None:
    from tests.conftest import ROOT

    text = (ROOT / doc).read_text()
    start = text.index("```python\nimport numpy as np\nfrom tessera import ops\n") + len("```python\n")
    scope: dict = {}
    exec(compile(text[start:text.index("```", start)], doc, "exec"), scope)
    assert scope["y"].dtype == np.float16


def test_a_second_call_compiles_nothing(monkeypatch) -> None:
    from tessera import variant

    x = make(np.random.default_rng(11), (3, 50), "f32")
    ops.softmax(x)

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(variant, "compile_spec", no_compile)
    close(ops.softmax(x + 1), ref.softmax(x + 1), "f32")


def test_aligned_shapes_take_the_aligned_variants() -> None:
    # Rows and strides that are multiples of 16 elements launch the 16-byte-aligned variants.
    rng = np.random.default_rng(12)
    a, b, bias = make(rng, (40, 64), "f16"), make(rng, (64, 48), "f16"), make(rng, (48,), "f32")
    close(ops.matmul(a, b, bias, "relu"), ref.matmul(a, b, bias, "relu"), "f16")
    x, w = make(rng, (5, 128), "f16"), make(rng, (128,), "f32")
    close(ops.softmax(x), ref.softmax(x), "f16")
    close(ops.layer_norm(x, w, w), ref.layer_norm(x, w, w), "f16")
    img, filt = make(rng, (1, 2, 20, 32), "f32"), make(rng, (2, 1, 3, 3), "f32")
    close(ops.depthwise_conv2d(img, filt, 1, 1), ref.depthwise_conv2d(img, filt, 1, 1), "f32")
