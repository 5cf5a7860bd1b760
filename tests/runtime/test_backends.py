"""The table of backends (runtime/backends.py): every backend it names is found and has what the
API and a compiled variant use; `backend="auto"` takes the first available in `AUTO` order and
says why it did not take the ones before; an unavailable backend asked for by name is an error."""

from __future__ import annotations

import inspect

import pytest

from tessera import api
from tessera.base.errors import TesseraError
from tessera.runtime import backends
from tessera.runtime.backends import AUTO, NAMES, Backend, backend


@pytest.mark.parametrize("name", NAMES)
def test_every_backend_in_the_table_has_what_the_protocol_asks(name: str) -> None:
    be = backend(name)
    assert be.name == name
    for member, value in inspect.getmembers(Backend):
        if not member.startswith("_") and callable(value):
            assert callable(getattr(be, member)), member
    assert isinstance(be.warmup, int) and isinstance(be.device_arrays, bool)
    ok, why = be.status()
    assert isinstance(ok, bool) and why
    assert set(AUTO) == set(NAMES) and ("auto", *NAMES) == api.BACKENDS


def test_an_unknown_backend_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        backend("opencl")


class _Fake:
    def __init__(self, name: str, ok: bool, why: str) -> None:
        self.name, self.ok, self.why = name, ok, why

    def status(self) -> tuple[bool, str]:
        return self.ok, self.why


def test_auto_takes_the_first_available_and_says_why_not_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TESSERA_BACKEND", raising=False)
    fakes = {"cuda": _Fake("cuda", False, "no GPU here"), "cpu": _Fake("cpu", True, "requested")}
    monkeypatch.setattr(api, "find_backend", lambda name: fakes[name])
    assert api.select_backend("auto") == ("cpu", "no GPU here; using the CPU backend")
    assert api.select_backend("cpu") == ("cpu", "requested")
    with pytest.raises(TesseraError, match="backend='cuda' is not available: no GPU here$"):
        api.select_backend("cuda")
    fakes["cuda"] = _Fake("cuda", True, "1 CUDA device(s) found")
    assert api.select_backend("auto") == ("cuda", "1 CUDA device(s) found")
    fakes["cuda"], fakes["cpu"] = _Fake("cuda", False, "no GPU here"), _Fake("cpu", False, "no compiler")
    with pytest.raises(TesseraError, match="no backend is available: no GPU here"):
        api.select_backend("auto")
    assert backends.AUTO == ("cuda", "cpu")


def test_a_backend_asked_for_but_missing_is_an_error_that_does_not_say_it_falls_back(monkeypatch) -> None:
    """The error once read "backend='cuda' is not available: no NVIDIA driver (libcuda not found);
    using the CPU backend", and named backend= where $TESSERA_BACKEND had asked for CUDA."""
    from tessera.runtime.devices import cuda_status

    if cuda_status()[0]:
        pytest.skip("a GPU is present")
    monkeypatch.delenv("TESSERA_BACKEND", raising=False)
    with pytest.raises(TesseraError) as e:
        api.select_backend("cuda")
    assert str(e.value).startswith("backend='cuda' is not available: ") and "using" not in str(e.value)
    monkeypatch.setenv("TESSERA_BACKEND", "cuda")
    with pytest.raises(TesseraError, match="^TESSERA_BACKEND=cuda is not available: ") as e:
        api.select_backend("cpu")
    assert "using" not in str(e.value)
    monkeypatch.delenv("TESSERA_BACKEND")
    assert api.select_backend("auto") == ("cpu", f"{cuda_status()[1]}; using the CPU backend")
