"""The swizzle address functions (transpile/lir/swizzle.py) checked against the independent model
of the PTX ISA's swizzle atoms (ptx_wgmma.py), element by element, in Python and in the C the
compiler prints for them; planted errors in the address function must be caught."""

from __future__ import annotations

import subprocess

import pytest

from tessera.transpile.lir import swizzle as S
from tests.language.tensor_cores import ptx_wgmma as P

SHAPES = [(64, 32, 2), (64, 64, 2), (32, 128, 2), (128, 16, 2), (64, 16, 4), (64, 32, 4), (16, 64, 1),
          (64, 128, 1), (8, 256, 2), (64, 96, 4)]


def _model(m: S.SwizzledMatrix, r: int, c: int) -> int:
    return P.swizzled_byte(m.rows, m.mode, m.size, r, c)


def _differences(m: S.SwizzledMatrix, byte_offset) -> int:
    return sum(byte_offset(r, c) != _model(m, r, c) for r in range(m.rows) for c in range(m.cols))


@pytest.mark.parametrize("rows,cols,size", SHAPES)
def test_every_element_is_where_the_ptx_atoms_put_it(rows: int, cols: int, size: int) -> None:
    m = S.matrix_of(rows, cols, size)
    assert m is not None
    assert _differences(m, m.byte_offset) == 0
    placed = sorted(m.byte_offset(r, c) for r in range(rows) for c in range(cols))
    assert placed == list(range(0, rows * cols * size, size))  # a permutation of the matrix's bytes


def test_the_mode_is_the_widest_atom_row_that_fits() -> None:
    assert [S.choose_mode(b) for b in (32, 64, 128, 256, 384, 16, 48, 96, 8)] == \
        [32, 64, 128, 128, 128, None, None, None, None]
    assert S.matrix_of(12, 64, 2) is None  # rows not a multiple of the atom's 8
    assert S.matrix_of(64, 24, 2) is None  # 48-byte rows


def _planted(kind: str):
    def byte_offset(m: S.SwizzledMatrix):
        def f(r: int, c: int) -> int:
            p, within = divmod(c * m.size, m.mode)
            if kind == "no_xor":
                return p * m.panel_bytes + r * m.mode + within
            if kind == "xor_row":  # the 128-byte pattern (chunk ^ row) in every mode
                o = r * m.mode + within
                return p * m.panel_bytes + (o ^ ((r % 8) % (m.mode // 16)) << 4)
            if kind == "row_major":  # panels ignored: plain rows of the whole width, swizzled
                return S.swizzle(r * m.cols * m.size + c * m.size, m.mode)
            raise AssertionError(kind)
        return f
    return byte_offset


@pytest.mark.parametrize("kind,shape", [("no_xor", (64, 32, 2)), ("xor_row", (64, 32, 2)), ("xor_row", (64, 16, 2)),
                                        ("row_major", (32, 128, 2))])
def test_planted_address_errors_are_caught(kind: str, shape: tuple[int, int, int]) -> None:
    m = S.matrix_of(*shape)
    assert m is not None
    assert _differences(m, _planted(kind)(m)) > 0


def test_the_printed_c_computes_the_same_offsets(tmp_path) -> None:
    """The C of `c_offset` compiled by the host compiler, for every element of several matrices."""
    cases = [S.matrix_of(*s) for s in SHAPES]
    lines = ["#include <cstdio>", "int main() {"]
    for k, m in enumerate(cases):
        assert m is not None
        lines.append(f"  for (unsigned r = 0; r < {m.rows}u; ++r) for (unsigned c = 0; c < {m.cols}u; ++c) "
                     f"std::printf(\"{k} %u %u %u\\n\", r, c, {m.c_offset('r', 'c')});")
    lines += ["  return 0;", "}"]
    src = tmp_path / "swz.cpp"
    src.write_text("\n".join(lines))
    exe = tmp_path / "swz"
    subprocess.run(["c++", "-O0", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    seen = 0
    for line in filter(None, out):
        k, r, c, off = map(int, line.split())
        m = cases[k]
        assert m is not None
        assert off * m.size == _model(m, r, c), (k, r, c)
        seen += 1
    assert seen == sum(m.rows * m.cols for m in cases if m is not None)


def test_descriptor_strides() -> None:
    a = S.matrix_of(64, 64, 2)    # A[BM, BK] K-major, 128-byte mode
    b = S.matrix_of(32, 128, 2)   # B[BK, BN] MN-major, two panels of 32 x 64
    assert a is not None and b is not None
    assert a.descriptor_strides(k_major=True) == (16, 1024)
    assert b.descriptor_strides(k_major=False) == (32 * 128, 1024)
    assert S.WGMMA_LAYOUT == {128: 1, 64: 2, 32: 3}
