"""`tpipeline` bodies as attention steps need them (spec section 7, v3; docs/language.md 8.7):
barriers of the body's own after the leading copies (a hand-off of shared data between tiles in
the middle of an iteration), directly or in a device function, with no redundant barrier of the
pipeline's next to them (the emitted code is read and its barriers counted); shared arrays that
several loops pipeline, one after another and inside an outer loop. Results on the CPU backend
against NumPy at ragged sizes with check_bounds on and off; the race detector reports a planted
missing barrier with both lines; NVRTC sm_80/sm_90 compile without warnings or spills; a catalog
of the misuses. The random programs of tests/language/test_pipelines_in_loops.py cover the same
forms (its `v3` mode)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from tessera.base.errors import LaunchError, SourceFile
from tessera.base.options import CompileOptions
from tessera.runtime.cuda.nvrtc import compile_cuda
from tessera.transpile.driver import compile_source
from tests.transpile.checks.catalog import (
    Case,
    check_catalog_case,
)

pytestmark = pytest.mark.usefixtures("shared_cache")

# Column sums of X, each tile adding another tile's partial sum: the partial sums go through W with
# a barrier in the middle of the pipelined body. `{lead}`/`{tail}` are barriers of the body's own
# right after the copies and at its end (the pipeline merges them with its own).
HANDOFF = """\
@device
def swap(w: mut f32[n], t: i32, v: f32) -> f32:
    w[t] = v
    tbarrier()
    return w[n - 1 - t]

@kernel tile[(64,)]
def colsum(X: f32[R, C], out: mut f32[C], S: const i32 = 2):
    Xs = tshared.alloc(f32[8, 64])
    W = tshared.alloc(f32[64])
    t = tile_linear_id()
    c0 = group_id(0) * 64
    acc = 0.0
    for r in tpipeline(0, R, 8, stages=S):
        tcopy_async(Xs, X[r:r + 8, c0:c0 + 64]){lead}
        s = 0.0
        for i in static_range(8):
            s += Xs[i, t]
{handoff}{tail}
    if c0 + 63 - t < C:
        out[c0 + 63 - t] = acc
