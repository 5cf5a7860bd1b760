"""Independent truth for swizzled bulk tensor copies (sm_90a, spec section 16): where the tensor
memory accelerator puts a box's bytes when its tensor map swizzles, from the PTX ISA's tables, not
from the compiler's lir/swizzle.py or the emulation's host_tma.h; checked against the CPU backend's
emulation (runtime/host/host_tma.h) byte by byte, and against the copies the compiler prints for the
arrays a warpgroup MMA reads, whose result must be the layout of the PTX ISA's wgmma swizzle atoms
(tests/language/tensor_cores/ptx_wgmma.py, the other independent model): what the TMA writes is what
wgmma reads. Planted errors in both must be caught.

The model, from the PTX ISA ("Tensors", "Swizzling Modes", and `cuTensorMapEncodeTiled` in the
driver API):
- a box is first its dense row-major image (innermost dimension contiguous), as without swizzle;
- with a swizzle of 32, 64 or 128 bytes, the destination is cut into 128-byte lines counted from an
  address aligned to 256, 512 or 1024 bytes; the tables give, per line, which 16-byte cell of the
  image each of the line's 8 cells holds, and repeat after 2, 4 or 8 lines;
- the box's innermost extent is at most the swizzle's span in bytes (the compiler makes it exactly
  the span: one box per panel of the array).
"""

from __future__ import annotations

import ctypes
import random
import re
from pathlib import Path

import numpy as np
import pytest

from tessera.base.errors import SourceFile
from tessera.base.options import CompileOptions
from tessera.transpile.driver import compile_source
from tests.language.hopper.tma_harness import CXX, HOST, box_of, build_harness
from tests.language.tensor_cores import ptx_wgmma as P

# The PTX ISA's tables ("Swizzling Modes"): line by line, the image's cell each destination cell holds.
TABLES = {
    32: ((0, 1, 2, 3, 4, 5, 6, 7),
         (1, 0, 3, 2, 5, 4, 7, 6)),
    64: ((0, 1, 2, 3, 4, 5, 6, 7),
         (1, 0, 3, 2, 5, 4, 7, 6),
         (2, 3, 0, 1, 6, 7, 4, 5),
         (3, 2, 1, 0, 7, 6, 5, 4)),
    128: ((0, 1, 2, 3, 4, 5, 6, 7),
          (1, 0, 3, 2, 5, 4, 7, 6),
          (2, 3, 0, 1, 6, 7, 4, 5),
          (3, 2, 1, 0, 7, 6, 5, 4),
          (4, 5, 6, 7, 0, 1, 2, 3),
          (5, 4, 7, 6, 1, 0, 3, 2),
          (6, 7, 4, 5, 2, 3, 0, 1),
          (7, 6, 5, 4, 3, 2, 1, 0)),
}
ALIGNED = {32: 256, 64: 512, 128: 1024}  # "the starting address is ... bytes aligned"


def landing(offset: int, mode: int) -> int:
    """The destination byte (from an aligned start) of byte `offset` of the box's dense image."""
    if mode == 0:
        return offset
    line, cell, within = offset // 128, offset % 128 // 16, offset % 16
    return line * 128 + TABLES[mode][line % len(TABLES[mode])].index(cell) * 16 + within


# ---- the emulation ---------------------------------------------------------------------------------

# The harness's functions (tma_harness.PRELUDE before them).
FUNCTIONS = r"""// One box, issued and landed (a wait); 1 if the barrier's phase completed.
int h_copy(unsigned char* dst, const unsigned char* base, const long long* d, const int* c, const int* x, int elem,
           int swizzle) {
  tsr_mbarrier bar;
  tsr_mbar_init(&bar, 1);
  tsr::detail::tma_issue(&bar, tsr::detail::TmaBox{base, dst, {d[0], d[1], d[2], d[3], d[4]},
                                                   {c[0], c[1], c[2], c[3], c[4]}, {x[0], x[1], x[2], x[3], x[4]},
                                                   elem, 0, swizzle});
  return tsr::detail::mbar_try_wait(&bar, 0);
}
}
"""

