"""The one builtin table (spec sections 5 and 7): for every builtin, once, its typing rule, its
cooperation class, how its result depends on the tile, the IR node it lowers to and its CUDA
spelling.

Each part of the compiler reads the table and nothing else:
- the type checker calls the one implementation of its typing rule `rule` (the rule table of
  tessera.transpile.checks.rules, made from the checker's parts);
- the cooperation check (check_cooperation) uses `coop` and `result`;
- lowering (lower) builds the IR node named by `node`;
- the C printer (emit/exprs.py) prints `Intrinsic`/`Collective` nodes through `c_<printer>` or, for
  math, the C functions `cuda` / `cuda_f64`; the CPU backend's prelude provides every C function
  named here (a test checks that).
Adding a builtin is one entry here (plus a typing or printing rule if it is of a new kind).
"""

from __future__ import annotations

from enum import IntEnum

from tessera.base.irnode import ir_node


class Coop(IntEnum):
    """Who must reach a call together: nobody, all 32 lanes of a warp, or the whole group."""

    NONE = 0
    WARP = 1
    GROUP = 2


class Vary(IntEnum):
    """How a value depends on the tile: the same in the whole group, per warp, or per lane."""

    UNIFORM = 0
    WARP = 1
    LANE = 2


@ir_node
class Builtin:
    name: str
    rule: str                 # the typing rule (checks/rules.py: rule_table)
    node: str                 # the IR node: intrinsic | collective | atomic | barrier | fence | print | assert | copy
                              # | commit | wait | mma | frag_load | frag_store
    coop: Coop = Coop.NONE    # who must call it together
    result: Vary = Vary.UNIFORM  # how its result varies over the tiles (beyond its arguments)
    printer: str = ""         # the printer rule (CPrinter.c_<printer>) for intrinsics and collectives
    cuda: str = ""            # C function for f32 (math) or the primitive behind the printer rule
    cuda_f64: str = ""        # C function for f64 (math) or for 64-bit integers (bits)
    also: tuple[str, ...] = ()  # further C functions the printer rule emits (the prelude provides them too)
    positive: bool = False    # an index builtin whose value is always at least 1 (a count or extent)
    doc: str = ""


def _index(name: str, result: Vary, doc: str, axis: bool = False, positive: bool = False) -> Builtin:
    return Builtin(name, "index_axis" if axis else "index", "intrinsic", result=result, printer=name,
                   positive=positive, doc=doc)


def _math(name: str, rule: str, cuda: str, doc: str, cuda_f64: str | None = None) -> Builtin:
    return Builtin(name, rule, "intrinsic", printer="math", cuda=cuda,
                   cuda_f64=cuda_f64 if cuda_f64 is not None else cuda[:-1], doc=doc)


_ATOMIC_DOC = "atomically update an element of a mut tensor or shared array; returns the old value"

