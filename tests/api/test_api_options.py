"""Options of `tessera.load` / `tessera.compile` are checked as strictly as `tesserac` checks its
own (tessera/base/options.py): before, `arch=` went into the C text unchecked, so that a newline in it
injected code that ran when the library was loaded."""

from __future__ import annotations

import pytest

import tessera
from tessera.base.options import ARCHS
from tessera.cli.compile import build_parser
from tests.conftest import ROOT

SOURCE = (ROOT / "samples" / "sum_reduce.tsr").read_text()


@pytest.mark.parametrize("options,message", [
    ({"arch": 'sm_90. */\n__attribute__((constructor)) static void evil() {}\n/* '}, "arch= must be one of sm_75"),
    ({"arch": "sm_99"}, "arch= must be one of"),
    ({"arch": 90}, "arch= must be one of sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a, sm_100 or None, not 90"),
    ({"debug": 1}, "debug= must be True or False, not 1"),
    ({"debug": "no"}, "debug= must be True or False, not 'no'"),
    ({"check_bounds": None}, "check_bounds= must be True or False, not None"),
    ({"path": 3}, "path= must be a str, not int"),
], ids=["arch-injection", "arch-unknown", "arch-int", "debug-int", "debug-str", "check_bounds-none", "path"])
def test_bad_options_raise_naming_the_option(options: dict, message: str) -> None:
    with pytest.raises(tessera.TesseraError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tessera.compile(SOURCE, backend="cpu", **options)


def test_bad_options_of_load_raise_too(tmp_path) -> None:
    path = tmp_path / "k.tsr"
    path.write_text(SOURCE)
    with pytest.raises(tessera.TesseraError, match="arch= must be one of"):
        tessera.load(path, backend="cpu", arch="sm_90\n#error x")
    with pytest.raises(tessera.TesseraError, match="debug= must be True or False"):
        tessera.load(str(path), backend="cpu", debug="yes")


@pytest.mark.parametrize("path,message", [
    (3, "path must be a str or an os.PathLike naming a file, not int"),
    (b"k.tsr", "path must be a str or an os.PathLike naming a file, not bytes"),
    ("k\x00.tsr", "cannot read 'k\\\\x00.tsr': not a valid path"),
], ids=["int", "bytes", "nul"])
def test_load_checks_its_path(path, message: str) -> None:
    with pytest.raises(tessera.TesseraError, match=message):
        tessera.load(path, backend="cpu")


def test_compile_checks_its_source() -> None:
    with pytest.raises(tessera.TesseraError, match="source must be a str, not bytes"):
        tessera.compile(SOURCE.encode(), backend="cpu")
    # a lone surrogate cannot be UTF-8: a located error, not a UnicodeEncodeError
    with pytest.raises(tessera.CompileError, match=r"<string>:2:8: error: source is not valid UTF-8"):
        tessera.compile("const A = 1\nconst B\ud800 = 2\n", backend="cpu")


def test_one_table_of_architectures() -> None:
    import tessera.cli.compile
    from tessera.base.options import check_arch

    assert tessera.cli.compile.ARCHS is ARCHS
    assert build_parser().get_default("arch") in ARCHS
    assert [check_arch(a) for a in ARCHS] == list(ARCHS)


@pytest.mark.parametrize("value,message", [(10**5000, "does not fit in 64 bits"), (float("nan"), "must be finite"),
                                           (3e9, "is i32, not a float"), (2**40, "does not fit in i32")],
                         ids=["huge", "nan", "float", "i64"])
def test_const_values_at_a_launch_are_checked(value, message: str, tmp_path, monkeypatch) -> None:
    # a huge int here was an internal compiler error (the variant's name could not be printed)
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    mod = tessera.compile("@kernel tile[(32,)]\ndef k(y: mut f32[n], N: const i32 = 1):\n    y[0] = f32(N)\n",
                          backend="cpu")
    import numpy as np

    with pytest.raises(tessera.TesseraError, match=message):
        mod.k(np.zeros(4, np.float32), grid=1, N=value)


def test_a_kernel_without_const_parameters_launches_the_variant_load_compiled(tmp_path, monkeypatch) -> None:
    import numpy as np

    import tessera.transpile.driver

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    compiled = []
    real = tessera.transpile.driver.compile_variant
    monkeypatch.setattr(tessera.transpile.driver, "compile_variant", lambda *a, **k: compiled.append(k) or real(*a, **k))
    mod = tessera.compile(SOURCE, backend="cpu")
    out = np.zeros(8, np.float32)
    mod.sum_reduce(np.ones(4096, np.float32), out)
    assert (out == 4096).all()
    assert len(compiled) == 1  # by load, not again for the launch
