"""The tensor maps of sm_90a kernels (spec section 16), built by the runtime at launch without a GPU:
the CUDA backend's Python side on `FakeDriver` (bench/interop_launch.py), with the arguments given to
`cuTensorMapEncodeTiled` checked against what the driver API's documentation requires (dimensions
innermost first, byte strides of the outer dimensions, the box, element strides of 1, and the
interleave, swizzle, L2-promotion and out-of-bound-fill enums), one map per tensor and box, cached."""

from __future__ import annotations

import ctypes

import pytest

import tessera
from tessera.base.errors import LaunchError, SourceFile
from tessera.base.kernel_info import kernels_from_json, kernels_to_json
from tessera.base.options import CompileOptions
from tessera.runtime import device_arrays
from tessera.runtime.cuda import backend as cuda_backend
from tessera.runtime.cuda import driver, tensor_maps
from tessera.transpile.driver import compile_source
from tests.conftest import ROOT, load_script

drv_enums = pytest.importorskip("cuda.bindings.driver")
il = load_script("bench/interop_launch.py", "interop_launch")

GEMM = (ROOT / "samples" / "tc_gemm_f16.tsr").read_text()


class MapDriver(il.FakeDriver):
    """FakeDriver with the tensor-map enums of cuda-bindings and a `cuTensorMapEncodeTiled` that
    records its arguments and returns a map whose 16 words number the call."""

    CUtensorMapDataType = drv_enums.CUtensorMapDataType
    CUtensorMapInterleave = drv_enums.CUtensorMapInterleave
    CUtensorMapSwizzle = drv_enums.CUtensorMapSwizzle
    CUtensorMapL2promotion = drv_enums.CUtensorMapL2promotion
    CUtensorMapFloatOOBfill = drv_enums.CUtensorMapFloatOOBfill

    def __init__(self) -> None:
        super().__init__(peek=4)
        self.encoded: list[tuple] = []

    def cuTensorMapEncodeTiled(self, *args):  # noqa: N802
        self.encoded.append(args)
        n = len(self.encoded)

        class Map:
            opaque = [n * 100 + k for k in range(16)]
        return (self.CUresult.CUDA_SUCCESS, Map())


@pytest.fixture
def fake(monkeypatch, tmp_path_factory):
    drv = MapDriver()
    monkeypatch.setattr(driver, "_DRV", drv)
    monkeypatch.setattr(driver, "_DEVICE", driver.Device(0, il.FakeDriver.CUdevice(0), object(), "sm_90", "fake"))
    monkeypatch.setattr(driver, "_LOADED", {})
    monkeypatch.setattr(tensor_maps, "_CACHE", {})
    monkeypatch.setattr(cuda_backend.CudaBackend, "status", lambda self: (True, "a fake driver"))
    monkeypatch.setattr(device_arrays, "_TORCH_DTYPES", {})
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tmap-cache"))
    monkeypatch.delenv("TESSERA_BACKEND", raising=False)
    return drv


# 64 tiles are not whole warpgroups: tmma stays mma.sync and the copies go to the TMA unswizzled (with
# 128 or 256 tiles the sample's tmma is a warpgroup MMA, whose operands the TMA writes swizzled)
TMA_TILING = {"BM": 64, "BN": 64, "BK": 32, "stages": 3, "NT": 64}

def _device(shape: tuple[int, ...], ptr: int, typestr: str = "<f2") -> object:
    class Arr:
        __cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "strides": None,
                                    "version": 3}
    return Arr()