PLANTED = [
    ("no swizzle", "  if (c.swizzle == 0) return offset;\n", "  return offset;\n"),
    ("the 128-byte pattern in every mode", "(c.swizzle / 16 - 1)", "7"),
    ("the XOR taken from the wrong bits", "return offset ^ (((offset >> 7)", "return offset ^ (((offset >> 6)"),
    ("8-byte units moved", "(c.swizzle / 16 - 1)) << 4);", "(c.swizzle / 16 - 1)) << 3);"),
]


def _build(folder: Path, header: str) -> ctypes.CDLL:
    return build_harness(folder, header, FUNCTIONS)


def _box_case(so: ctypes.CDLL, rng: random.Random) -> str | None:
    """One random swizzled box on the emulation and the model; what differed, or None."""
    rank = rng.randint(2, 5)
    elem = rng.choice([1, 2, 4, 8])
    mode = rng.choice([32, 64, 128])
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[elem]
    box = [mode // elem, *(rng.randint(1, 4) for _ in range(rank - 1))]  # innermost first: one span
    shape = (*(rng.randint(1, 5) for _ in range(rank - 1)), rng.randint(1, 2 * mode // elem))
    tensor = (np.arange(int(np.prod(shape)), dtype=np.uint64) * 2654435761 % 251 + 1).astype(dtype).reshape(shape)
    coords = [rng.randint(-2, d) for d in reversed(shape)]
    dst = np.full(int(np.prod(box)) * elem + 256, 0xAB, np.uint8)  # and bytes past the box: never written
    d = (ctypes.c_longlong * 5)(*[*reversed(shape), *[1] * (5 - rank)])
    c = (ctypes.c_int * 5)(*coords, *[0] * (5 - rank))
    x = (ctypes.c_int * 5)(*box, *[1] * (5 - rank))
    if not so.h_copy(dst.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte)),
                     tensor.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte)), d, c, x, elem, mode):
        return "the barrier's phase did not complete"
    image = box_of(tensor, coords, box).reshape(-1).view(np.uint8)
    want = np.full_like(dst, 0xAB)
    for k in range(image.size):
        want[landing(k, mode)] = image[k]
    if not np.array_equal(dst, want):
        bad = int(np.flatnonzero(dst != want)[0])
        return f"mode {mode}, element {elem} bytes, box {box}: destination byte {bad} differs from the tables"
    return None


def _run(so: ctypes.CDLL, seed: int, count: int) -> str | None:
    rng = random.Random(seed)
    for _ in range(count):
        why = _box_case(so, rng)
        if why is not None:
            return why
    return None


@pytest.fixture(scope="module")
def emulation(tmp_path_factory) -> ctypes.CDLL:
    return _build(tmp_path_factory.mktemp("tma-swizzle"), (HOST / "host_tma.h").read_text())


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
def test_the_emulation_lands_swizzled_boxes_where_the_tables_say(emulation) -> None:
    assert _run(emulation, seed=90, count=120) is None


