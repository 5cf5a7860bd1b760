"""The autotuner's cost model: the pruning rules and a roofline estimate of a candidate's time.

A candidate's resources come from ptxas (registers, spills, static shared memory, through NVRTC:
no GPU needed) and from the compiler (tiles per group, dynamic shared memory); its work from
`tessera/autotune/cost_count.py`. The rules, in the order they are tried, each with its reason:
shared memory over what a group may have, tiles per group over the limit, registers × tiles over
the register file, spills, and an occupancy of zero groups per SM.

The estimate is a roofline with four roofs, each slowed by the fraction of the machine the
launch keeps busy:
- arithmetic: FLOPs on the FMA pipes over the FP32 peak;
- tensor cores: `mma` operations over the tensor-core peak of their operand type (f16/bf16,
  TF32, 8-bit; `ArchSpec.mma_seconds`);
- DRAM: the global bytes asked for (tile loads and stores, group copies, fragment loads and
  stores), but no more than the launch's tensors hold when their size is known (the caches are
  taken to serve re-reads of the same data: a GEMM's tiles of A and B read again by other groups),
  over the bandwidth;
- shared memory: the words the tiles read and write over what the SMs serve per clock;
the slowest roof, times the wave quantization (a last, partly filled wave of groups takes a
whole wave's time), divided by a latency-hiding factor that grows with resident warps, plus a
barrier cost per group and a launch overhead.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.autotune.arch import ArchSpec, occupancy
from tessera.autotune.cost_count import WorkCounts

LAUNCH_US = 3.0           # fixed cost of a launch
BARRIER_CYCLES = 40.0     # a group barrier, per group
HIDING_WARPS = 8          # resident warps per SM from which latency is considered hidden


@dataclass(frozen=True)
class Resources:
    """What a compiled candidate uses, per group and per tile."""

    tiles: int
    registers: int        # per tile (0: unknown, ptxas did not run)
    spill_bytes: int      # spill stores + loads, bytes per tile
    shared: int           # bytes per group: static (ptxas) + dynamic (the compiler's layout)

    def to_json(self) -> dict:
        return {"tiles": self.tiles, "registers": self.registers, "spill_bytes": self.spill_bytes,
                "shared": self.shared}


def prune_reason(arch: ArchSpec, res: Resources) -> tuple[str, str] | None:
    """(rule, reason) when the candidate cannot run well on `arch`, else None."""
    if res.shared > arch.smem_per_group:
        return "shared memory", (f"needs {res.shared} bytes of shared memory per group, over the "
                                 f"{arch.smem_per_group} a group can have on {arch.name}")
    if res.tiles > arch.max_tiles_per_group:
        return "tiles per group", f"has {res.tiles} tiles per group, over the limit of {arch.max_tiles_per_group}"
    if res.registers * res.tiles > arch.regs_per_sm or res.registers > arch.max_regs_per_tile:
        return "registers", (f"{res.registers} registers x {res.tiles} tiles = {res.registers * res.tiles}, over "
                             f"the register file of {arch.regs_per_sm}")
    if res.spill_bytes > 0:
        return "spills", f"ptxas reports {res.spill_bytes} bytes of register spills per tile"
    occ = occupancy(arch, res.tiles, res.registers, res.shared)
    if occ.groups_per_sm == 0:
        return "occupancy", f"no group fits on an SM (limited by {occ.limiter})"
    return None


@dataclass(frozen=True)
class Estimate:
    time_us: float
    bound: str              # the roof that decides: "arithmetic", "tensor cores", "DRAM" or "shared memory"
    flops: float            # whole launch, FMA pipes
    global_bytes: float     # whole launch
    shared_bytes: float     # whole launch
    occupancy: float        # resident warps / maximum
    groups_per_sm: int
    waves: float
    mma_ops: float = 0.0    # whole launch, tensor cores

    def to_json(self) -> dict:
        return {"time_us": self.time_us, "bound": self.bound, "flops": self.flops, "global_bytes": self.global_bytes,
                "shared_bytes": self.shared_bytes, "occupancy": self.occupancy,
                "groups_per_sm": self.groups_per_sm, "waves": self.waves, "mma_ops": self.mma_ops}


def estimate(arch: ArchSpec, res: Resources, work: WorkCounts, groups: int,
             footprint: float | None = None) -> Estimate:
    """The roofline estimate of one launch of `groups` groups; `footprint`: the bytes of its
    global tensors (transpile/cost_count.global_footprint), which caps the DRAM traffic."""
    occ = occupancy(arch, res.tiles, res.registers, res.shared)
    per_wave = max(1, arch.sms * max(1, occ.groups_per_sm))
    waves = groups / per_wave
    # A partly filled last wave costs a whole one; a launch of fewer groups than SMs uses only some.
    quantized = -(-groups // per_wave) / waves if waves >= 1 else 1.0
    busy = min(1.0, groups / arch.sms)
    tiles = groups * res.tiles
    flops = work.flops * tiles
    gbytes = work.global_bytes * tiles + work.copy_bytes * groups
    if footprint is not None and footprint > 0:
        gbytes = min(gbytes, footprint)
    sbytes = work.shared_words * 4 * tiles
    mma = arch.mma_seconds(work.mma_f16 * groups, work.mma_tf32 * groups, work.mma_i8 * groups)
    roofs = {"arithmetic": flops / arch.fp32_flops, "tensor cores": mma, "DRAM": gbytes / (arch.dram_gbs * 1e9),
             "shared memory": sbytes / arch.smem_bytes_per_s}
    bound = max(roofs, key=lambda k: roofs[k])
    hiding = min(1.0, occ.warps_per_sm / HIDING_WARPS) if occ.warps_per_sm else 1e-3
    seconds = roofs[bound] * quantized / (busy * hiding)
    seconds += work.barriers * groups / per_wave * BARRIER_CYCLES / (arch.clock_ghz * 1e9)
    return Estimate(seconds * 1e6 + LAUNCH_US, bound, flops, gbytes, sbytes, occ.fraction, occ.groups_per_sm, waves,
                    work.mma_ops * groups)
