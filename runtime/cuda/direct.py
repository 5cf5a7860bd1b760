"""The CUDA backend's direct launcher (runtime/backends.py `Library.direct`): a repeated launch
with device arrays only (another library's CUDA arrays, used in place), its arguments checked
straight into the kernel's parameter values (runtime/direct_args.py), packed into the kernel's
reused parameter buffer (driver.py `_Params`) and launched on the stream the usual launch would
take (streams.py), without waiting. Anything else (NumPy arguments, which are copied, a
parameter value `struct` cannot pack, shared memory beyond what the kernel was opted in to) goes
the usual way (`CudaLibrary.launch`)."""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tessera.base.kernel_info import KernelInfo
from tessera.runtime.cuda.streams import current_stream, handle_of
from tessera.runtime.direct_args import make_checker

if TYPE_CHECKING:
    from tessera.runtime.cuda.driver import CudaLibrary

_HANDLE_LIMIT = 2**64


def direct_launcher(library: CudaLibrary, info: KernelInfo, nargs: int,
                    driver: ModuleType) -> Callable[[tuple, Any, Any], bool] | None:
    """`launcher(args, grid, stream)`: True once launched, False where the usual way must launch;
    None for a kernel without array parameters (its launches wait for the device). `driver` is
    runtime/cuda/driver.py, passed in (its `_DRV` read at each launch), not imported: no cycle."""
    check = make_checker(info, nargs, device=True)
    if check is None or not any(p.kind == "tensor" for p in info.params):
        return None
    params = library.holders(info)
    layout, free, function, smem, name = params.layout, params.free, params.function, info.dynamic_smem, info.name
    bx, by, bz = params.block
    if smem > library.opted_in.get(name, driver.STATIC_SMEM_LIMIT):
        return None
    modules = sys.modules

    def launch(args: tuple, grid: Any, stream: Any) -> bool:
        got = check(args, grid)
        if got is None:
            return False
        values, (gx, gy, gz), _ = got
        if stream is None:
            handle = current_stream(args) if "torch" in modules or "cupy" in modules else 0
        elif type(stream) is int and 0 <= stream < _HANDLE_LIMIT:
            handle = stream
        else:
            handle = handle_of(stream)
        try:
            held = free.pop()
        except IndexError:
            held = params._new_set()
        try:
            try:
                layout.pack_into(held[0], 0, *values)
            except (struct.error, OverflowError):  # an f32 scalar beyond f32's range: the usual way
                return False
            drv = driver._DRV
            result = drv.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, smem, handle, held[2], 0)
        finally:
            free.append(held)
        if result[0] != drv.CUresult.CUDA_SUCCESS:
            driver._check(result, "cuLaunchKernel", name)
        return True

    return launch