def test_the_tables_by_hand() -> None:
    """Each table is a permutation per line (an XOR of the cell with the line's number in its
    period); 128-byte mode, line 3 of a box of 128-byte rows: its cell 1 holds image cell 2."""
    for mode, rows in TABLES.items():
        assert all(sorted(r) == list(range(8)) for r in rows) and len(rows) == mode // 16
    assert landing(3 * 128 + 2 * 16 + 5, 128) == 3 * 128 + 1 * 16 + 5
    assert landing(8 * 128 + 2 * 16, 128) == 8 * 128 + 2 * 16  # the pattern repeats after 8 lines
    assert landing(1 * 128 + 16, 32) == 128 and landing(2 * 128 + 16, 32) == 2 * 128 + 16


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
@pytest.mark.parametrize("name,old,new", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_errors_in_the_emulation_are_caught(name: str, old: str, new: str, tmp_path) -> None:
    text = (HOST / "host_tma.h").read_text()
    assert text.count(old) == 1, f"the planted error {name!r} no longer applies"
    assert _run(_build(tmp_path / "planted", text.replace(old, new)), seed=90, count=120) is not None, name


# ---- the compiler's copies into the arrays a warpgroup MMA reads ------------------------------------

GEMM = """\
@kernel tile[(128,)]
def mm(A: {t}[M, K], B: {t}[{b_dims}], C: mut {acc}[M, N]):
    As = tshared.alloc({t}[64, {bk}])
    Bs = tshared.alloc({t}[{bs}])
    acc = tfrag({acc}[64, {bn}], {zero})
    m0 = group_id(1) * 64
    n0 = group_id(0) * {bn}
    for k0 in tpipeline(0, K, {bk}, stages=2):
        tcopy_async(As, A[m0:m0 + 64, k0:k0 + {bk}])
        tcopy_async(Bs, {b_view})
        tmma(acc, As, Bs{trans})
    tstore(C[m0:m0 + 64, n0:n0 + {bn}], acc)
"""

CALL = re.compile(
    r"tsr_tma_load<(?P<t>[\w ]+), 2, (?P<b0>\d+), (?P<b1>\d+), 1, 1, 1(?:, (?P<swz>\d+))?>\(TSR_TMAP_ARG\(\w+\), "
    r"&\w+\[0\], &(?P<arr>\w+)\[0\]\[0\]\[0\](?: \+ (?P<off>\d+))?, \w+, [^;]*?, 1, 1, 1, "
    r"\(int\)\([^)]*\)(?: \+ (?P<coff>\d+))?, \(int\)\([^)]*\)(?:, 0)+\);")
SIZES = {"f16": 2, "bf16": 2, "i8": 1}
# (element type, BK, BN, B K-major): rows of 32, 64, 128 and 256 bytes and more; one to four panels
SHAPES = [("f16", 16, 64, False), ("f16", 32, 128, False), ("f16", 64, 256, False), ("bf16", 128, 32, True),
          ("bf16", 16, 16, True), ("i8", 32, 64, True), ("i8", 256, 32, True), ("f16", 64, 16, False)]


def gemm_source(t: str, bk: int, bn: int, trans_b: bool) -> str:
    return GEMM.format(t=t, bk=bk, bn=bn, acc="i32" if t == "i8" else "f32", zero="0" if t == "i8" else "0.0",
                       b_dims="N, K" if trans_b else "K, N", bs=f"{bn}, {bk}" if trans_b else f"{bk}, {bn}",
                       b_view=f"B[n0:n0 + {bn}, k0:k0 + {bk}]" if trans_b else f"B[k0:k0 + {bk}, n0:n0 + {bn}]",
                       trans=", trans_b=True" if trans_b else "")


def aligned_kernel(cuda: str) -> str:
    """The text of the aligned variant (the one that takes tensor maps)."""
    return cuda[cuda.index("_a16("):]


def layout_errors(cuda: str, arrays: dict[str, tuple[int, int]], size: int) -> list[str]:
    """Replays the first stage's bulk copies of `cuda` on the TMA model (each element labelled with
    its place in the global matrix) and compares each array with the layout of the wgmma swizzle
    atoms, of the mode its rows call for."""
    calls = [m.groupdict() for m in CALL.finditer(aligned_kernel(cuda))]
    errors: list[str] = []
    for arr, (rows, cols) in arrays.items():
        mode = cols * size if cols * size in (32, 64) else 128
        placed: dict[int, tuple[int, int]] = {}
        mine = [c for c in calls if c["arr"] == arr]
        if not mine:
            errors.append(f"{arr}: no bulk tensor copy into it")
        for c in mine:
            b0, b1, swz = int(c["b0"]), int(c["b1"]), int(c["swz"] or 0)
            start, col0 = int(c["off"] or 0) * size, int(c["coff"] or 0)
            if swz != mode or start % ALIGNED.get(swz, 128):
                errors.append(f"{arr}: a box in mode {swz} at byte {start} (the array's mode is {mode})")
                continue
            for i in range(b1):
                for j in range(b0):
                    placed[start + landing((i * b0 + j) * size, swz)] = (i, col0 + j)
        for r in range(rows):
            for col in range(cols):
                at = P.swizzled_byte(rows, mode, size, r, col)
                if placed.get(at) != (r, col):
                    errors.append(f"{arr}[{r}, {col}] is not at byte {at}, where wgmma reads it")
                    break
    return errors


def _compiled(shape: tuple[str, int, int, bool]) -> tuple[str, dict[str, tuple[int, int]], int]:
    t, bk, bn, trans_b = shape
    cuda = compile_source(SourceFile("mm.tsr", gemm_source(t, bk, bn, trans_b)), CompileOptions(arch="sm_90a")).cuda
    assert "wgmma.mma_async" in cuda and "_a16(" in cuda
    return cuda, {"As": (64, bk), "Bs": (bn, bk) if trans_b else (bk, bn)}, SIZES[t]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s[0]}-bk{s[1]}-bn{s[2]}{'-kmajor' if s[3] else ''}" for s in SHAPES])
