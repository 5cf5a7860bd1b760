"""Misuse of the public functions of tessera/api.py and tessera/autotune/__init__.py raises a
TesseraError subclass that names the argument, never a Python error from inside: one table of
calls, each with the class and a fragment of the message. Before, `benchmark(repeat=0)` raised
statistics.StatisticsError, `explain(k, n="x")` ValueError (and `n=-1` was accepted), a path with a
NUL ValueError, and `mod[3]` an AttributeError only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tessera
from tessera import autotune
from tessera.api import NoKernelError
from tessera.base.errors import LaunchError, TesseraError

pytestmark = pytest.mark.usefixtures("shared_cache")

SOURCE = """
@autotune(BM=[32, 64], key=[n])
@kernel tile[(32,)]
def k(x: mut f32[n], BM: const i32 = 32):
    i = global_linear_id()
    if i < n:
        x[i] = x[i] + 1.0
"""


@pytest.fixture(scope="module")
def mod() -> tessera.api.Module:
    return tessera.compile(SOURCE, backend="cpu")


X = np.zeros(64, np.float32)
BENCH = "k.benchmark(): repeat must be an int from 1 to 1000000"
KEY = "explain(k): n must be an int from 0 to 2147483647"
CASES: list[tuple[str, Callable[[Any], object], type[TesseraError], str]] = [
    ("benchmark-repeat-0", lambda m: m.k.benchmark(X, grid=2, repeat=0), LaunchError, BENCH + ", not 0"),
    ("benchmark-repeat-negative", lambda m: m.k.benchmark(X, grid=2, repeat=-1), LaunchError, BENCH),
    ("benchmark-repeat-str", lambda m: m.k.benchmark(X, grid=2, repeat="5"), LaunchError, BENCH + ", not '5'"),
    ("benchmark-repeat-float", lambda m: m.k.benchmark(X, grid=2, repeat=1.5), LaunchError, BENCH),
    ("benchmark-repeat-bool", lambda m: m.k.benchmark(X, grid=2, repeat=True), LaunchError, BENCH),
    ("explain-key-str", lambda m: autotune.explain(m.k, n="x"), TesseraError, KEY + " (a shape symbol's value), not 'x'"),
    ("explain-key-negative", lambda m: autotune.explain(m.k, n=-1), TesseraError, KEY),
    ("explain-key-float", lambda m: autotune.explain(m.k, n=1.5), TesseraError, KEY),
    ("explain-key-none", lambda m: autotune.explain(m.k, n=None), TesseraError, KEY),
    ("explain-key-bool", lambda m: autotune.explain(m.k, n=True), TesseraError, KEY),
    ("explain-key-huge", lambda m: autotune.explain(m.k, n=2**31), TesseraError, KEY),
    ("explain-key-array", lambda m: autotune.explain(m.k, n=np.arange(3)), TesseraError, KEY),
    ("explain-unknown-key", lambda m: autotune.explain(m.k, n=4, m=3), TesseraError,
     "explain(k): 'm' is not a key of its @autotune (key: n)"),
    ("explain-missing-key", lambda m: autotune.explain(m.k), TesseraError, "give the key value n as keywords"),
    ("explain-not-a-kernel", lambda m: autotune.explain(3, n=4), TesseraError, "explain() takes a kernel with @autotune"),
    ("save-cache-nul", lambda m: autotune.save_cache("a\0b"), TesseraError,
     "save_cache(): path 'a\\x00b' is not a valid path"),
    ("load-cache-nul", lambda m: autotune.load_cache("a\0b"), TesseraError,
     "load_cache(): path 'a\\x00b' is not a valid path"),
    ("save-cache-int", lambda m: autotune.save_cache(3), TesseraError, "save_cache() takes a path as a str, not int"),
    ("enable-top-k", lambda m: autotune.enable(True, top_k=0), TesseraError, "top_k must be an int from 1 to 1000"),
    ("enable-flag", lambda m: autotune.enable(1), TesseraError, "enable() takes True or False, not 1"),
    ("module-index-int", lambda m: m[3], TesseraError, "module[name]: a kernel's name is a str, not int"),
    ("module-no-kernel", lambda m: m["nope"], NoKernelError, "has no kernel 'nope' (kernels: k)"),
    ("module-no-kernel-attribute", lambda m: m.nope, NoKernelError, "has no kernel 'nope'"),
    ("grid", lambda m: m.k(X, grid=(1, 2, 3, 4)), LaunchError, "k(): grid must be an int or a tuple of 1 to 3 ints"),
    ("timeout", lambda m: m.k(X, grid=1, timeout="x"), LaunchError, "timeout must be a positive number of seconds"),
    ("const", lambda m: m.k(X, grid=1, BM=[1]), LaunchError, "k(): const parameter 'BM' must be an int"),
    ("info-unknown-const", lambda m: m.k.info(ZZ=1), LaunchError, "k() has no const parameter 'ZZ'"),
    ("backend", lambda m: tessera.compile(SOURCE, backend="tpu"), TesseraError, "backend= must be one of auto"),
]


@pytest.mark.parametrize("call,error,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_misuse_raises_a_tessera_error_naming_the_argument(mod, call, error, message: str) -> None:
    with pytest.raises(error) as e:
        call(mod)
    assert message in str(e.value)


def test_a_missing_kernel_is_still_an_attribute_error(mod) -> None:
    assert not hasattr(mod, "nope") and getattr(mod, "nope", None) is None
    assert isinstance(NoKernelError("x"), AttributeError)
