"""A compiled variant of a module (source, options, const values, alignment): its kernels'
metadata and CUDA C, cached on disk as JSON next to the compiled library, which is built on the
first launch that needs it (tessera/api.py's modules and kernels hold them)."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from tessera.base.errors import CompileError, LaunchError, TesseraError
from tessera.base.kernel_info import KernelInfo, kernels_from_json, kernels_to_json
from tessera.base.tune_space import TuneSpace

if TYPE_CHECKING:
    from tessera.api import Module

FORMAT = "1"


class Variant:
    """The compiled form of one set of const values (and alignment): kernel metadata, plus the
    library, built on the first launch that needs it (a launch that picks the aligned variant
    never builds the generic one)."""

    def __init__(self, kernels: tuple[KernelInfo, ...], names: tuple[str, ...], consts: dict[str, tuple[str, ...]],
                 library_key: str, cuda: str | None, backend: str = "cpu", artifact: Any = None,
                 rebuild: Any = None, types: dict[str, dict[str, list]] | None = None,
                 spaces: dict[str, Any] | None = None) -> None:
        self.backend = backend
        self.kernels = kernels
        self.names = names
        self.consts = consts
        self.types = types or {}
        self.spaces = spaces or {}  # kernel -> TuneSpace
        self.library_key = library_key
        self._cuda = cuda
        self._artifact = artifact  # the verified library path (CPU) or image (CUDA), when already at hand
        self._rebuild = rebuild    # () -> (CUDA C, arch, cache, metadata key, front end): to build the library
        self._lib: Any = None  # CpuLibrary or CudaLibrary, once loaded
        self._fibers: Any = None  # () -> (CUDA C, kernels) of this variant in fiber mode (CPU backend)

    def kernel(self, name: str) -> KernelInfo:
        for k in self.kernels:
            if k.name == name:
                return k
        raise LaunchError(f"kernel '{name}' needs values for its const parameters "
                          f"({', '.join(self.consts.get(name, ()))}): pass them as keyword arguments")

    def library(self):
        if self._lib is not None:
            return self._lib
        if not self.library_key:
            self._build()
        if self.backend == "cuda":
            from tessera.runtime.cuda.driver import loaded_library

            self._lib = loaded_library(self.library_key, self.kernels, self._artifact)
            return self._lib
        from tessera.runtime.host.library import CpuLibrary, cached_library

        path = self._artifact or cached_library(self.library_key)
        if path is None:
            self._build()
            path = self._artifact
        self._lib = CpuLibrary(path)
        return self._lib

    def _build(self) -> None:
        """Compile the library (NVRTC or the host compiler) and record it in the metadata cache."""
        if self._rebuild is None:
            raise TesseraError("internal error: a kernel library cannot be built; retry")
        cuda, arch, cache, key, front = self._rebuild()
        assert cuda, "a variant with kernels has CUDA C"
        if self.backend == "cuda":
            from tessera.runtime.cuda.driver import compile_for_device

            self.library_key, self._artifact = compile_for_device(cuda, arch)
        else:
            from tessera.runtime.host.library import build_or_fall_back

            try:
                self.library_key, self._artifact, self.kernels = build_or_fall_back(cuda, self.kernels, self._fibers)
            except CompileError as e:
                if e.source is not None or not e.diagnostics or front is None:
                    raise
                raise CompileError(e.diagnostics, front.source) from None  # located at .tsr lines
        cache.put_bytes(key, self._meta())

    def _meta(self) -> bytes:
        return json.dumps({"kernels": kernels_to_json(self.kernels), "names": list(self.names),
                           "consts": self.consts, "types": self.types, "library": self.library_key,
                           "tune": {k: s.to_json() for k, s in self.spaces.items()}}, sort_keys=True).encode()

    @staticmethod
    def get(mod: Module, kernel: str | None, consts: dict[str, Any], aligned: bool = False) -> Variant:
        from tessera.runtime.cache.disk import DiskCache, cache_key
        from tessera.runtime.cache.fingerprint import fingerprint

        # The fingerprint covers the compiler and the CPU backend's runtime sources (runtime/host).
        key = cache_key("front", FORMAT, fingerprint(), mod.backend, mod._source, mod.arch, str(mod.debug),
                        str(mod.check_bounds), str(mod.restrict), kernel or "", json.dumps(sorted(consts.items())),
                        "aligned" if aligned else "generic", str(cpu_regions(mod.backend)))
        cache = DiskCache(mod.backend)
        raw = cache.get_bytes(key)
        variant: Variant | None = None
        if raw is not None:
            try:
                meta = json.loads(raw)
                artifact = None
                if meta["library"]:
                    artifact = (cache.get_file(meta["library"], ".so") if mod.backend == "cpu"
                                else _cuda_image(meta["library"]))
                variant = Variant(kernels_from_json(meta["kernels"]), tuple(meta["names"]),
                                   {k: tuple(v) for k, v in meta["consts"].items()},
                                   meta["library"] if artifact is not None else "", None, mod.backend, artifact,
                                   types=dict(meta.get("types", {})),
                                   spaces={k: TuneSpace.from_json(v) for k, v in meta.get("tune", {}).items()})
            except (ValueError, KeyError, TypeError):
                variant = None
        if variant is None:
            variant = Variant._compile(mod, kernel, consts, aligned)
            if variant.kernels:
                cache.put_bytes(key, variant._meta())

        def rebuild() -> tuple[str, str, Any, str, Any]:
            if variant._cuda is None:  # metadata from the cache: transpile again to build
                variant._cuda = Variant._compile(mod, kernel, consts, aligned)._cuda
            return variant._cuda or "", mod.arch, cache, key, mod._front

        variant._rebuild = rebuild
        if cpu_regions(mod.backend):
            def fibers() -> tuple[str, tuple[KernelInfo, ...]]:
                fiber = Variant._compile(mod, kernel, consts, aligned, regions=False)
                return fiber._cuda or "", fiber.kernels
            variant._fibers = fibers
        return variant

    @staticmethod
    def _compile(mod: Module, kernel: str | None, consts: dict[str, Any], aligned: bool,
                 regions: bool | None = None) -> Variant:
        if mod.backend == "cpu":  # the engine object builds while the compiler loads and transpiles (empty cache)
            from tessera.runtime.host.build import prefetch_engine

            prefetch_engine()
        from tessera.transpile.driver import compile_variant

        front = mod._front_end()
        names = front.kernel_names
        const_names = front.const_params()
        types = front.type_params()
        if kernel is not None:
            type_names = {t for t, _ in types.get(kernel, {}).get("params", ())}
            unknown = set(consts) - set(const_names.get(kernel, ())) - type_names
            if unknown:
                raise LaunchError(f"{kernel}() has no const parameter {sorted(unknown)[0]!r}")
        result = compile_variant(front, arch=mod.arch, debug=mod.debug, check_bounds=mod.check_bounds,
                                 variants={kernel: consts} if kernel else None, skip_unbound=True,
                                 restrict=mod.restrict, alignment="aligned" if aligned else "generic",
                                 cpu_regions=cpu_regions(mod.backend) if regions is None else regions)
        spaces = {k: TuneSpace.from_json(v) for k, v in front.tune_spaces().items()}
        return Variant(result.kernels, names, const_names, "", result.cuda, mod.backend, types=types, spaces=spaces)


def cpu_regions(backend: str) -> bool:
    """Whether CPU builds print kernels that allow it in region mode (transpile/cpu/regions.py):
    yes unless `TESSERA_CPU_REGIONS=0` asks for fiber mode everywhere."""
    return backend == "cpu" and os.environ.get("TESSERA_CPU_REGIONS", "1").strip() != "0"


def _cuda_image(key: str) -> bytes | None:
    from tessera.runtime.cuda.driver import load_image

    return load_image(key)


__all__ = ["FORMAT", "Variant", "cpu_regions"]
