"""The architecture table of the autotuner's cost model, and occupancy from registers and shared memory.

Figures are those of each architecture's reference data-center or flagship part (NVIDIA's
whitepapers and the CUDA programming guide's table of compute capabilities): the model ranks
candidates against each other on one architecture, so what matters is the balance between the
roofs (FMA arithmetic, tensor cores, DRAM, shared memory) and the per-SM limits, not the exact SKU.

Tensor-core peaks are the dense (not 2:4 sparse) figures of each part's datasheet or architecture
whitepaper, per operand type of `mma.sync` (f16/bf16 with f32 accumulation, TF32, 8-bit integers
with i32 accumulation):
- sm_75 T4: Turing T4 datasheet: 65 FP16 TFLOPS, 130 INT8 TOPS (no TF32);
- sm_80 A100 SXM: A100 datasheet / Ampere GA100 whitepaper: 312 FP16/BF16, 156 TF32, 624 INT8;
- sm_86 RTX A6000: GA102 whitepaper (appendix, RTX A6000 column): 154.8 FP16 with FP32
  accumulate, 77.4 TF32, 309.7 INT8;
- sm_87 Jetson AGX Orin 64GB: Jetson AGX Orin series data sheet (85 INT8 TOPS dense of the GPU,
  170 sparse); FP16 and TF32 by the Ampere ratios: 42.5 and 21.3;
- sm_89 L40S: L40S datasheet: 362.05 FP16/BF16, 183 TF32, 733 INT8;
- sm_90 H100 SXM: H100 datasheet: 989.4 FP16/BF16, 494.7 TF32, 1,979 INT8;
- sm_100 B200: HGX B200 specifications (per GPU, dense = half the sparse figure): 2,250 FP16/BF16,
  1,100 TF32, 4,500 INT8.
On sm_90 and sm_100 these peaks are reached only by wgmma / tcgen05; `mma.sync`, which Tessera
emits, runs at a fraction of them there (not published by NVIDIA). The model keeps the datasheet
figures: it ranks candidates of one kernel on one architecture, where that fraction is common to all.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.base.errors import TesseraError


@dataclass(frozen=True)
class ArchSpec:
    name: str
    part: str                 # the part the figures are from
    sms: int
    clock_ghz: float          # boost clock
    fp32_lanes: int           # FP32 FMA lanes per SM per clock
    tc_f16_tflops: float      # dense f16/bf16 tensor-core peak (f32 accumulate)
    tc_tf32_tflops: float     # dense TF32 tensor-core peak (0: none)
    tc_i8_tops: float         # dense 8-bit integer tensor-core peak (i32 accumulate)
    dram_gbs: float           # DRAM bandwidth, GB/s
    smem_per_sm: int          # shared memory per SM (bytes, the configurable maximum)
    smem_per_group: int       # the most one group may opt in to (bytes)
    regs_per_sm: int = 65536
    max_regs_per_tile: int = 255
    max_tiles_per_sm: int = 2048
    max_groups_per_sm: int = 32
    max_tiles_per_group: int = 1024
    lds_lanes: int = 32       # shared-memory words served per SM per clock

    @property
    def fp32_flops(self) -> float:
        """Peak FP32 FLOP/s (an FMA is two)."""
        return self.sms * self.fp32_lanes * 2 * self.clock_ghz * 1e9

    def mma_seconds(self, f16: float, tf32: float, i8: float) -> float:
        """Seconds the tensor cores take for these operations (each kind at its own peak; a kind the
        part lacks runs, as far as the model can tell, at the FP32 FMA peak)."""
        total = 0.0
        for ops, peak in ((f16, self.tc_f16_tflops), (tf32, self.tc_tf32_tflops), (i8, self.tc_i8_tops)):
            if ops:
                total += ops / (peak * 1e12 if peak > 0 else self.fp32_flops)
        return total

    @property
    def smem_bytes_per_s(self) -> float:
        return self.sms * self.lds_lanes * 4 * self.clock_ghz * 1e9


KiB = 1024
ARCH_TABLE: dict[str, ArchSpec] = {a.name: a for a in (
    ArchSpec("sm_75", "T4", 40, 1.59, 64, 65.0, 0.0, 130.0, 320.0, 64 * KiB, 64 * KiB, max_tiles_per_sm=1024,
             max_groups_per_sm=16),
    ArchSpec("sm_80", "A100 SXM 80GB", 108, 1.41, 64, 312.0, 156.0, 624.0, 2039.0, 164 * KiB, 163 * KiB),
    ArchSpec("sm_86", "RTX A6000", 84, 1.80, 128, 154.8, 77.4, 309.7, 768.0, 100 * KiB, 99 * KiB, max_tiles_per_sm=1536,
             max_groups_per_sm=16),
    ArchSpec("sm_87", "Jetson AGX Orin", 16, 1.30, 128, 42.5, 21.3, 85.0, 204.8, 164 * KiB, 163 * KiB, max_groups_per_sm=16),
    ArchSpec("sm_89", "L40S", 142, 2.52, 128, 362.05, 183.0, 733.0, 864.0, 100 * KiB, 99 * KiB, max_tiles_per_sm=1536,
             max_groups_per_sm=24),
    ArchSpec("sm_90", "H100 SXM", 132, 1.98, 128, 989.4, 494.7, 1979.0, 3350.0, 228 * KiB, 227 * KiB),
    ArchSpec("sm_90a", "H100 SXM", 132, 1.98, 128, 989.4, 494.7, 1979.0, 3350.0, 228 * KiB, 227 * KiB),
    ArchSpec("sm_100", "B200", 148, 1.965, 128, 2250.0, 1100.0, 4500.0, 8000.0, 228 * KiB, 227 * KiB),
)}


def arch_spec(arch: str) -> ArchSpec:
    spec = ARCH_TABLE.get(arch)
    if spec is None:
        raise TesseraError(f"the autotuner has no figures for {arch!r}; it knows {', '.join(ARCH_TABLE)}")
    return spec


def _round_up(n: int, unit: int) -> int:
    return (n + unit - 1) // unit * unit


@dataclass(frozen=True)
class Occupancy:
    groups_per_sm: int
    limiter: str              # which resource bounds groups_per_sm
    warps_per_sm: int
    fraction: float           # resident warps over the SM's maximum


def occupancy(arch: ArchSpec, tiles: int, registers: int, shared: int) -> Occupancy:
    """Resident groups per SM for a group of `tiles` tiles using `registers` per tile and
    `shared` bytes (registers are allocated per warp in units of 256; shared memory in 128-byte
    units plus the 1 KiB the driver reserves per group)."""
    warps = -(-tiles // 32)
    limits = {"groups": arch.max_groups_per_sm, "tiles": arch.max_tiles_per_sm // (warps * 32)}
    if registers > 0:
        per_warp = _round_up(max(registers, 1) * 32, 256)
        limits["registers"] = (arch.regs_per_sm // per_warp) // warps if registers <= arch.max_regs_per_tile else 0
    if shared > 0:
        per_group = _round_up(shared, 128) + 1024
        limits["shared memory"] = arch.smem_per_sm // per_group if shared <= arch.smem_per_group else 0
    limiter = min(limits, key=lambda k: limits[k])
    groups = max(0, limits[limiter])
    max_warps = arch.max_tiles_per_sm // 32
    return Occupancy(groups, limiter, groups * warps, groups * warps / max_warps)
