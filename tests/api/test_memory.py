"""Unified memory on the CPU backend (spec section 17): `tessera.managed_empty`/`managed_zeros` give
ordinary host arrays that kernels use in place, `prefetch` and `advise` check their arguments and do
nothing else, and misuse is a `TesseraError` naming the argument. (On CUDA: tests/runtime/cuda/
test_streams.py.)"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import tessera
from tessera.runtime import managed


@pytest.fixture(autouse=True)
def _cpu(shared_cache, monkeypatch) -> None:
    monkeypatch.setenv("TESSERA_BACKEND", "cpu")


def test_managed_arrays_are_numpy_arrays_kernels_use_in_place() -> None:
    x = tessera.managed_empty((3, 40), np.float32)
    y = tessera.managed_zeros(120, "f32")
    assert isinstance(x, np.ndarray) and x.shape == (3, 40) and x.dtype == np.float32 and (y == 0).all()
    assert x.__array_interface__["data"][0] % 64 == 0 and x.flags.writeable and x.flags.c_contiguous
    assert tessera.managed_zeros((2, 0), np.int8).shape == (2, 0)
    assert tessera.managed_empty(4, "bf16").dtype.itemsize == 2
    x[:] = 1.5
    mod = tessera.compile("@kernel tile[(64,)]\ndef k(x: f32[n], y: mut f32[n]):\n    i = global_linear_id()\n"
                          "    if i < n:\n        y[i] = x[i] * 2.0\n")
    mod.k(x.reshape(-1), y, grid=2)
    assert (y == 3.0).all()
    tessera.prefetch(x)
    tessera.prefetch(y[10:20], "cpu", stream=7)
    for hint in managed.HINTS:
        tessera.advise(x[1], hint)
    assert (x == 1.5).all() and (y == 3.0).all()  # nothing moved, nothing changed


def test_the_record_lives_as_long_as_the_memory() -> None:
    before = len(managed._STARTS)
    a = tessera.managed_empty(1000, np.float64)
    view = a[500:]
    del a
    gc.collect()
    assert managed.find(view) == "cpu"  # a view keeps the allocation
    del view
    gc.collect()
    assert len(managed._STARTS) == before


def test_misuse_is_an_error_naming_the_argument() -> None:
    a = tessera.managed_zeros(8, np.float32)
    cases = [
        (lambda: tessera.prefetch(np.zeros(8, np.float32)), r"prefetch\(\): array: the array is not in memory allocated"),
        (lambda: tessera.advise(np.concatenate([a, a]), "host"), r"advise\(\): array: the array is not in memory"),
        (lambda: tessera.prefetch([1.0], "gpu"), r"prefetch\(\): array: expected a NumPy array .* not list"),
        (lambda: tessera.prefetch(a, "tpu"), r"prefetch\(\): device must be one of 'gpu', 'cpu', not 'tpu'"),
        (lambda: tessera.advise(a, "preferred"), r"advise\(\): hint must be one of 'device', 'host', 'read_mostly'"),
        (lambda: tessera.advise(a, None), r"advise\(\): hint must be one of .* not None"),
        (lambda: tessera.managed_empty(-1, np.float32), r"managed_empty\(\): shape must be a non-negative int"),
        (lambda: tessera.managed_empty((2, 2.0), np.float32), r"managed_empty\(\): shape must be"),
        (lambda: tessera.managed_empty(True, np.float32), r"managed_empty\(\): shape must be"),
        (lambda: tessera.managed_empty(4, np.complex64), r"managed_empty\(\): dtype must be a \.tsr element type"),
        (lambda: tessera.managed_zeros(4, "complex"), r"managed_empty\(\): dtype must be"),
        (lambda: tessera.managed_zeros(4, object()), r"managed_empty\(\): dtype must be"),
    ]
    for fn, message in cases:
        with pytest.raises(tessera.TesseraError, match=message):
            fn()
    mixed = np.concatenate([a, np.zeros(8, np.float32)])
    with pytest.raises(tessera.TesseraError, match="not in memory allocated"):
        tessera.prefetch(mixed)


def test_a_view_reaching_past_its_allocation_is_refused() -> None:
    a = tessera.managed_zeros(16, np.float32)
    past = np.lib.stride_tricks.as_strided(a, shape=(17,), strides=(4,))  # one element beyond the allocation
    with pytest.raises(tessera.TesseraError, match="not in memory allocated"):
        tessera.prefetch(past)
    tessera.prefetch(a[::-1])  # negative strides, inside it
