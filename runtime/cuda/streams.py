"""Which CUDA stream a launch runs on (spec section 17).

`stream=` is a raw `CUstream` handle (an int, or a cuda-bindings `CUstream`), an object with
`__cuda_stream__` (the CUDA stream protocol: it returns `(version, handle)`), a `torch.cuda.Stream`
or a CuPy stream: `handle_of`. Without `stream=`, a launch runs on the current stream of the
library that owns its device arrays, as that library's own operations would: PyTorch's current
stream on the tensor's device, CuPy's current stream; the default stream (0) otherwise:
`current_stream`. Neither module imports PyTorch or CuPy: an object of theirs exists only once the
caller has imported them, so they are looked up in `sys.modules`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from tessera.base.errors import LaunchError

_HANDLE_LIMIT = 2**64


def _checked(handle: Any, stream: Any, how: str) -> int:
    if isinstance(handle, bool) or not isinstance(handle, int) or not 0 <= handle < _HANDLE_LIMIT:
        raise LaunchError(f"stream=: {how} of {type(stream).__name__} gave {handle!r}, not a stream handle "
                          "(an unsigned integer)"[:300])
    return handle


def handle_of(stream: Any) -> int:
    """The raw handle of a `stream=` argument; LaunchError naming `stream=` for anything else."""
    if type(stream) is int and 0 <= stream < _HANDLE_LIMIT:
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        try:
            got = protocol()
        except Exception as e:
            raise LaunchError(f"stream=: {type(stream).__name__}.__cuda_stream__() failed: {e}"[:300]) from None
        if not isinstance(got, tuple) or len(got) != 2:
            raise LaunchError(f"stream=: {type(stream).__name__}.__cuda_stream__() must return (version, handle), "
                              f"not {got!r}"[:300])
        return _checked(got[1], stream, "__cuda_stream__()")
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(stream, torch.cuda.Stream):
        return _checked(stream.cuda_stream, stream, ".cuda_stream")
    if "cupy" in sys.modules and type(stream).__module__.startswith("cupy") and hasattr(stream, "ptr"):
        return _checked(stream.ptr, stream, ".ptr")  # Stream and ExternalStream (sibling classes)
    if type(stream).__name__ == "CUstream" and type(stream).__module__.startswith("cuda."):
        return _checked(int(stream), stream, "int()")
    raise LaunchError(f"stream= must be a CUstream handle (an int or a cuda-bindings CUstream), a torch.cuda.Stream, "
                      f"a CuPy stream or an object with __cuda_stream__, not {type(stream).__name__}")


def current_stream(arrays: Iterable[Any]) -> int:
    """The current stream of the library owning the first of `arrays` that PyTorch or CuPy owns (a
    CUDA tensor: PyTorch's on its device; a CuPy array: CuPy's), else the default stream (0)."""
    torch, cupy = sys.modules.get("torch"), sys.modules.get("cupy")
    if torch is None and cupy is None:
        return 0
    for a in arrays:
        if torch is not None and isinstance(a, torch.Tensor) and a.is_cuda:
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton's launcher reads: 0.3 us
            device = a.get_device()
            return int(raw(device)) if raw is not None else int(torch.cuda.current_stream(device).cuda_stream)
        if cupy is not None and isinstance(a, cupy.ndarray):
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


__all__ = ["current_stream", "handle_of"]
