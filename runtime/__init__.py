"""Runtime: NVRTC compilation, the CUDA driver launch, the CPU backend and their caches."""
