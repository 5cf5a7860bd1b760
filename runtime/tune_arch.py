"""The architecture table of the autotuner's cost model, and occupancy from registers and shared memory.

Figures are those of each architecture's reference data-center or flagship part (NVIDIA's
whitepapers and the CUDA programming guide's table of compute capabilities): the model ranks
candidates against each other on one architecture, so what matters is the balance between the
roofs (arithmetic, DRAM, shared memory) and the per-SM limits, not the exact SKU.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.errors import TesseraError


@dataclass(frozen=True)
class ArchSpec:
    name: str
    part: str                 # the part the figures are from
    sms: int
    clock_ghz: float          # boost clock
    fp32_lanes: int           # FP32 FMA lanes per SM per clock
    tc_f16_tflops: float      # dense f16 tensor-core peak (f32 accumulate)
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

    @property
    def smem_bytes_per_s(self) -> float:
        return self.sms * self.lds_lanes * 4 * self.clock_ghz * 1e9


KiB = 1024
ARCH_TABLE: dict[str, ArchSpec] = {a.name: a for a in (
    ArchSpec("sm_75", "T4", 40, 1.59, 64, 65.0, 320.0, 64 * KiB, 64 * KiB, max_tiles_per_sm=1024,
             max_groups_per_sm=16),
    ArchSpec("sm_80", "A100 SXM 80GB", 108, 1.41, 64, 312.0, 2039.0, 164 * KiB, 163 * KiB),
    ArchSpec("sm_86", "RTX A6000", 84, 1.80, 128, 155.0, 768.0, 100 * KiB, 99 * KiB, max_tiles_per_sm=1536,
             max_groups_per_sm=16),
    ArchSpec("sm_87", "Jetson AGX Orin", 16, 1.30, 128, 43.0, 204.8, 164 * KiB, 163 * KiB, max_groups_per_sm=16),
    ArchSpec("sm_89", "L40S", 142, 2.52, 128, 362.0, 864.0, 100 * KiB, 99 * KiB, max_tiles_per_sm=1536,
             max_groups_per_sm=24),
    ArchSpec("sm_90", "H100 SXM", 132, 1.98, 128, 989.0, 3350.0, 228 * KiB, 227 * KiB),
    ArchSpec("sm_100", "B200", 148, 1.965, 128, 2250.0, 8000.0, 228 * KiB, 227 * KiB),
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