def test_the_printed_bulk_copies_write_what_wgmma_reads(shape) -> None:
    cuda, arrays, size = _compiled(shape)
    assert layout_errors(cuda, arrays, size) == []


PLANTED_C = [
    ("second panel at the first's place", (" + 2048, B,", " + 0, B,")),
    ("second panel's columns not moved", ("(int)(n0) + 64,", "(int)(n0) + 0,")),
    ("a panel in the 64-byte mode", ("1, 1, 1, 128>(TSR_TMAP_ARG(tsr_tmap_1)", "1, 1, 1, 64>(TSR_TMAP_ARG(tsr_tmap_1)")),
    ("a dense box", ("1, 1, 1, 64>(TSR_TMAP_ARG(tsr_tmap_0)", "1, 1, 1>(TSR_TMAP_ARG(tsr_tmap_0)")),
]


@pytest.mark.parametrize("name,edit", PLANTED_C, ids=[p[0] for p in PLANTED_C])
def test_planted_errors_in_the_printed_copies_are_caught(name: str, edit: tuple[str, str]) -> None:
    cuda, arrays, size = _compiled(("f16", 32, 128, False))  # As 64-byte mode, Bs 128-byte in 2 panels
    kernel = aligned_kernel(cuda)
    assert edit[0] in kernel, name
    assert layout_errors(cuda.replace(edit[0], edit[1]), arrays, size) != [], name


def test_the_verifier_keeps_a_copys_swizzle_the_arrays_layout() -> None:
    """A bulk copy whose boxes do not swizzle as its destination is laid out is a stale plan."""
    import dataclasses

    from tessera.transpile.lir import nodes as L
    from tessera.transpile.lir.verify import VerifyError, verify
    from tessera.transpile.lir.visit import map_body

    module = compile_source(SourceFile("mm.tsr", gemm_source("f16", 32, 128, False)), CompileOptions(arch="sm_90a"),
                            stop_after="plan-copies").module
    fn = module.functions[-1]
    assert fn.aligned and fn.wgmma
    verify("plan-copies", module)
    stale = map_body(fn.body, lambda s: dataclasses.replace(s, tma=dataclasses.replace(s.tma, swizzle=0))
                     if isinstance(s, L.Copy) and s.tma is not None else s)
    with pytest.raises(VerifyError, match="swizzle is not its destination's layout"):
        verify("plan-copies", dataclasses.replace(module, functions=(*module.functions[:-1],
                                                                     dataclasses.replace(fn, body=stale))))


def test_a_wgmma_reading_a_stage_before_its_barrier_is_reported(dropped_loop_wait) -> None:
    """The race detector sees a swizzled box's bytes in flight where they land: a warpgroup MMA
    that reads the stage without the mbarrier wait (dropped from the printed C) is reported."""
    import numpy as np

    import tessera
    from tessera.base.errors import LaunchError

    mod = tessera.compile(gemm_source("f16", 32, 128, False) + "\n", backend="cpu", arch="sm_90a", check_bounds=True)
    a, b = np.ones((64, 96), np.float16), np.ones((96, 128), np.float16)
    with pytest.raises(LaunchError, match=r"reads it at line 11 while the asynchronous copy .* line (9|10)"):
        mod.mm(a, b, np.zeros((64, 128), np.float32), grid=(1, 1))
    assert dropped_loop_wait


if __name__ == "__main__":  # python -m tests.language.hopper.test_tma_swizzle_model [N]: a longer run
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
        lib = _build(Path(folder), (HOST / "host_tma.h").read_text())
        print(_run(lib, seed=4242, count=n) or f"{n} boxes: the emulation lands them where the tables say")