"""
DIRECT = "        W[t] = s\n        tbarrier()\n        acc += W[63 - t]"
CALLED = "        acc += swap(W, t, s)"


def handoff(lead: bool = False, tail: bool = False, called: bool = False) -> str:
    return HANDOFF.format(lead="\n        tbarrier()" if lead else "", tail="\n        tbarrier()" if tail else "",
                          handoff=CALLED if called else DIRECT)


FORMS = {"mid": {}, "lead": dict(lead=True), "tail": dict(tail=True), "lead-tail": dict(lead=True, tail=True),
         "called": dict(called=True), "called-tail": dict(called=True, tail=True)}


@pytest.mark.parametrize("check_bounds", [False, True])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_mid_body_hand_off_matches_numpy(form: str, check_bounds: bool) -> None:
    mod = tessera.compile(handoff(**FORMS[form]), backend="cpu", check_bounds=check_bounds, path="handoff.tsr")
    for r, c in ((37, 100), (8, 64), (1, 3), (0, 70)):
        x = np.random.default_rng(r * c).integers(-9, 10, (r, c)).astype(np.float32)
        for stages in (1, 2, 3):
            out = np.full(c, np.nan, np.float32)
            mod.colsum(x, out, S=stages, grid=-(-c // 64))
            np.testing.assert_array_equal(out, x.sum(axis=0), err_msg=f"{r}x{c} stages={stages}")


@pytest.mark.parametrize("called", [False, True])
def test_a_missing_hand_off_barrier_is_reported_with_both_lines(called: bool) -> None:
    src = handoff(called=called)  # without the hand-off's barrier:
    src = src.replace("w[t] = v\n    tbarrier()\n", "w[t] = v\n") if called else \
        src.replace("W[t] = s\n        tbarrier()\n", "W[t] = s\n")
    lines = src.splitlines()
    write = next(i + 1 for i, line in enumerate(lines) if ("w[t] = v" if called else "W[t] = s") in line)
    read = next(i + 1 for i, line in enumerate(lines) if ("return w[n - 1 - t]" if called else "acc += W[63") in line)
    mod = tessera.compile(src, backend="cpu", check_bounds=True, path="racy.tsr")
    x = np.ones((20, 64), np.float32)
    with pytest.raises(LaunchError) as e:
        mod.colsum(x, np.zeros(64, np.float32), S=2, grid=1)
    text = str(e.value)
    assert "data race" in text and f"line {write}" in text and f"line {read}" in text, text


def _loop(cuda: str, head: str) -> str:
    """The text of the C loop that starts with `head`, braces matched."""
    start = cuda.index(head)
    depth = 0
    for i in range(cuda.index("{", start), len(cuda)):
        depth += {"{": 1, "}": -1}.get(cuda[i], 0)
        if depth == 0:
            return cuda[start:i + 1]
    raise AssertionError("unbalanced")


@pytest.mark.parametrize("stages", [1, 2, 3])
@pytest.mark.parametrize(("form", "inside", "before"), [("mid", 2, 0), ("lead", 2, 0), ("tail", 2, 1),
                                                        ("lead-tail", 2, 1), ("called-tail", 1, 1)])
def test_one_barrier_per_hand_off(form: str, inside: int, before: int, stages: int) -> None:
    # In the loop: the barrier that makes each iteration's copies visible (and frees the previous
    # stage), and the hand-off's; a barrier of the body's own next to the pipeline's is not doubled.
    # With a barrier that ends the body, the first iteration waits before the loop. One stage has
    # one more: its single buffer is refilled after a barrier and read after the wait's.
    cuda = compile_source(SourceFile("h.tsr", handoff(**FORMS[form])), variants={"colsum": {"S": stages}}).cuda
    body = cuda[cuda.index(f"colsum_S{stages}("):]
    loop = _loop(body, "for (int r = 0;")
    assert loop.count("__syncthreads()") == inside + (stages == 1), loop
    prologue = body[:body.index("for (int r = 0;")]
    assert prologue.count("__syncthreads()") == before, prologue
    assert loop.count("tsr_cp_async_wait<") == 1 and loop.count("tsr_cp_async_commit") == 1


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_hand_offs_compile_with_nvrtc(form: str, arch: str) -> None:
    for stages in (1, 3):
        cuda = compile_source(SourceFile("h.tsr", handoff(**FORMS[form])), options=CompileOptions(arch=arch),
                              variants={"colsum": {"S": stages}}).cuda
        nv = compile_cuda(cuda, name="h.cu", arch=arch)
        assert nv.warnings == ()
        assert nv.kernel(f"colsum_S{stages}").spill_stores == 0


# ---- several loops over the same staging arrays ------------------------------------------------------

# Per column: the sum, then the sum of squares of the next column, by two pipelines over the same
# array with their own stage counts; inside a loop over column blocks (`persistent`) or once.
TWICE = """\
@kernel tile[(64,)]
def twice(X: f32[R, C], out: mut f32[2, C], S: const i32 = 2, S2: const i32 = 3):
    Xs = tshared.alloc(f32[8, 65])
    t = tile_linear_id()
    for cb in range(group_id(0), (C + 63) // 64, group_count(0)):
        c0 = cb * 64
        acc = 0.0
        for r in tpipeline(0, R, 8, stages=S):
            tcopy_async(Xs, X[r:r + 8, c0:c0 + 65])
            for i in static_range(8):
                acc += Xs[i, t]
        sq = 0.0
        if R > 3:
            for r2 in tpipeline(0, R, 8, stages=S2):
                tcopy_async(Xs, X[r2:r2 + 8, c0:c0 + 65])
                for i in static_range(8):
                    sq += Xs[i, t + 1] * Xs[i, t + 1]
        if c0 + t < C:
            out[0, c0 + t] = acc
            out[1, c0 + t] = sq
"""
ONCE = TWICE.replace("    for cb in range(group_id(0), (C + 63) // 64, group_count(0)):\n", "    if True:\n"
                     "        cb = group_id(0)\n")


def _twice_model(x: np.ndarray) -> np.ndarray:
    r, c = x.shape
    nxt = np.concatenate([x[:, 1:], np.zeros((r, 1), x.dtype)], axis=1)
    return np.stack([x.sum(axis=0), (nxt * nxt).sum(axis=0) if r > 3 else np.zeros(c, x.dtype)])


@pytest.mark.parametrize("check_bounds", [False, True])
@pytest.mark.parametrize("src", [TWICE, ONCE], ids=["persistent", "once"])
def test_two_loops_pipeline_the_same_array(src: str, check_bounds: bool) -> None:
    mod = tessera.compile(src, backend="cpu", check_bounds=check_bounds, path="twice.tsr")
    for r, c in ((37, 130), (3, 64), (9, 1), (0, 5)):
        x = np.random.default_rng(r + c).integers(-5, 6, (r, c)).astype(np.float32)
        for s1, s2 in ((1, 1), (2, 3), (3, 2), (4, 1)):
            out = np.full((2, c), np.nan, np.float32)
            mod.twice(x, out, S=s1, S2=s2, grid=2 if src is TWICE else -(-c // 64))
            np.testing.assert_array_equal(out, _twice_model(x), err_msg=f"{r}x{c} stages {s1}, {s2}")


def test_the_array_is_kept_as_many_times_as_the_most_stages() -> None:
    result = compile_source(SourceFile("t.tsr", ONCE), variants={"twice": {"S": 2, "S2": 4}})
    assert "__shared__ __align__(16) float Xs[4][8][65];" in result.cuda


def test_without_the_barrier_between_the_loops_the_race_detector_reports_it(monkeypatch) -> None:
    from tessera.transpile.passes import pipeline_copies as pc

    monkeypatch.setattr(pc, "_after_other_loops", lambda loops: set())
    src = "# unfixed\n" + ONCE  # other C than the fixed build's
    lines = src.splitlines()
    copy = next(i + 1 for i, line in enumerate(lines) if "tcopy_async(Xs, X[r2" in line)
    read = next(i + 1 for i, line in enumerate(lines) if "acc += Xs" in line)
    x = np.ones((24, 64), np.float32)  # 3 trips: the first loop ends in stage 0, which the second fills first
    with pytest.raises(LaunchError) as e:
        tessera.compile(src, backend="cpu", check_bounds=True, path="once.tsr").twice(
            x, np.zeros((2, 64), np.float32), S=2, S2=2, grid=1)
    text = str(e.value)
    assert "data race" in text and f"line {read}" in text and f"line {copy}" in text, text


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_several_loops_compile_with_nvrtc(arch: str) -> None:
    for src in (TWICE, ONCE):
        cuda = compile_source(SourceFile("t.tsr", src), options=CompileOptions(arch=arch),
                              variants={"twice": {"S": 3, "S2": 2}}).cuda
        nv = compile_cuda(cuda, name="t.cu", arch=arch)
        assert nv.warnings == () and nv.kernel("twice_S3_S22").spill_stores == 0


# ---- a pipelined array passed to a device function: the stage its loop reads ----------------------------

PASSED = """\
@device
def col_sum(s: f32[r, c], col: i32) -> f32:
    acc = 0.0
    for i in range(r):
        acc += s[i, col]
    return acc

@kernel tile[(64,)]
def colsum2(X: f32[R, C], out: mut f32[C], S: const i32 = 2):
    Xs = tshared.alloc(f32[8, 64], pad=4)
    t = tile_linear_id()
    c0 = group_id(0) * 64
    acc = 0.0
    for r in tpipeline(0, R, 8, stages=S):
        tcopy_async(Xs, X[r:r + 8, c0:c0 + 64])
        acc += col_sum(Xs, t)
    if c0 + t < C:
        out[c0 + t] = acc
"""


@pytest.mark.parametrize("check_bounds", [False, True])
def test_a_pipelined_array_passed_to_a_device_function(check_bounds: bool) -> None:
    # It was refused ("multi-buffered by a tpipeline loop and cannot be passed"); the callee now gets
    # the stage the iteration reads, with the padded row length.
    mod = tessera.compile(PASSED, backend="cpu", check_bounds=check_bounds, path="passed.tsr")
    for r, c in ((37, 100), (3, 64), (0, 9)):
        x = np.random.default_rng(r).integers(-9, 10, (r, c)).astype(np.float32)
        for stages in (1, 2, 3):
            out = np.full(c, np.nan, np.float32)
            mod.colsum2(x, out, S=stages, grid=-(-c // 64))
            np.testing.assert_array_equal(out, x.sum(axis=0), err_msg=f"{r}x{c} stages={stages}")
    cuda = compile_source(SourceFile("p.tsr", PASSED)).cuda
    assert "col_sum(&Xs[tsr_stage_r_14][0][0], 68, t, 8, 64)" in cuda


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_pipelined_array_passed_compiles_with_nvrtc(arch: str) -> None:
    nv = compile_cuda(compile_source(SourceFile("p.tsr", PASSED), options=CompileOptions(arch=arch)).cuda,
                      name="p.cu", arch=arch)
    assert nv.warnings == () and nv.kernel("colsum2_S2").spill_stores == 0


# ---- misuse ----------------------------------------------------------------------------------------------

HEAD = "@kernel tile[(64,)]\ndef k(x: f32[n], out: mut f32[n]):\n    s = tshared.alloc(f32[64])\n"
LOOP = "    for k0 in tpipeline(0, n, 64):\n        tcopy_async(s, x[k0:k0 + 64])\n"

CATALOG = [
    Case("wait-in-callee", "@device\ndef sync():\n    twait(0)\n\n" + HEAD + LOOP + "        sync()\n", 10, 9,
         ("sync() commits or waits for asynchronous copies", "tpipeline loop (line 8)")),
    Case("barrier-between-leading-copies", HEAD + "    t = tshared.alloc(f32[64])\n" + LOOP +
         "        tbarrier()\n        tcopy_async(t, x[k0:k0 + 64])\n", 8, 9,
         "a tcopy_async() after the leading ones inside a tpipeline loop (line 5)"),
    Case("store-in-second-loop", HEAD + LOOP + "        out[0] = s[0]\n" + LOOP.replace("k0", "k1") +
         "        s[1] = 0.0\n", 9, 9,
         "'s' is filled by the pipelined copies of the tpipeline at line 7 and cannot be stored to"),
    Case("used-in-a-loop-that-does-not-pipeline-it", HEAD + "    t = tshared.alloc(f32[64])\n" + LOOP +
         "        out[0] = s[0]\n" + "    for k1 in tpipeline(0, n, 64):\n        tcopy_async(t, x[k1:k1 + 64])\n"
         "        out[1] = s[1] + t[1]\n", 10, 9,
         "'s' is multi-buffered by the tpipeline loop at line 5 and may be used only inside it"),
    Case("used-after-two-loops", HEAD + LOOP + "        out[0] = s[0]\n" + LOOP.replace("k0", "k1") +
         "        out[1] = s[1]\n    out[2] = s[2]\n", 10, 5,
         "'s' is multi-buffered by the tpipeline loops at line 4 and 7 and may be used only inside them"),
    Case("pipelined-array-passed-for-mut", "@device\ndef first(v: mut f32[m]) -> f32:\n    return v[0]\n\n" + HEAD +
         LOOP + "        out[0] = first(s)\n", 10, 9,
         ("'s' is filled by the pipelined copies of the tpipeline at line 8 and cannot be passed for the mut "
          "parameter 'v' of first()")),
    Case("pipelined-array-passed-outside", "@device\ndef first(v: f32[m]) -> f32:\n    return v[0]\n\n" + HEAD +
         LOOP + "        out[0] = s[0]\n    out[1] = first(s)\n", 11, 5,
         "'s' is multi-buffered by the tpipeline loop at line 8 and may be used only inside it"),
    Case("fragment-passed-to-a-device-function", "@device\ndef scale(s: mut f32[m, k], a: f32):\n    s[0, 0] = a\n\n"
         "@kernel tile[(128,)]\ndef k(C: mut f32[M, N]):\n    acc = tfrag(f32[32, 32], 0.0)\n    scale(acc, 2.0)\n"
         "    tstore(C[0:32, 0:32], acc)\n", 8, 11,
         ("'acc' is a fragment, but parameter 's' of scale() is not",
          "declare it 's: mut frag f32[32, 32]' (the function is then inlined)")),
    Case("duplicate-parameter-const-later", "@kernel tile[(64,)]\ndef k(G: f32[n], G: const i32 = 4):\n    pass\n",
         2, 18, "duplicate parameter 'G'", note="first defined here"),
]


@pytest.mark.parametrize("case", CATALOG, ids=lambda c: c.id)
def test_catalog(case: Case, tmp_path, capsys) -> None:
    check_catalog_case(case, tmp_path, capsys)


def test_the_catalog_ids_are_unique() -> None:
    assert len({c.id for c in CATALOG}) == len(CATALOG)
    assert all(re.fullmatch(r"[a-z0-9-]+", c.id) for c in CATALOG)
