"""The CUDA backend: emitted CUDA C -> NVRTC (cubin for the device, cached on disk) -> the
cuda-python driver API: module load, argument packing, launch, copies and timing.

Everything up to the driver call (compilation, caching, argument packing) is usable without a
GPU; the driver part runs only where `runtime.devices.cuda_status()` finds a device.
"""

from __future__ import annotations

import ctypes
import statistics
import struct
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.base.errors import LaunchError, TesseraError
from tessera.base.kernel_info import KernelInfo
from tessera.runtime.cuda.streams import current_stream, handle_of
from tessera.runtime.cuda.tensor_maps import map_params
from tessera.runtime.launch_args import Bound, check_shared

_SCALAR_CTYPES: dict[str, Any] = {"bool": ctypes.c_bool, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
                  "i64": ctypes.c_int64, "u8": ctypes.c_uint8, "u16": ctypes.c_uint16, "u32": ctypes.c_uint32,
                  "u64": ctypes.c_uint64, "f16": ctypes.c_float, "bf16": ctypes.c_float, "f32": ctypes.c_float,
                  "f64": ctypes.c_double}
STATIC_SMEM_LIMIT = 48 * 1024


def param_types(info: KernelInfo) -> list[Any]:
    """The ctypes type of each C parameter of the kernel, in order (device pointers as u64)."""
    return [ctypes.c_uint64 if p.kind == "tensor" else ctypes.c_int32 if p.kind == "shape" else _SCALAR_CTYPES[p.dtype]
            for p in info.params]


def pack_params(info: KernelInfo, bound: Bound, pointers: dict[str, int]) -> list[Any]:
    """One ctypes value per C parameter of the kernel, in order (device pointers as u64), then the
    tensor maps of its bulk tensor copies (sm_90a, tensor_maps.py)."""
    values: list[Any] = [t(pointers[p.name] if p.kind == "tensor" else bound.shapes[p.name] if p.kind == "shape"
                           else bound.scalars[p.name]) for t, p in zip(param_types(info), info.params)]
    if info.tensor_maps:
        values += map_params(_driver(), info, bound.shapes, pointers)
    return values


_IMAGE_TAGS = {b"cubin": "cubin", b"ptx\x00\x00": "ptx"}


def load_image(key: str) -> bytes | None:
    """A cached image (cubin, or NUL-terminated PTX) by its key."""
    from tessera.runtime.cache.disk import DiskCache

    hit = DiskCache("cuda").get_bytes(key)
    return hit[5:] if hit is not None and hit[:5] in _IMAGE_TAGS else None


def compile_for_device(cuda: str, arch: str, *, line_info: bool = False) -> tuple[str, bytes]:
    """(cache key, image): a cubin for `arch`, or PTX when NVRTC is older than the device. Cached
    on disk by source, arch, options, NVRTC version and the Tessera fingerprint."""
    from tessera.runtime.cache.disk import DiskCache, cache_key
    from tessera.runtime.cache.fingerprint import fingerprint
    from tessera.runtime.cuda.nvrtc import compile_cuda, nvrtc_version

    opts = f"line_info={line_info}"
    key = cache_key("cuda-image", fingerprint(), cuda, arch, opts, ".".join(map(str, nvrtc_version())))
    hit = load_image(key)
    if hit is not None:
        return key, hit
    result = compile_cuda(cuda, name="tessera.cu", arch=arch, line_info=line_info)
    tag, image = (b"cubin", result.cubin) if result.cubin is not None else (b"ptx\x00\x00", result.ptx.encode() + b"\x00")
    DiskCache("cuda").put_bytes(key, tag + image)
    return key, image


# ---- the driver ---------------------------------------------------------------------------------


_DRV: Any = None


def _driver():
    """cuda-bindings' driver module (imported once: a launch asks for it several times)."""
    global _DRV
    if _DRV is None:
        from cuda.bindings import driver

        _DRV = driver
    return _DRV


