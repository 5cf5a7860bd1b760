"""The CPU backend as runtime/backends.py describes backends: the emitted C compiled by the host
C++ compiler with the prelude (build.py, library.py), kernels in region mode where they allow it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tessera.base.kernel_info import KernelInfo


class CpuBackend:
    name = "cpu"
    warmup = 0  # every launch is timed: there is no device to warm up
    device_arrays = False

    def status(self) -> tuple[bool, str]:
        return True, "requested"

    def arch(self) -> str | None:
        return None

    def region_mode(self) -> bool:
        """Yes, unless `TESSERA_CPU_REGIONS=0` asks for fiber mode everywhere."""
        return os.environ.get("TESSERA_CPU_REGIONS", "1").strip() != "0"

    def prefetch(self) -> None:
        from tessera.runtime.host.build import prefetch_engine

        prefetch_engine()

    def cached(self, key: str) -> Path | None:
        from tessera.runtime.cache.disk import DiskCache

        return DiskCache("cpu").get_file(key, ".so")

    def build(self, cuda: str, kernels: tuple[KernelInfo, ...], arch: str,
              fibers: Any) -> tuple[str, Path, tuple[KernelInfo, ...]]:
        from tessera.runtime.host.library import build_or_fall_back

        return build_or_fall_back(cuda, kernels, fibers)

    def load(self, key: str, kernels: tuple[KernelInfo, ...], artifact: Any) -> Any:
        from tessera.runtime.host.library import CpuLibrary, cached_library

        path = artifact or cached_library(key)
        return CpuLibrary(path) if path is not None else None

    def managed_buffer(self, nbytes: int) -> Any:
        """Ordinary host memory: the kernels run on the host."""
        from tessera.runtime.managed import host_buffer

        return host_buffer(nbytes)

    def prefetch_memory(self, start: int, nbytes: int, to_gpu: bool, stream: Any) -> None:
        """Nothing to move: there is one memory."""

    def advise_memory(self, start: int, nbytes: int, hint: str) -> None:
        """Nothing to advise: there is one memory."""


BACKEND = CpuBackend()
