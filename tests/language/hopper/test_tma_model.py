"""Independent truth for the CPU backend's emulation of bulk tensor copies and mbarriers
(runtime/host/host_tma.h; spec section 16): a model written from the PTX ISA's text, not from the
emulation, run side by side with the emulation's own functions on random operation sequences, and
planted errors in the emulation that the comparison must catch.

The model, from the PTX ISA ("mbarrier", "cp.async.bulk.tensor", "mbarrier.try_wait.parity",
"expect_tx"):
- an mbarrier object has a current phase, a pending arrival count and a tx-count; `mbarrier.init`
  sets the phase to 0, the pending count to the expected count and the tx-count to 0;
- `mbarrier.arrive.expect_tx` performs an expect-tx operation (tx-count += bytes), then an
  arrive-on operation (pending count -= 1); a complete-tx operation (the bulk copy's bytes
  arriving) decrements the tx-count; the current phase completes when the pending count and the
  tx-count are both zero: the phase advances and the pending count is reset to the expected count;
- `mbarrier.try_wait.parity p` is true when the phase whose parity is p has completed, that is
  when the current phase's parity is not p;
- `cp.async.bulk.tensor` (tile mode) copies the box whose first element has the given coordinates
  (innermost dimension first) into shared memory, densely, row-major; elements whose coordinate in
  any dimension is negative or not below that dimension's size are filled with zero (OOB fill
  NONE); the complete-tx count is the whole box's bytes, inside the tensor or not.

The emulation's schedule (documented in host_tma.h, one the ISA allows): a copy reads the tensor
and writes the destination when a tile first tries to wait on its barrier; before that the
destination keeps its old contents.
"""

from __future__ import annotations

import ctypes
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests.language.hopper.tma_harness import CXX, HOST, box_of, build_harness

pytestmark = pytest.mark.skipif(CXX is None, reason="no C++ compiler")

# The harness's functions (tma_harness.PRELUDE before them).
FUNCTIONS = r"""void h_init(tsr_mbarrier* b, unsigned n) { tsr_mbar_init(b, n); }
void h_issue(tsr_mbarrier* b, unsigned char* dst, const unsigned char* base, const long long* d, const int* c,
             const int* x, int elem) {
  tsr::detail::tma_issue(b, tsr::detail::TmaBox{base, dst, {d[0], d[1], d[2], d[3], d[4]},
                                                {c[0], c[1], c[2], c[3], c[4]}, {x[0], x[1], x[2], x[3], x[4]}, elem, 0});
}
int h_try_wait(tsr_mbarrier* b, unsigned parity) { return tsr::detail::mbar_try_wait(b, parity); }
unsigned h_phase(tsr_mbarrier* b) { return b->phase; }
unsigned h_pending(tsr_mbarrier* b) { return b->pending; }
long long h_tx(tsr_mbarrier* b) { return b->tx; }
}
"""

# Planted errors: (name, text in host_tma.h, replacement).
PLANTED = [
    ("parity inverted", "return (bar->phase & 1u) != (parity & 1u);", "return (bar->phase & 1u) == (parity & 1u);"),
    ("phase completes ignoring the tx-count", "if (bar->pending == 0 && bar->tx == 0) {", "if (bar->pending == 0) {"),
    ("pending count not reset", "    bar->pending = bar->expected;\n  }", "  }"),
    ("no zero fill", "if (at < 0) __builtin_memset(d, 0, c.elem);", "if (at < 0) {}"),
    ("upper edge off by one", "in = in && x >= 0 && x < c.dims[k];", "in = in && x >= 0 && x <= c.dims[k];"),
    ("negative coordinates inside", "in = in && x >= 0 && x < c.dims[k];", "in = in && x < c.dims[k];"),
    ("lands at issue", "  if (c.line > 0) tma_race(c, false);\n",
     "  if (c.line > 0) tma_race(c, false);\n  tma_land(bar, c);\n  bar->tx += 0;\n"),
    ("tx counts one row", "bar->tx += 1LL * c.box[0] * c.box[1] * c.box[2] * c.box[3] * c.box[4] * c.elem;",
     "bar->tx += 1LL * c.box[0] * c.elem;"),
]


def _build(folder: Path, header: str) -> ctypes.CDLL:
    so = build_harness(folder, header, FUNCTIONS)
    so.h_tx.restype = ctypes.c_longlong
    return so


# ---- the model -----------------------------------------------------------------------------------

@dataclass
class Mbarrier:
    expected: int
    phase: int = 0
    pending: int = 0
    tx: int = 0
    flight: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pending = self.expected

    def _maybe_complete(self) -> None:
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.expected

    def arrive_expect_tx(self, nbytes: int) -> None:
        self.tx += nbytes      # expect-tx
        self.pending -= 1      # arrive-on
        self._maybe_complete()

    def complete_tx(self, nbytes: int) -> None:
        self.tx -= nbytes
        self._maybe_complete()

    def test_wait_parity(self, parity: int) -> bool:
        return (self.phase & 1) != (parity & 1)


# ---- random sequences on both ----------------------------------------------------------------------

