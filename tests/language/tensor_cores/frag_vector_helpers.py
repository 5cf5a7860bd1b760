"""What the tests of column vectors and of rows spread over warps share (test_fragment_cols.py,
test_fragment_rows_spread.py): their kernel text with other defaults for its const parameters
(`with_consts`: the tile count and the block's extents), and each lane's registers of a fragment
vector as the CPU backend computes them, for the lane-by-lane tests against the PTX ISA's layout
(`launch_dumped`: the kernel's one store of the vector replaced by a dump of every lane's slots,
after an optional planted edit of the C that the tests show the comparison catches).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from tessera.runtime.host import library as cpu


def with_consts(source: str, **values: int) -> str:
    """`source` with the defaults of its const i32 parameters `NAME: const i32 = N` set to `values`."""
    for name, value in values.items():
        source, n = re.subn(rf"\b{name}: const i32 = -?\d+", f"{name}: const i32 = {value}", source)
        assert n == 1, name
    return source


def launch_dumped(monkeypatch: pytest.MonkeyPatch, source: str, store: str, dump: str,
                  plant: tuple[str, str] | None, *args: np.ndarray) -> None:
    """Compile `source` (its kernel `lanes`) for the CPU backend with the C statement that matches
    the pattern `store` replaced by `dump` and `plant` (the clean C's text, the planted text) applied,
    and launch it on `args` with one group."""
    real = cpu.build_library

    def dumped(cuda: str, kernels):  # type: ignore[no-untyped-def]
        cuda, n = re.subn(store, dump, cuda)
        assert n == 1
        if plant is not None:
            assert plant[0] in cuda
            cuda = cuda.replace(plant[0], plant[1])
        return real(cuda, kernels)

    monkeypatch.setattr(cpu, "build_library", dumped)
    tag = f"# dump {plant}\n"  # other C: no library is reused from the cache
    tessera.compile(tag + source, backend="cpu", path="lanes.tsr").lanes(*args, grid=1)
