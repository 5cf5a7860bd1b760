# The part of PyTorch's interface that tessera.ops.torch and tessera.ops.torch_autograd use, with
# PyTorch's own signatures: mypy reads this instead of the installed torch (mypy_path in
# pyproject.toml), which took it 30 s of CPU to analyse on every cold run of scripts/typecheck.py
# and is not there at all where PyTorch is not installed. A use of anything else of torch in the
# package is an error until it is added here.
from collections.abc import Sequence

from torch import library as library

__version__: str

class dtype: ...

float16: dtype
bfloat16: dtype
float32: dtype
float64: dtype
int8: dtype
int32: dtype
int64: dtype
uint8: dtype

class device: ...

_DType = dtype  # dtype itself inside Tensor, whose property has that name

class memory_format: ...

contiguous_format: memory_format

class Size(tuple[int, ...]): ...

class Tensor:
    @property
    def dtype(self) -> dtype: ...
    @property
    def shape(self) -> Size: ...
    @property
    def device(self) -> device: ...
    def dim(self) -> int: ...
    def contiguous(self, memory_format: memory_format = ...) -> Tensor: ...
    def new_empty(self, size: Sequence[int] | int, *, dtype: _DType | None = None) -> Tensor: ...
    def new_zeros(self, size: Sequence[int] | int, *, dtype: _DType | None = None) -> Tensor: ...

def empty_like(input: Tensor, *, dtype: dtype | None = None, memory_format: memory_format = ...) -> Tensor: ...
def broadcast_shapes(*shapes: Sequence[int]) -> Size: ...