def _sequence(so: ctypes.CDLL, rng: random.Random) -> str | None:
    """Runs one random sequence on the emulation and the model; what differed, or None."""
    rank = rng.randint(2, 5)
    elem = rng.choice([1, 2, 4, 8])
    dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[elem]
    shape = tuple(rng.randint(1, 6) for _ in range(rank))  # outermost first
    tensor = np.arange(1, int(np.prod(shape)) + 1, dtype=dtype).reshape(shape)
    stages = rng.randint(1, 3)
    copies = rng.randint(1, 3)
    bars = (ctypes.c_ubyte * (so.h_size() * stages))()
    size = so.h_size()
    model = [Mbarrier(copies) for _ in range(stages)]
    for s in range(stages):
        so.h_init(ctypes.byref(bars, s * size), copies)
    parity = [0] * stages
    dests: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(stages)]
    for step in range(rng.randint(3, 10)):
        s = rng.randrange(stages)
        bar = ctypes.byref(bars, s * size)
        # Fill stage s: `copies` boxes, each arriving with its bytes.
        for _ in range(copies):
            box = [rng.randint(1, 4) for _ in range(rank)]  # innermost first
            coords = [rng.randint(-3, d + 1) for d in reversed(shape)]
            dst = np.full(tuple(reversed(box)), 0xAB, dtype)
            old = dst.copy()
            d = (ctypes.c_longlong * 5)(*[*reversed(shape), *[1] * (5 - rank)])
            c = (ctypes.c_int * 5)(*coords, *[0] * (5 - rank))
            x = (ctypes.c_int * 5)(*box, *[1] * (5 - rank))
            so.h_issue(bar, dst.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte)),
                       tensor.ctypes.data_as(ctypes.POINTER(ctypes.c_ubyte)), d, c, x, elem)
            model[s].arrive_expect_tx(dst.nbytes)
            model[s].flight.append((dst, box_of(tensor, coords, box), dst.nbytes))
            dests[s].append((dst, old))
            if not np.array_equal(dst, old):
                return f"step {step}: a copy wrote its destination before any wait"
            state = (so.h_phase(bar), so.h_pending(bar), so.h_tx(bar))
            if state != (model[s].phase, model[s].pending, model[s].tx):
                return (f"step {step}: after an arrive.expect_tx the barrier is {state}, the model says "
                        f"{(model[s].phase, model[s].pending, model[s].tx)}")
        # A try_wait lets time pass: the copies in flight land (complete-tx), then it tests the
        # parity. A probe of the other parity first (true before the phase completes, false after).
        landed = list(model[s].flight)
        for _dst, _want, nbytes in landed:
            model[s].complete_tx(nbytes)
        model[s].flight.clear()
        if bool(so.h_try_wait(bar, parity[s] ^ 1)) != model[s].test_wait_parity(parity[s] ^ 1):
            return f"step {step}: try_wait.parity({parity[s] ^ 1}) disagrees with the model"
        got = bool(so.h_try_wait(bar, parity[s]))
        if got != model[s].test_wait_parity(parity[s]):
            return f"step {step}: try_wait.parity({parity[s]}) gives {got}, the model {not got}"
        if not got:
            return f"step {step}: the phase did not complete once every copy landed"
        model[s].flight = landed
        for dst, want, _ in model[s].flight:
            if not np.array_equal(dst, want):
                return f"step {step}: a landed box differs from the tensor's box (zero outside)"
        model[s].flight.clear()
        if (so.h_phase(bar), so.h_pending(bar), so.h_tx(bar)) != (model[s].phase, model[s].pending, model[s].tx):
            return f"step {step}: after the wait the barrier differs from the model"
        parity[s] ^= 1
    return None


def _run(so: ctypes.CDLL, seed: int, count: int) -> str | None:
    rng = random.Random(seed)
    for _ in range(count):
        why = _sequence(so, rng)
        if why is not None:
            return why
    return None


@pytest.fixture(scope="module")
def emulation(tmp_path_factory) -> ctypes.CDLL:
    return _build(tmp_path_factory.mktemp("tma-emulation"), (HOST / "host_tma.h").read_text())


def test_the_model_agrees_with_the_emulation(emulation) -> None:
    assert _run(emulation, seed=30, count=300) is None


def test_the_model_by_hand() -> None:
    bar = Mbarrier(2)
    assert not bar.test_wait_parity(0) and bar.test_wait_parity(1)
    bar.arrive_expect_tx(64)
    bar.arrive_expect_tx(32)
    assert (bar.phase, bar.pending, bar.tx) == (0, 0, 96)
    bar.complete_tx(64)
    assert not bar.test_wait_parity(0)
    bar.complete_tx(32)
    assert bar.test_wait_parity(0) and (bar.phase, bar.pending, bar.tx) == (1, 2, 0)
    t = np.arange(12, dtype=np.uint32).reshape(3, 4)
    assert box_of(t, [2, -1], [3, 2]).tolist() == [[0, 0, 0], [2, 3, 0]]


@pytest.mark.parametrize("name,old,new", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_errors_are_caught(name: str, old: str, new: str, tmp_path) -> None:
    text = (HOST / "host_tma.h").read_text()
    assert text.count(old) == 1, f"the planted error {name!r} no longer applies"
    so = _build(tmp_path / "planted", text.replace(old, new))
    assert _run(so, seed=30, count=300) is not None, name


if __name__ == "__main__":  # python -m tests.language.hopper.test_tma_model [N]: a longer run
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        lib = _build(Path(d), (HOST / "host_tma.h").read_text())
        n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
        print(_run(lib, seed=12345, count=n) or f"{n} sequences: the emulation agrees with the model")
