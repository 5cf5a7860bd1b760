"""The CUDA backend as runtime/backends.py describes backends: the emitted C compiled by NVRTC
for the device's architecture and launched through the driver API (driver.py)."""

from __future__ import annotations

from typing import Any

from tessera.base.kernel_info import KernelInfo


class CudaBackend:
    name = "cuda"
    warmup = 3  # the GPU's first launches
    device_arrays = True

    def status(self) -> tuple[bool, str]:
        from tessera.runtime.devices import cuda_status

        return cuda_status()

    def arch(self) -> str | None:
        from tessera.runtime.cuda.driver import device

        return device().arch

    def region_mode(self) -> bool:
        return False

    def prefetch(self) -> None:
        pass

    def cached(self, key: str) -> bytes | None:
        from tessera.runtime.cuda.driver import load_image

        return load_image(key)

    def build(self, cuda: str, kernels: tuple[KernelInfo, ...], arch: str,
              fibers: Any) -> tuple[str, bytes, tuple[KernelInfo, ...]]:
        from tessera.runtime.cuda.driver import compile_for_device

        key, image = compile_for_device(cuda, arch)
        return key, image, kernels

    def load(self, key: str, kernels: tuple[KernelInfo, ...], artifact: Any) -> Any:
        from tessera.runtime.cuda.driver import loaded_library

        return loaded_library(key, kernels, artifact)

    def managed_buffer(self, nbytes: int) -> Any:
        from tessera.runtime.cuda.managed import managed_buffer

        return managed_buffer(nbytes)

    def prefetch_memory(self, start: int, nbytes: int, to_gpu: bool, stream: Any) -> None:
        from tessera.runtime.cuda.managed import prefetch
        from tessera.runtime.cuda.streams import handle_of

        prefetch(start, nbytes, to_gpu, 0 if stream is None else handle_of(stream))

    def advise_memory(self, start: int, nbytes: int, hint: str) -> None:
        from tessera.runtime.cuda.managed import advise

        advise(start, nbytes, hint)


BACKEND = CudaBackend()
