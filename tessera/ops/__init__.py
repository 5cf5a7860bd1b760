"""`tessera.ops`: operators written in `.tsr`, shipped with the package, autotuned (spec sections 9
and 17). Each takes NumPy arrays, PyTorch tensors or CuPy arrays and returns the same kind:

    from tessera import ops
    y = ops.matmul(a, b, bias=None, activation=None)      # None, "relu", "gelu" or "silu"
    y = ops.softmax(x, axis=-1)
    y = ops.layer_norm(x, weight, bias, eps=1e-5)
    y = ops.rms_norm(x, weight, eps=1e-6)
    o = ops.attention(q, k, v, causal=False, scale=None)   # [B, H, N, D], D in 64 / 128
    y = ops.depthwise_conv2d(x, w, stride=1, padding=0)   # NCHW, w [C, 1, KH, KW]

Arrays in host memory run on `backend="auto"` (CUDA where there is a GPU, else the CPU backend;
$TESSERA_BACKEND overrides it); arrays in CUDA memory run on CUDA, on the current stream of their
library. A wrong element type or shape raises `OpArgumentError` (a `tessera.TesseraError`) naming
the argument. docs/ops.md lists element types, tolerances and tuning knobs.

The kernels are in `tessera/ops/kernels/*.tsr`; `tessera.ops.torch` (another module) registers
these functions as PyTorch custom operators.
"""

from tessera.ops.arrays import OpArgumentError
from tessera.ops.attention import attention
from tessera.ops.conv import depthwise_conv2d
from tessera.ops.linalg import matmul
from tessera.ops.norms import layer_norm, rms_norm, softmax

__all__ = ["OpArgumentError", "attention", "depthwise_conv2d", "layer_norm", "matmul", "rms_norm", "softmax"]
