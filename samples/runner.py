"""`python samples/runner.py samples/NAME.tsr`: run a sample on random inputs and compare it with
NumPy. Each sample kernel has a case (samples/case.py): how to make inputs, launch, and the
reference; the cases are in samples/cases_core.py and samples/cases_fused.py, and `CASES` names
them all.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

# Run as a script, or loaded by its path (bench/gpu_bench.py): the cases import from the repository root.
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from samples import cases_core, cases_fused  # noqa: E402
from samples.case import Case  # noqa: E402

if TYPE_CHECKING:
    from tessera.api import Module

CASES: dict[str, Callable[[], Case]] = {**cases_core.CASES, **cases_fused.CASES}


def check_kernel(mod: Module, name: str, seed: int = 0) -> tuple[bool, str]:
    """Run one kernel's case; (ok, message)."""
    case = CASES[name]()
    args = case.make(np.random.default_rng(seed))
    want = case.expect({k: v.copy() for k, v in args.items()})
    t0 = time.perf_counter()
    case.launch(mod[name], args)
    ms = (time.perf_counter() - t0) * 1e3
    for param, expected in want.items():
        got = args[param]
        if not np.allclose(got.astype(np.float64), expected.astype(np.float64), rtol=case.rtol, atol=case.atol):
            err = np.abs(got.astype(np.float64) - expected.astype(np.float64)).max()
            return False, f"{name}: '{param}' differs from NumPy (max abs error {err:.3g})"
    return True, f"{name}: matches NumPy ({ms:.1f} ms on the {mod.backend} backend)"


def main(argv: list[str]) -> int:
    import tessera

    p = argparse.ArgumentParser(prog="python samples/runner.py",
                                description="Run a sample's kernels on random inputs and compare with NumPy.")
    p.add_argument("file", help="a .tsr file, such as samples/sum_reduce.tsr")
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        mod = tessera.load(args.file, backend=args.backend)
    except tessera.CompileError as e:
        print(e.text, file=sys.stderr)
        return 1
    except tessera.TesseraError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{args.file}: backend {mod.backend} ({mod.backend_reason})")
    status = 0
    for name in mod.kernels:
        if name not in CASES:
            print(f"{name}: no NumPy reference for this kernel; not run")
            continue
        try:
            ok, message = check_kernel(mod, name, args.seed)
        except tessera.TesseraError as e:
            ok, message = False, f"{name}: {e}"
        print(("ok    " if ok else "FAIL  ") + message)
        status |= 0 if ok else 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