def _check(result: Any, what: str, kernel: str = "") -> Any:
    """cuda-python returns (status, *values); raise LaunchError on a non-success status."""
    drv = _driver()
    status, *values = result if isinstance(result, tuple) else (result,)
    if status != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(status)
        _, text = drv.cuGetErrorString(status)
        prefix = f"{kernel}: " if kernel else ""
        raise LaunchError(f"{prefix}{what} failed: {name.decode() if name else status} "
                          f"({text.decode() if text else 'no description'})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@dataclass
class Device:
    ordinal: int
    handle: Any
    context: Any
    arch: str
    name: str


_DEVICE: Device | None = None
_ORDINAL = 0


def use_ordinal(ordinal: int) -> None:
    """Use device `ordinal` instead of 0 (tessera.dist: one device per process of a job); only
    before the device is first used."""
    global _ORDINAL
    if _DEVICE is not None and _DEVICE.ordinal != ordinal:
        raise TesseraError(f"device {_DEVICE.ordinal} is already in use; choose a device before the first launch")
    _ORDINAL = ordinal


def device() -> Device:
    """The current device with its primary context made current (created once per process)."""
    global _DEVICE
    if _DEVICE is None:
        drv = _driver()
        _check(drv.cuInit(0), "cuInit")
        dev = _check(drv.cuDeviceGet(_ORDINAL), "cuDeviceGet")
        major = _check(drv.cuDeviceGetAttribute(
            drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
        minor = _check(drv.cuDeviceGetAttribute(
            drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
        ctx = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        name = _check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
        _DEVICE = Device(_ORDINAL, dev, ctx, f"sm_{major}{minor}", name.split(b"\0")[0].decode(errors="replace"))
    _check(_driver().cuCtxSetCurrent(_DEVICE.context), "cuCtxSetCurrent")
    return _DEVICE


class CudaLibrary:
    """A loaded CUDA module with a function handle per kernel (cached per process)."""

    def __init__(self, image: bytes, kernels: tuple[KernelInfo, ...]) -> None:
        drv = _driver()
        device()
        self.module = _check(drv.cuModuleLoadData(image), "cuModuleLoadData")
        self.functions: dict[str, Any] = {}
        self.opted_in: dict[str, int] = {}  # kernel -> the dynamic shared memory it may use, above 48 KiB
        for k in kernels:
            f = _check(drv.cuModuleGetFunction(self.module, k.c_name.encode()), "cuModuleGetFunction", k.name)
            if k.dynamic_smem > STATIC_SMEM_LIMIT:
                _check(drv.cuFuncSetAttribute(
                    f, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k.dynamic_smem),
                    "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", k.name)
                self.opted_in[k.name] = k.dynamic_smem
            self.functions[k.name] = f
        self.params: dict[str, _Params] = {}  # kernel -> its parameter holders (launches with device arrays)

    def direct(self, info: KernelInfo, nargs: int, check_bounds: bool) -> Any:
        """The direct launcher of `info` for `nargs` positional arguments (runtime/backends.py
        `Library.direct`; runtime/cuda/direct.py)."""
        from tessera.runtime.cuda.direct import direct_launcher

        return direct_launcher(self, info, nargs, sys.modules[__name__])

    def holders(self, info: KernelInfo) -> _Params:
        """The parameter holders of `info` (made on its first launch with device arrays)."""
        params = self.params.get(info.name)
        if params is None:
            params = self.params[info.name] = _Params(info, self.functions[info.name])
        return params

    def _upload(self, info: KernelInfo, bound: Bound, stream: int, allocations: list) -> tuple[dict[str, int], list]:
        """Device pointers of every tensor argument (device arrays and managed NumPy arrays used in
        place; other NumPy arrays copied in, on `stream`), and the (array, device pointer) pairs of
        the `mut` NumPy arrays to copy back."""
        from tessera.runtime.managed import is_managed

        drv = _driver()
        pointers: dict[str, int] = {}
        copy_back: list[tuple[np.ndarray, Any]] = []
        for name, arr in bound.arrays.items():
            if not isinstance(arr, np.ndarray) or is_managed(arr):
                pointers[name] = bound.address(name)
                continue
            dptr = _check(drv.cuMemAlloc(max(1, arr.nbytes)), "cuMemAlloc", info.name)
            allocations.append(dptr)
            if arr.nbytes:
                _check(drv.cuMemcpyHtoDAsync(dptr, bound.address(name), arr.nbytes, stream), "cuMemcpyHtoDAsync",
                       info.name)
            pointers[name] = int(dptr)
            if any(p.name == name and p.mut for p in info.params):
                copy_back.append((arr, dptr))
        return pointers, copy_back

    def _launch(self, info: KernelInfo, bound: Bound, argv: int, stream: int) -> None:
        """cuLaunchKernel with the `void*[]` at address `argv`, on `stream`."""
        f = self.functions[info.name]
        if bound.smem > self.opted_in.get(info.name, STATIC_SMEM_LIMIT):
            self._opt_in(info, bound, f)
        grid, block = bound.grid, _block(info)
        result = _DRV.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], bound.smem, stream,
                                     argv, 0)
        if result[0] != _DRV.CUresult.CUDA_SUCCESS:
            _check(result, "cuLaunchKernel", info.name)

    def _opt_in(self, info: KernelInfo, bound: Bound, f: Any) -> None:
        """Let the kernel use the dynamic shared memory of this launch (launch-sized arrays), or
        refuse the launch where the device has less."""
        drv = _driver()
        limit = _check(drv.cuDeviceGetAttribute(
            drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device().handle),
            "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)", info.name)
        check_shared(info, bound, int(limit), f"device {device().name}")
        _check(drv.cuFuncSetAttribute(
            f, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bound.smem),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", info.name)
        self.opted_in[info.name] = bound.smem

    def launch(self, info: KernelInfo, bound: Bound, *, stream: Any = None, check_bounds: bool = False,
               timeout: float | None = None) -> None:
        """Launch on `stream` (streams.py `handle_of`), else on the current stream of the library
        owning the device arrays (streams.py `current_stream`). With device arrays only (or an
        explicit stream) the call returns at once, as a CUDA launch does: errors of the running
        kernel surface at the next synchronizing call. NumPy arguments are copied in, `mut` ones
        back, and the call waits for the kernel (also where there are no arrays at all)."""
        if timeout is not None:
            raise LaunchError(f"{info.name}(): timeout= is supported on the CPU backend only (a running GPU "
                              "kernel cannot be cancelled)")
        if _DRV is None:
            _driver()
        arrays = bound.arrays
        handle = handle_of(stream) if stream is not None else current_stream(arrays.values())
        for a in arrays.values():
            if isinstance(a, np.ndarray):
                break
        else:
            if info.tensor_maps:  # device arrays only, with tensor maps: no reusable parameter buffer
                argv = _argv(pack_params(info, bound, {name: bound.address(name) for name in arrays}))
                self._launch(info, bound, ctypes.addressof(argv), handle)
                return
            if arrays or stream is not None:
                self.holders(info).launch(self, info, bound, handle)
                return
        self._launch_and_wait(info, bound, handle)

    def _launch_and_wait(self, info: KernelInfo, bound: Bound, stream: int) -> None:
        drv = _driver()
        allocations: list[Any] = []
        waited = False
        try:
            pointers, copy_back = self._upload(info, bound, stream, allocations)
            argv = _argv(pack_params(info, bound, pointers))
            self._launch(info, bound, ctypes.addressof(argv), stream)
            _check(drv.cuStreamSynchronize(stream), "kernel execution", info.name)
            waited = True
            for arr, dptr in copy_back:
                if arr.nbytes:
                    _check(drv.cuMemcpyDtoH(arr.ctypes.data, dptr, arr.nbytes), "cuMemcpyDtoH", info.name)
        finally:
            _free(allocations, stream, waited)

    def benchmark(self, info: KernelInfo, bound: Bound, *, repeat: int = 20, warmup: int = 3,
                  stream: Any = None) -> float:
        """Median milliseconds per launch, measured with CUDA events (arrays stay on the device), on
        the stream a launch would use."""
        drv = _driver()
        handle = handle_of(stream) if stream is not None else current_stream(bound.arrays.values())
        allocations: list[Any] = []
        try:
            pointers, _ = self._upload(info, bound, handle, allocations)
            argv = _argv(pack_params(info, bound, pointers))
            start = _check(drv.cuEventCreate(0), "cuEventCreate")
            stop = _check(drv.cuEventCreate(0), "cuEventCreate")
            times = []
            for i in range(warmup + repeat):
                _check(drv.cuEventRecord(start, handle), "cuEventRecord")
                self._launch(info, bound, ctypes.addressof(argv), handle)
                _check(drv.cuEventRecord(stop, handle), "cuEventRecord")
                _check(drv.cuEventSynchronize(stop), "kernel execution", info.name)
                if i >= warmup:
                    times.append(_check(drv.cuEventElapsedTime(start, stop), "cuEventElapsedTime"))
            drv.cuEventDestroy(start)
            drv.cuEventDestroy(stop)
            return statistics.median(times)
        finally:
            _free(allocations, handle, False)


def _free(allocations: list, stream: int, waited: bool) -> None:
    """Free a launch's copies; where the launch may still run (an error came first), after it."""
    if allocations:
        drv = _driver()
        if not waited:
            drv.cuStreamSynchronize(stream)
        for dptr in allocations:
            drv.cuMemFree(dptr)


_STRUCT_CODES = {"bool": "?", "i8": "b", "i16": "h", "i32": "i", "i64": "q", "u8": "B", "u16": "H", "u32": "I",
                 "u64": "Q", "f16": "f", "bf16": "f", "f32": "f", "f64": "d"}


class _Params:
    """A kernel's parameters as cuLaunchKernel takes them, for launches whose arrays are all on the
    device: one buffer holding every value (each at its C alignment, written by one `pack_into`)
    and the `void*[]` of their addresses, made once and reused (the driver reads the values during
    the call). A launch takes a set from the free list (a launch made meanwhile, on another thread
    or from a signal handler, makes its own set), fills it in and gives it back."""

    __slots__ = ("kinds", "layout", "free", "function", "block")

    def __init__(self, info: KernelInfo, function: Any) -> None:
        self.kinds = tuple((p.kind == "tensor", p.kind == "shape", p.name) for p in info.params)
        codes = ["Q" if p.kind == "tensor" else "i" if p.kind == "shape" else _STRUCT_CODES[p.dtype] for p in info.params]
        self.layout = struct.Struct("@" + "".join(codes))  # native alignment, as the C parameters have
        self.free: list[tuple[bytearray, ctypes.Array, int]] = []  # list.pop and list.append are atomic
        self.function, self.block = function, _block(info)

    def _new_set(self) -> tuple[bytearray, ctypes.Array, int]:
        """(the values' buffer, the `void*[]`, its address). The buffer is a bytearray (`pack_into`
        takes it without the format string a ctypes buffer builds at each export); the ctypes view
        of it, kept with the `void*[]`, gives its address and forbids resizing it."""
        codes = self.layout.format[1:]
        buffer = bytearray(max(1, self.layout.size))
        view = (ctypes.c_char * len(buffer)).from_buffer(buffer)
        offsets = [struct.calcsize("@" + codes[:i + 1]) - struct.calcsize(codes[i]) for i in range(len(codes))]
        argv = (ctypes.c_void_p * max(1, len(codes)))(*(ctypes.addressof(view) + o for o in offsets))
        argv._keep = view  # type: ignore[attr-defined]
        return buffer, argv, ctypes.addressof(argv)

    def launch(self, library: CudaLibrary, info: KernelInfo, bound: Bound, stream: int) -> None:
        """Launch with every array already on the device (their addresses in `bound`)."""
        free = self.free
        try:
            held = free.pop()
        except IndexError:
            held = self._new_set()
        arrays, addresses, shapes, scalars = bound.arrays, bound.addresses, bound.shapes, bound.scalars
        values = [(addresses[name][1] if addresses[name][0] is arrays[name] else bound.address(name)) if tensor
                  else shapes[name] if shape else scalars[name] for tensor, shape, name in self.kinds]
        try:
            try:
                self.layout.pack_into(held[0], 0, *values)
                argv = held[2]
            except (struct.error, OverflowError):  # an f32 scalar beyond f32's range: ctypes makes it inf
                kept = _argv([t(v) for t, v in zip(param_types(info), values)])
                argv = ctypes.addressof(kept)
            if bound.smem > library.opted_in.get(info.name, STATIC_SMEM_LIMIT):
                library._opt_in(info, bound, self.function)
            grid, block = bound.grid, self.block
            result = _DRV.cuLaunchKernel(self.function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                         bound.smem, stream, argv, 0)
            if result[0] != _DRV.CUresult.CUDA_SUCCESS:
                _check(result, "cuLaunchKernel", info.name)
        finally:
            free.append(held)


def _argv(params: list[ctypes._SimpleCData]) -> ctypes.Array:
    """The `void*[]` of addresses cuLaunchKernel takes (the values must outlive the launch)."""
    argv = (ctypes.c_void_p * max(1, len(params)))(*(ctypes.addressof(a) for a in params))
    argv._keep = params  # type: ignore[attr-defined]  # the values live as long as the array
    return argv


_LOADED: dict[str, CudaLibrary] = {}


def loaded_library(key: str, kernels: tuple[KernelInfo, ...], image: bytes | None = None) -> CudaLibrary:
    """The module for an image (read from the cache unless given), loaded once per process."""
    lib = _LOADED.get(key)
    if lib is None:
        image = image if image is not None else load_image(key)
        if image is None:
            raise TesseraError("a cached CUDA image disappeared while in use; load the module again")
        lib = _LOADED[key] = CudaLibrary(image, kernels)
    return lib


def _block(info: KernelInfo) -> tuple[int, int, int]:
    t = tuple(info.tile) + (1,) * (3 - len(info.tile))
    return t[0], t[1], t[2]


def device_pointer(obj: Any) -> int:
    """The device address of an object with `__cuda_array_interface__` or `__dlpack__` (used in place)."""
    from tessera.runtime.device_arrays import describe

    return describe(obj).ptr
