"""`tessera.ops` kernels as compiled code, without a GPU: an operator call tunes its kernel through
`@autotune` and the persistent cache; the search spaces prune (spills, tiles per group) and rank;
matmul falls back to the unfused epilogue only where every fused candidate is pruned; every kernel
compiles with NVRTC for sm_80 and sm_90 without warnings or spills; a wheel ships the kernels."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import tessera
from tessera import autotune, ops
from tessera.autotune.search import candidates, judge_all
from tessera.autotune.store import TuneStore
from tessera.ops import launcher, linalg
from tests.conftest import ROOT
from tests.ops import reference as ref


@pytest.fixture
def tuning(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TESSERA_BACKEND", "cpu")
    monkeypatch.setattr(autotune, "_store", TuneStore())
    monkeypatch.setattr(autotune, "_settings", {**autotune._settings, "enabled": True, "cpu": False})
    monkeypatch.setattr(autotune, "_memo", {})
    return tmp_path / "cache"


def test_an_operator_call_tunes_once_and_keeps_the_choice(tuning) -> None:
    x = np.random.default_rng(0).standard_normal((6, 300)).astype(np.float16)
    before = autotune.stats().get("tunings", 0)
    ref.close(ops.softmax(x), ref.softmax(x), "f16")
    ref.close(ops.softmax(x), ref.softmax(x), "f16")
    assert autotune.stats()["tunings"] == before + 1  # the second call reuses the choice
    records = json.loads((tuning / "autotune" / "v1" / "sm_90.json").read_text())["records"]
    mine = [r for r in records if r["kernel"] == "softmax"]
    space = launcher.kernel("rows.tsr", "softmax", False).tune_space
    assert space is not None and len(mine) == len(candidates(space, {}))
    best = min((r for r in mine if not r.get("pruned")),
               key=lambda r: (r["model"]["time_us"], sorted(r["config"].items())))
    assert best["config"] == {n: launcher.LAST["softmax"][n] for n in ("NT", "VEC")}


def _judged(file: str, kernel: str, other: dict, shapes: dict, fixed: dict, groups: int):
    mod = launcher.module(file, False)
    space = mod[kernel].tune_space
    assert space is not None
    return judge_all(mod.front_end(), "sm_80", kernel, candidates(space, fixed), other, shapes, lambda c: groups)


def test_attention_space_prunes_the_tiles_that_spill_and_ranks_the_rest(tuning) -> None:
    judged = _judged("attention.tsr", "attention", {"T": "f16", "HD": 128}, {"BH": 64, "N": 4096, "D": 128},
                     {"stages": 2}, 64 * 64)
    pruned = {(dict(j.config)["BM"], dict(j.config)["BN"]) for j in judged if j.pruned}
    assert pruned == {(128, 64)}, [(j.config, j.reason) for j in judged]
    assert all(j.rule in ("spills", "registers") for j in judged if j.pruned)
    times = sorted(j.estimate.time_us for j in judged if j.estimate is not None)
    assert len(times) == 3 and times[0] < times[-1]


def test_depthwise_space_prunes_groups_over_1024_tiles(tuning) -> None:
    judged = _judged("depthwise.tsr", "depthwise", {"T": "f32"}, {"NC": 256, "H": 112, "W": 112, "OH": 112,
                     "OW": 112, "C": 256, "KK": 9}, {"VEC": 1, "stages": 2, "BW": 64}, 256 * 2)
    over = {dict(j.config)["BH"]: j for j in judged}
    assert over[32].rule == over[64].rule == "tiles per group" and not over[16].pruned


FUSING = """\
@autotune(fuse=[1, 0], B=[1, 2], key=[n])
@kernel tile[(32 * B,)]
def gemm_like(x: f32[n], y: mut f32[n], fuse: const i32 = 0, B: const i32 = 1):
    big = tshared.alloc(f32[1 + fuse * 100000])
    i = global_linear_id()
    big[tile_linear_id()] = 1.0
    if i < n:
        y[i] = x[i] + f32(fuse)
"""


def test_matmul_falls_back_to_the_unfused_epilogue_only_where_fusion_is_pruned(tuning) -> None:
    k = tessera.compile(FUSING, backend="cpu").gemm_like
    x, y = np.zeros(10, np.float32), np.zeros(10, np.float32)
    assert linalg.fused_config(k, (x, y), {}, {}, 1) is None  # the fused form needs 400 KB of shared memory
    ok = tessera.compile(FUSING.replace("100000", "10"), backend="cpu").gemm_like
    assert linalg.fused_config(ok, (x, y), {}, {}, 1)["fuse"] == 1


# Each kernel of the package at its default configuration, with the options the operators use.
VARIANTS = [
    ("matmul.tsr", "mm_tc", {"T": "f16", "act": 2, "has_bias": 1}),
    ("matmul.tsr", "mm_tc", {"T": "bf16", "act": 3, "has_bias": 1, "fuse": 0}),
    ("matmul.tsr", "mm_i8", {"act": 1, "has_bias": 1}),
    ("matmul.tsr", "mm_f32", {"act": 2, "has_bias": 1}),
    ("matmul.tsr", "mm_epilogue", {"T": "bf16", "act": 2}),
    ("rows.tsr", "softmax", {"T": "bf16"}),
    ("rows.tsr", "layer_norm", {"T": "f16"}),
    ("rows.tsr", "rms_norm", {"T": "f32"}),
    ("attention.tsr", "attention", {"T": "f16", "HD": 64, "causal": 1}),
    ("attention.tsr", "attention", {"T": "bf16", "HD": 128}),
    ("depthwise.tsr", "depthwise", {"T": "f16", "KH": 5, "KW": 5, "S": 2, "P": 2}),
]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("file, kernel, consts", VARIANTS, ids=[f"{k}-{'-'.join(map(str, c.values()))}"
                                                                  for _, k, c in VARIANTS])
def test_kernels_compile_with_nvrtc_without_warnings_or_spills(shared_cache, file, kernel, consts, arch) -> None:
    figures = launcher.figures(file, kernel, consts, arch)
    assert figures["warnings"] == () and figures["spills"] == 0, figures
    assert 0 < figures["registers"] <= 255


def test_a_wheel_ships_the_kernels(tmp_path) -> None:
    """The kernels are package data: a non-editable install has them."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(ROOT),
                    "-w", str(tmp_path)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.name for p in (ROOT / "tessera" / "ops" / "kernels").glob("*.tsr")}
    assert shipped and {f"tessera/ops/kernels/{n}" for n in shipped} <= names