TABLE: tuple[Builtin, ...] = (
    # ---- indices (all i32)
    _index("tile_linear_id", Vary.LANE, "the tile's index within its group"),
    _index("tile_id", Vary.LANE, "the tile's index along an axis of the group", axis=True),
    _index("group_linear_id", Vary.UNIFORM, "the group's index within the grid"),
    _index("group_id", Vary.UNIFORM, "the group's index along an axis of the grid", axis=True),
    _index("group_tile_count", Vary.UNIFORM, "tiles per group", positive=True),
    _index("group_shape", Vary.UNIFORM, "the group's extent along an axis", axis=True, positive=True),
    _index("group_count", Vary.UNIFORM, "the grid's extent along an axis", axis=True, positive=True),
    _index("global_linear_id", Vary.LANE, "group_linear_id() * group_tile_count() + tile_linear_id()"),
    _index("grid_tile_count", Vary.UNIFORM, "tiles in the whole grid", positive=True),
    _index("lane_id", Vary.LANE, "the tile's lane within its warp"),
    _index("warp_id", Vary.WARP, "the tile's warp within its group"),
    # ---- element coordinates in a whole-fragment statement (spec section 14; i32)
    Builtin("row_index", "frag_coord", "intrinsic", printer="frag_coord",
            doc="the row of the element being computed, within the fragment"),
    Builtin("col_index", "frag_coord", "intrinsic", printer="frag_coord",
            doc="the column of the element being computed, within the fragment"),
    # ---- reductions of a fragment's rows in a whole-fragment statement (spec section 14)
    Builtin("tmax", "frag_reduce", "intrinsic", printer="frag_reduce", doc="the largest element of each row (axis=1)"),
    Builtin("tmin", "frag_reduce", "intrinsic", printer="frag_reduce", doc="the smallest element of each row (axis=1)"),
    Builtin("tsum", "frag_reduce", "intrinsic", printer="frag_reduce", doc="the sum of each row (axis=1)"),
    # ---- math (f16/bf16 compute in f32 and round back)
    _math("exp", "math1", "expf", "e**x"),
    _math("exp2", "math1", "exp2f", "2**x"),
    _math("log", "math1", "logf", "natural logarithm"),
    _math("log2", "math1", "log2f", "base-2 logarithm"),
    _math("sqrt", "math1", "sqrtf", "square root"),
    _math("rsqrt", "math1", "rsqrtf", "1 / sqrt(x)"),
    _math("sin", "math1", "sinf", "sine"),
    _math("cos", "math1", "cosf", "cosine"),
    _math("tanh", "math1", "tanhf", "hyperbolic tangent"),
    _math("erf", "math1", "erff", "error function"),
    _math("floor", "math1", "floorf", "round down"),
    _math("ceil", "math1", "ceilf", "round up"),
    _math("abs", "abs", "fabsf", "absolute value (integers too)", cuda_f64="fabs"),
    _math("pow", "pow", "powf", "x**y"),
    _math("fma", "fma", "fmaf", "x * y + z, rounded once"),
    Builtin("min", "minmax", "intrinsic", printer="minmax", cuda="fminf", cuda_f64="fmin",
            doc="the smallest argument (integers too)"),
    Builtin("max", "minmax", "intrinsic", printer="minmax", cuda="fmaxf", cuda_f64="fmax",
            doc="the largest argument (integers too)"),
    # ---- integers and bits (32- and 64-bit integers; narrower ones are a compile error)
    Builtin("popc", "bits", "intrinsic", printer="bits", cuda="__popc", cuda_f64="__popcll",
            doc="the number of set bits (i32)"),
    Builtin("clz", "bits", "intrinsic", printer="bits", cuda="__clz", cuda_f64="__clzll",
            doc="the number of leading zero bits (i32; the width for 0)"),
    Builtin("ffs", "bits", "intrinsic", printer="bits", cuda="__ffs", cuda_f64="__ffsll",
            doc="the 1-based index of the least significant set bit (i32; 0 for 0)"),
    Builtin("brev", "bits", "intrinsic", printer="bits", cuda="__brev", cuda_f64="__brevll",
            doc="the bits in reverse order (the operand's type)"),
    Builtin("mulhi", "mulhi", "intrinsic", printer="mulhi", cuda="__mulhi", cuda_f64="__mul64hi",
            also=("__umulhi", "__umul64hi"), doc="the high half of the full product (the common type)"),
    Builtin("bitcast", "bitcast", "intrinsic", printer="bitcast", cuda="__float_as_uint",
            cuda_f64="__double_as_longlong",
            also=("__uint_as_float", "__longlong_as_double", "__half_as_ushort", "__ushort_as_half",
                  "__bfloat16_as_ushort", "__ushort_as_bfloat16", "__float2half_rn", "__half2float",
                  "__float2bfloat16_rn", "__bfloat162float"),
            doc="the bits of a scalar read as the scalar type T of the same width"),
    # ---- debugging
    Builtin("tprint", "tprint", "print", cuda="printf", doc="device printf"),
    Builtin("tassert", "tassert", "assert", cuda="tsr_assert_fail", doc="checked when compiled with debug"),
    # ---- synchronization and memory
    Builtin("tbarrier", "tbarrier", "barrier", Coop.GROUP, cuda="__syncthreads",
            doc="every tile of the group waits; earlier shared-memory writes become visible"),
    Builtin("tfence", "tfence", "fence", cuda="__threadfence", doc="orders memory at a scope"),
    Builtin("tcopy", "tcopy", "copy", Coop.GROUP, cuda="tsr_copy", doc="the group copies a view"),
    Builtin("tcopy_async", "tcopy_async", "copy", Coop.GROUP, cuda="tsr_copy_async",
            doc="the group copies a global view to shared memory with cp.async"),
    Builtin("tcommit", "tcommit", "commit", Coop.GROUP, cuda="tsr_cp_async_commit",
            doc="close the current group of asynchronous copies"),
    Builtin("twait", "twait", "wait", Coop.GROUP, cuda="tsr_cp_async_wait",
            doc="wait until at most n committed groups are pending, then tbarrier()"),
    # ---- tensor-core tile operations (spec section 12; the whole group, on a tfrag accumulator)
    Builtin("tmma", "tmma", "mma", Coop.GROUP, cuda="tsr_mma_m16n8k16_f16",
            also=("tsr_mma_m16n8k16_bf16", "tsr_mma_m16n8k8_tf32", "tsr_mma_m16n8k32_s8", "tsr_mma_m16n8k32_u8",
                  "tsr_ldmatrix_x4", "tsr_ldmatrix_x2", "tsr_ldmatrix_x4_trans", "tsr_ldmatrix_x2_trans",
                  "tsr_load_a_tf32", "tsr_load_b_tf32", "tsr_load_bt_tf32", "tsr_load_b_8bit"),
            doc="acc += a @ b (b: [K, N]) or a @ transpose(b) (trans_b=True, b: [N, K]) from shared arrays"),
    Builtin("tload", "tload", "frag_load", Coop.GROUP, doc="a fragment = a view of its extents (outside: zero)"),
    Builtin("tstore", "tstore", "frag_store", Coop.GROUP,
            doc="a view = a fragment, converted to the view's element type (outside: not written)"),
    # ---- warp operations (all 32 lanes)
    Builtin("warp_sum", "warp_reduce", "collective", Coop.WARP, Vary.WARP, "warp_reduce", "tsr_warp_sum",
            doc="sum over the warp, in every lane"),
    Builtin("warp_max", "warp_reduce", "collective", Coop.WARP, Vary.WARP, "warp_reduce", "tsr_warp_max",
            doc="maximum over the warp, in every lane"),
    Builtin("warp_min", "warp_reduce", "collective", Coop.WARP, Vary.WARP, "warp_reduce", "tsr_warp_min",
            doc="minimum over the warp, in every lane"),
    Builtin("shfl", "shuffle", "collective", Coop.WARP, Vary.LANE, "shuffle", "__shfl_sync",
            doc="x of lane src_lane"),
    Builtin("shfl_xor", "shuffle", "collective", Coop.WARP, Vary.LANE, "shuffle", "__shfl_xor_sync",
            doc="x of lane lane_id() ^ mask"),
    Builtin("shfl_down", "shuffle", "collective", Coop.WARP, Vary.LANE, "shuffle", "__shfl_down_sync",
            doc="x of lane lane_id() + delta"),
    Builtin("shfl_up", "shuffle", "collective", Coop.WARP, Vary.LANE, "shuffle", "__shfl_up_sync",
            doc="x of lane lane_id() - delta (own x below lane delta)"),
    Builtin("warp_any", "warp_vote", "collective", Coop.WARP, Vary.WARP, "warp_vote", "__any_sync",
            doc="whether the predicate holds in some lane, in every lane"),
    Builtin("warp_all", "warp_vote", "collective", Coop.WARP, Vary.WARP, "warp_vote", "__all_sync",
            doc="whether the predicate holds in every lane, in every lane"),
    Builtin("warp_ballot", "warp_vote", "collective", Coop.WARP, Vary.WARP, "warp_vote", "__ballot_sync",
            doc="a u32 with bit i set where the predicate holds in lane i, in every lane"),
    Builtin("warp_cumsum", "warp_reduce", "collective", Coop.WARP, Vary.LANE, "warp_reduce", "tsr_warp_cumsum",
            doc="inclusive prefix sum over the lanes of the warp"),
    # ---- group reductions (the whole group)
    Builtin("group_sum", "group_reduce", "collective", Coop.GROUP, Vary.UNIFORM, "group_reduce",
            "tsr_group_sum", doc="sum over the group, in every tile"),
    Builtin("group_max", "group_reduce", "collective", Coop.GROUP, Vary.UNIFORM, "group_reduce",
            "tsr_group_max", doc="maximum over the group, in every tile"),
    Builtin("group_min", "group_reduce", "collective", Coop.GROUP, Vary.UNIFORM, "group_reduce",
            "tsr_group_min", doc="minimum over the group, in every tile"),
    Builtin("group_cumsum", "group_reduce", "collective", Coop.GROUP, Vary.LANE, "group_reduce",
            "tsr_group_cumsum", doc="inclusive prefix sum over the group in tile_linear_id() order"),
    # ---- atomics (the old value differs from tile to tile)
    Builtin("atomic_add", "atomic", "atomic", result=Vary.LANE, cuda="atomicAdd", doc=_ATOMIC_DOC),
    Builtin("atomic_sub", "atomic", "atomic", result=Vary.LANE, cuda="atomicSub", doc=_ATOMIC_DOC),
    Builtin("atomic_max", "atomic", "atomic", result=Vary.LANE, cuda="atomicMax", doc=_ATOMIC_DOC),
    Builtin("atomic_min", "atomic", "atomic", result=Vary.LANE, cuda="atomicMin", doc=_ATOMIC_DOC),
    Builtin("atomic_and", "atomic", "atomic", result=Vary.LANE, cuda="atomicAnd", doc=_ATOMIC_DOC),
    Builtin("atomic_or", "atomic", "atomic", result=Vary.LANE, cuda="atomicOr", doc=_ATOMIC_DOC),
    Builtin("atomic_xor", "atomic", "atomic", result=Vary.LANE, cuda="atomicXor", doc=_ATOMIC_DOC),
    Builtin("atomic_exch", "atomic", "atomic", result=Vary.LANE, cuda="atomicExch", doc=_ATOMIC_DOC),
    Builtin("atomic_cas", "atomic", "atomic", result=Vary.LANE, cuda="atomicCAS",
            doc="compare and swap; returns the old value"),
    Builtin("atomic_inc", "atomic", "atomic", result=Vary.LANE, cuda="atomicInc",
            doc="u32: old >= bound ? 0 : old + 1; returns the old value"),
    Builtin("atomic_dec", "atomic", "atomic", result=Vary.LANE, cuda="atomicDec",
            doc="u32: old == 0 or old > bound ? bound : old - 1; returns the old value"),
)

BUILTINS: dict[str, Builtin] = {b.name: b for b in TABLE}

# Names that are builtins without being called like one: values, declarations and iterables.
VALUES = frozenset(["grid_groups", "WARP_SIZE", "inf", "nan"])
DECLARATIONS = frozenset(["tshared", "tregs", "tfrag"])
ITERABLES = frozenset(["range", "static_range", "tpipeline"])
RESERVED = frozenset(BUILTINS) | VALUES | DECLARATIONS | ITERABLES

SCOPES = ("group", "device", "mesh")