def test_a_launch_builds_one_map_per_tensor_and_box_with_the_documented_arguments(fake) -> None:
    mod = tessera.compile(GEMM, backend="cuda", arch="sm_90a")
    k = mod.tc_gemm_f16
    M, N, K = 300, 272, 96  # K and N multiples of 16: the aligned variant
    A, B, C = _device((M, K), 0x10000000), _device((K, N), 0x20000000), _device((M, N), 0x30000000, "<f4")
    k(A, B, C, **TMA_TILING, grid=((N + 63) // 64, (M + 63) // 64))
    assert len(fake.encoded) == 2
    E = drv_enums
    a, b = fake.encoded
    assert a == (E.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, 0x10000000, [K, M], [K * 2], [32, 64],
                 [1, 1], E.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                 E.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
                 E.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                 E.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    assert b[:7] == (E.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, 0x20000000, [N, K], [N * 2],
                     [64, 32], [1, 1])
    launch = [c for c in fake.calls if c[0] == "cuLaunchKernel"][-1]
    assert launch[-1][:3] == (0x10000000, 0x20000000, 0x30000000)
    # The same arrays again: the maps come from the cache.
    k(A, B, C, **TMA_TILING, grid=((N + 63) // 64, (M + 63) // 64))
    assert len(fake.encoded) == 2


def test_the_maps_follow_the_parameters_as_128_byte_values(fake) -> None:
    info = tessera.base.kernel_info.KernelInfo(
        "k", "k_a16", (tessera.base.kernel_info.ParamInfo("X", "tensor", "f32", ("n", 64, 32)),
                       tessera.base.kernel_info.ParamInfo("n", "shape", "i32")),
        (128,), 0, (), 1, tensor_maps=(("X", (2, 64, 32), 0), ("X", (1, 16, 32), 0)))
    values = tensor_maps.map_params(fake, info, {"n": 5}, {"X": 0x40000000})
    assert [ctypes.sizeof(v) for v in values] == [128, 128]
    assert list(values[0])[:2] == [100, 101] and list(values[1])[:2] == [200, 201]
    first = fake.encoded[0]
    assert first[1:7] == (3, 0x40000000, [32, 64, 5], [128, 128 * 64], [32, 64, 2], [1, 1, 1])
    assert first[0] == drv_enums.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32


@pytest.mark.parametrize("dtype,member", [("bf16", "BFLOAT16"), ("i8", "UINT8"), ("u16", "UINT16"),
                                          ("i32", "INT32"), ("f64", "FLOAT64"), ("u64", "UINT64")])
def test_element_types(fake, dtype: str, member: str) -> None:
    args = tensor_maps.encode_args(fake, "X", dtype, 0x1000, (64, 64), (16, 16), 0)
    assert args[0] == getattr(drv_enums.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{member}")
    size = tensor_maps.DATA_TYPES[dtype][1]
    assert args[4] == [64 * size]


@pytest.mark.parametrize("swizzle,member", [(0, "NONE"), (32, "32B"), (64, "64B"), (128, "128B")])
def test_swizzle_modes(fake, swizzle: int, member: str) -> None:
    inner = swizzle // 2 or 64  # f16: the box's innermost extent is the mode's span
    args = tensor_maps.encode_args(fake, "X", "f16", 0x1000, (64, 64), (8, inner), swizzle)
    assert args[8] == getattr(drv_enums.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{member}")
    assert args[5] == [inner, 8]


@pytest.mark.parametrize("swizzle,box", [(32, (8, 32)), (64, (8, 64)), (128, (8, 128)), (16, (8, 8))])
def test_a_box_wider_than_the_swizzle_span_is_refused(fake, swizzle: int, box) -> None:
    """The driver API: with a swizzle, the box's innermost extent in bytes is at most the span."""
    with pytest.raises(tessera.TesseraError, match="'X' with swizzle"):
        tensor_maps.encode_args(fake, "X", "f16", 0x1000, (64, 256), box, swizzle)


def test_a_warpgroup_mma_kernel_swizzles_its_maps(fake) -> None:
    """128 and 256 tiles: the GEMM's tmma is a warpgroup MMA reading As (f16[128, 32], rows of 64
    bytes: the 64-byte mode) and Bs (f16[32, 128], rows of 256 bytes: the 128-byte mode in two panels
    of 64 columns); the maps swizzle as those arrays are laid out, one box per panel."""
    mod = tessera.compile(GEMM, backend="cuda", arch="sm_90a")
    M, N, K = 256, 256, 96
    A, B, C = _device((M, K), 0x10000000), _device((K, N), 0x20000000), _device((M, N), 0x30000000, "<f4")
    mod.tc_gemm_f16(A, B, C, BM=128, BN=128, BK=32, stages=3, NT=256, grid=(2, 2))
    E = drv_enums.CUtensorMapSwizzle
    assert [(e[5], e[8]) for e in fake.encoded] == [([32, 128], E.CU_TENSOR_MAP_SWIZZLE_64B),
                                                   ([64, 32], E.CU_TENSOR_MAP_SWIZZLE_128B)]
    kernels = compile_source(SourceFile("g.tsr", GEMM), CompileOptions(arch="sm_90a"),
                             variants={"tc_gemm_f16": {"BM": 128, "BN": 128, "BK": 32, "stages": 3, "NT": 256}}).kernels
    assert kernels[1].tensor_maps == (("A", (128, 32), 64), ("B", (32, 64), 128))
    assert kernels_from_json(kernels_to_json(kernels)) == kernels


@pytest.mark.parametrize("address,shape,match", [(0x1008, (64, 64), "16-byte aligned"),
                                                 (0x1000, (64, 60), "multiples of 16 bytes")])
def test_misaligned_tensors_are_refused_naming_them(fake, address: int, shape, match: str) -> None:
    with pytest.raises(LaunchError, match=f"'X'.*{match}"):
        tensor_maps.encode_args(fake, "X", "f16", address, shape, (16, 16), 0)


def test_no_maps_without_bulk_copies(fake) -> None:
    mod = tessera.compile(GEMM, backend="cuda", arch="sm_90")
    A, B, C = _device((128, 64), 0x10000000), _device((64, 128), 0x20000000), _device((128, 128), 0x30000000, "<f4")
    mod.tc_gemm_f16(A, B, C, BM=128, BN=128, BK=32, stages=3, grid=(1, 1))
    assert fake.encoded == []


def test_the_aligned_variant_describes_its_maps() -> None:
    kernels = compile_source(SourceFile("g.tsr", GEMM), CompileOptions(arch="sm_90a"),
                             variants={"tc_gemm_f16": TMA_TILING}).kernels
    assert [(k.aligned, k.tensor_maps) for k in kernels] == [
        (False, ()), (True, (("A", (64, 32), 0), ("B", (32, 64), 0)))]
    assert kernels_from_json(kernels_to_json(kernels)) == kernels
