"""A compiled variant of a module: what it is made from (`VariantSpec`: source, backend, compile
options, one kernel's const values), its kernels' metadata and CUDA C, cached on disk as JSON
next to the compiled library, which is built on the first launch that needs it.

A variant needs the source's front end only when it is not in the cache: it is given a function
that parses the source once (tessera/api.py's `Module.front_end`), never the module itself.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tessera.base.errors import CompileError, LaunchError
from tessera.base.irnode import ir_node
from tessera.base.kernel_info import KernelInfo, kernels_from_json, kernels_to_json
from tessera.base.options import CompileOptions
from tessera.base.tune_space import TuneSpace
from tessera.runtime.backends import Library, backend

if TYPE_CHECKING:
    from tessera.transpile.driver import FrontEnd

FORMAT = "1"
Value = int | float | bool | str  # a const parameter's value, or a type parameter's binding


@ir_node
class VariantSpec:
    """One variant: the source (as read), the backend, the compile options (with the alignment
    variant and the CPU mode of this one) and, for a kernel with const or type parameters, that
    kernel and its values (`kernel` None: every kernel with its defaults)."""

    source: bytes
    backend: str
    options: CompileOptions
    kernel: str | None = None
    consts: tuple[tuple[str, Value], ...] = ()

    def replace_options(self, **changes: Any) -> VariantSpec:
        return dataclasses.replace(self, options=self.options.replace(**changes))

    def key(self) -> str:
        """The metadata cache's key: every field, the compiler's fingerprint (which covers the
        compiler and the CPU backend's runtime sources) and, on the CPU backend, whether its library
        has one clone of each kernel ($TESSERA_CPU_CLONES=host)."""
        from tessera.runtime.cache.disk import cache_key
        from tessera.runtime.cache.fingerprint import fingerprint
        from tessera.runtime.host.clones import mode

        # The library a CPU variant names has one clone of each kernel: a key of its own.
        clones = ("clones=host",) if self.backend == "cpu" and mode() == "host" else ()
        return cache_key("front", FORMAT, fingerprint(), self.backend, self.source, self.options.key(),
                         self.kernel or "", json.dumps([list(c) for c in self.consts]), *clones)


FrontEndOf = Callable[[], "FrontEnd"]


class Variant:
    """The compiled form of one spec: kernel metadata, plus the library, built on the first launch
    that needs it (a launch that picks the aligned variant never builds the generic one)."""

    def __init__(self, spec: VariantSpec, front: FrontEndOf, kernels: tuple[KernelInfo, ...], names: tuple[str, ...],
                 consts: dict[str, tuple[str, ...]], types: dict[str, dict[str, list]],
                 spaces: dict[str, TuneSpace], library_key: str = "", cuda: str | None = None,
                 artifact: Any = None) -> None:
        self.spec = spec
        self.kernels = kernels
        self.names = names
        self.consts = consts
        self.types = types
        self.spaces = spaces  # kernel -> its @autotune search space
        self.library_key = library_key
        self._front = front
        self._cuda = cuda          # the CUDA C, when this process compiled it
        self._artifact = artifact  # the verified library path (CPU) or image (CUDA), when already at hand
        self._lib: Library | None = None  # once loaded

    @property
    def backend(self) -> str:
        return self.spec.backend

    def kernel(self, name: str) -> KernelInfo:
        for k in self.kernels:
            if k.name == name:
                return k
        raise LaunchError(f"kernel '{name}' needs values for its const parameters "
                          f"({', '.join(self.consts.get(name, ()))}): pass them as keyword arguments")

    def library(self) -> Library:
        if self._lib is not None:
            return self._lib
        be = backend(self.backend)
        lib = be.load(self.library_key, self.kernels, self._artifact) if self.library_key else None
        if lib is None:
            self._build()
            lib = be.load(self.library_key, self.kernels, self._artifact)
            assert lib is not None, "a library just built loads"
        self._lib = lib
        return lib

    def _build(self) -> None:
        """Compile the library (by the backend: NVRTC, the host compiler) and record it in the
        metadata cache."""
        if self._cuda is None:  # metadata from the cache: transpile again to build
            self._cuda = compile_spec(self.spec, self._front)._cuda
        assert self._cuda, "a variant with kernels has CUDA C"
        fibers = self._fiber_mode if self.spec.options.cpu_regions else None
        try:
            self.library_key, self._artifact, self.kernels = backend(self.backend).build(
                self._cuda, self.kernels, self.spec.options.arch, fibers)
        except CompileError as e:
            if e.source is not None or not e.diagnostics:
                raise
            raise CompileError(e.diagnostics, self._front().source) from None  # located at .tsr lines
        from tessera.runtime.cache.disk import DiskCache

        DiskCache(self.backend).put_bytes(self.spec.key(), self._meta())

    def _fiber_mode(self) -> tuple[str, tuple[KernelInfo, ...]]:
        """The CUDA C and kernels of this variant with every kernel in fiber mode (the CPU
        backend's fallback where the host compiler rejects region mode's C)."""
        fiber = compile_spec(self.spec.replace_options(cpu_regions=False), self._front)
        return fiber._cuda or "", fiber.kernels

    def _meta(self) -> bytes:
        return json.dumps({"kernels": kernels_to_json(self.kernels), "names": list(self.names),
                           "consts": self.consts, "types": self.types, "library": self.library_key,
                           "tune": {k: s.to_json() for k, s in self.spaces.items()}}, sort_keys=True).encode()


def get_variant(spec: VariantSpec, front: FrontEndOf) -> Variant:
    """The variant of `spec`: from the metadata cache (nothing parsed or transpiled), else compiled
    (and its metadata cached)."""
    from tessera.runtime.cache.disk import DiskCache

    key = spec.key()
    cache = DiskCache(spec.backend)
    raw = cache.get_bytes(key)
    if raw is not None:
        try:
            meta = json.loads(raw)
            artifact = backend(spec.backend).cached(meta["library"]) if meta["library"] else None
            return Variant(spec, front, kernels_from_json(meta["kernels"]), tuple(meta["names"]),
                           {k: tuple(v) for k, v in meta["consts"].items()}, dict(meta.get("types", {})),
                           {k: TuneSpace.from_json(v) for k, v in meta.get("tune", {}).items()},
                           meta["library"] if artifact is not None else "", None, artifact)
        except (ValueError, KeyError, TypeError):
            pass
    variant = compile_spec(spec, front)
    if variant.kernels:
        cache.put_bytes(key, variant._meta())
    return variant


def compile_spec(spec: VariantSpec, front_of: FrontEndOf) -> Variant:
    """Transpile one variant (the library is built later, by its first launch)."""
    backend(spec.backend).prefetch()  # the CPU engine builds while the compiler loads and transpiles
    from tessera.transpile.driver import compile_variant

    front = front_of()
    const_names = front.const_params()
    types = front.type_params()
    consts: dict[str, Any] = dict(spec.consts)
    if spec.kernel is not None:
        type_names = {t for t, _ in types.get(spec.kernel, {}).get("params", ())}
        unknown = set(consts) - set(const_names.get(spec.kernel, ())) - type_names
        if unknown:
            raise LaunchError(f"{spec.kernel}() has no const parameter {sorted(unknown)[0]!r}")
    result = compile_variant(front, spec.options, variants={spec.kernel: consts} if spec.kernel else None,
                             skip_unbound=True)
    spaces = {k: TuneSpace.from_json(v) for k, v in front.tune_spaces().items()}
    return Variant(spec, front_of, result.kernels, front.kernel_names, const_names, types, spaces, cuda=result.cuda)


def variant_spec(source: bytes, name: str, options: CompileOptions, kernel: str | None,
                 consts: Mapping[str, Value], aligned: bool) -> VariantSpec:
    """The spec of a launch's variant on backend `name`: the module's options with the alignment
    variant asked for and the backend's CPU mode."""
    return VariantSpec(source, name, options.replace(alignment="aligned" if aligned else "generic",
                                                     cpu_regions=backend(name).region_mode()),
                       kernel, tuple(sorted(consts.items())))


__all__ = ["FORMAT", "Variant", "VariantSpec", "compile_spec", "get_variant", "variant_spec"]
