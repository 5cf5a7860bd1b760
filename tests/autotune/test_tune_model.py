"""The autotuner's cost model on tensor-core kernels (spec sections 9 and 12): `mma` work counted
per operand type, its shared-memory operand reads and fragment stores, and the roofline deciding
by the tensor-core peak of the architecture."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tessera.autotune.arch import arch_spec
from tessera.autotune.cost_count import count_work, global_footprint
from tessera.autotune.model import LAUNCH_US, Resources, estimate
from tessera.base.options import CompileOptions
from tessera.transpile.driver import compile_source, load_source
from tessera.transpile.lir import nodes as L
from tests.conftest import ROOT


def _kernel(sample: str, consts: dict[str, int] | None = None) -> L.Function:
    name = Path(sample).stem
    result = compile_source(load_source(str(ROOT / "samples" / sample)), options=CompileOptions(arch="sm_80", alignment="generic"),
                            variants={name: consts} if consts else None)
    assert isinstance(result.module, L.Module)
    return result.module.kernels[0]


@pytest.mark.parametrize("consts,shape", [
    ({}, (256, 256, 128)),
    ({"BM": 64, "BN": 256, "BK": 64, "stages": 2}, (512, 768, 320)),
], ids=["defaults", "64x256"])
def test_the_f16_gemm_counts_exactly_2mnk_tensor_core_operations(consts, shape) -> None:
    fn = _kernel("tc_gemm_f16.tsr", consts)
    c = {n.name: n.value for n in fn.consts}
    m, n, k = shape
    groups = (m // c["BM"]) * (n // c["BN"])
    work = count_work(fn, {"M": m, "N": n, "K": k}, groups)
    assert work.mma_f16 * groups == 2 * m * n * k
    assert work.mma_tf32 == work.mma_i8 == 0 and work.flops == 0  # nothing on the FMA pipes
    # Shared memory: each of the 8 warps reads its rows of A and columns of B (frag_layout.choose)
    # for every k; words per tile.
    from tessera.transpile.lir.frag_layout import choose

    lay = choose(c["BM"], c["BN"], 8)
    assert lay is not None
    assert work.shared_words * 256 == 8 * (lay.warp_m + lay.warp_n) * k * 2 / 4
    # Global: C stored from the fragment (BM * BN f32 per group) plus the tiles of A and B copied,
    # each k step once and the pipeline's prologue (stages - 1 copies, both branches of its `if`
    # counted as the larger) once more.
    tile_bytes = (c["BM"] * c["BK"] + c["BK"] * c["BN"]) * 2
    trips = -(-k // c["BK"])
    assert work.copy_bytes == c["BM"] * c["BN"] * 4 + (trips + c["stages"] - 1) * tile_bytes
    assert global_footprint(fn, {"M": m, "N": n, "K": k}) == (m * k + k * n) * 2 + m * n * 4


def test_each_operand_type_has_its_own_count() -> None:
    i8 = _kernel("tc_gemm_i8.tsr")
    w = count_work(i8, {"M": 256, "N": 256, "K": 128}, 4)
    assert w.mma_i8 * 4 == 2 * 256 * 256 * 128 and w.mma_f16 == w.mma_tf32 == 0
    bf16 = _kernel("tc_gemm_bf16_bias_relu.tsr")
    w = count_work(bf16, {"M": 128, "N": 128, "K": 64}, 4)
    assert w.mma_f16 * 4 == 2 * 128 * 128 * 64 and w.mma_i8 == 0
    assert w.flops > 0  # the bias and relu on the fragment's elements run on the FMA pipes


def test_the_model_ranks_a_tensor_core_gemm_by_the_tensor_core_roof() -> None:
    fn = _kernel("tc_gemm_f16.tsr")  # 128 x 128 tiles, 256 tiles a group
    m = n = k = 4096
    groups = (m // 128) * (n // 128)
    shapes = {"M": m, "N": n, "K": k}
    work = count_work(fn, shapes, groups)
    res = Resources(256, 128, 0, 56832)
    a100 = arch_spec("sm_80")
    est = estimate(a100, res, work, groups, global_footprint(fn, shapes))
    assert est.bound == "tensor cores"
    assert est.mma_ops == 2 * m * n * k and est.flops == 0
    # The time follows the f16 tensor-core peak (half the peak: about twice the time, less the fixed
    # barrier cost) and not the FP32 one.
    slower_tc = estimate(dataclasses.replace(a100, tc_f16_tflops=a100.tc_f16_tflops / 2), res, work, groups,
                         global_footprint(fn, shapes))
    assert slower_tc.time_us - LAUNCH_US == pytest.approx(2 * (est.time_us - LAUNCH_US), rel=0.03)
    more_fma = estimate(dataclasses.replace(a100, fp32_lanes=4 * a100.fp32_lanes), res, work, groups,
                        global_footprint(fn, shapes))
    assert more_fma.time_us == est.time_us
    # At least the 2MNK operations at the datasheet peak (312 TFLOPS f16 on an A100).
    assert est.time_us - LAUNCH_US >= 2 * m * n * k / 312e12 * 1e6
    # Without the footprint cap every re-read of A and B would count as DRAM traffic.
    assert estimate(a100, res, work, groups).bound == "DRAM"


def test_tensor_core_peaks_per_operand_type() -> None:
    for arch in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100"):
        a = arch_spec(arch)
        assert a.tc_i8_tops == pytest.approx(2 * a.tc_f16_tflops, rel=0.02)   # dense int8 = 2x f16 on these
        assert a.tc_tf32_tflops == pytest.approx(a.tc_f16_tflops / 2, rel=0.03)
        one = 1e12
        assert a.mma_seconds(one, 0, 0) == pytest.approx(1 / a.tc_f16_tflops)
        assert a.mma_seconds(0, one, one) == pytest.approx(1 / a.tc_tf32_tflops + 1 / a.tc_i8_tops)


def _source_kernel(text: str, consts: dict | None = None) -> L.Function:
    from tessera.frontend.parser import decode_source

    result = compile_source(decode_source(text.encode(), "k.tsr"), options=CompileOptions(arch="sm_80", alignment="generic"),
                          variants={"k": consts} if consts else None)
    assert isinstance(result.module, L.Module)
    return result.module.kernels[0]


def test_a_loop_up_to_a_local_counts_its_trips() -> None:
    # The stop of a loop that is a local (FlashAttention's `stop`) was taken as 0: the main loop's
    # work, tensor-core operations included, vanished from the estimate.
    fn = _kernel("flash_attention.tsr", {"T": "f16"})
    work = count_work(fn, {"BH": 8, "N": 4096, "D": 64}, 64 * 8)
    assert work.mma_f16 == 2 * (4096 // 64) * 2 * 64 * 64 * 64  # two products of 64 x 64 x 64 per key block
    fn = _source_kernel("@kernel tile[(32,)]\ndef k(x: f32[n], y: mut f32[n]):\n    s = 0.0\n    stop = n - 1\n"
                        "    for j in range(0, stop, 2):\n        s += x[j]\n    y[0] = s\n")
    assert count_work(fn, {"n": 1001}, 1).global_bytes == 500 * 4 + 4


def test_per_tile_vector_access_counts_its_bytes() -> None:
    # `r[:] = X[row, c:c + 8]` and `Y[row, c:c + 8] = r` moved global bytes the model did not count.
    fn = _source_kernel("@kernel tile[(64,)]\ndef k(X: f16[R, C], Y: mut f16[R, C]):\n    r = tregs(f16[8])\n"
                        "    for c in range(tile_linear_id() * 8, C, 512):\n        r[:] = X[group_id(0), c:c + 8]\n"
                        "        Y[group_id(0), c:c + 8] = r\n")
    assert count_work(fn, {"R": 10, "C": 4096}, 10).global_bytes == 8 * (2 * 8 * 2)
