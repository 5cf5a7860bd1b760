"""The runtime: launching compiled kernels. The launch arguments' checks and binding
(launch_args, bind_plan), other libraries' arrays (device_arrays, dlpack), the record of
unified-memory allocations (managed), whether there is a GPU (devices), and the backends:
cuda (NVRTC and the driver API), host (the CPU backend) and cache (the on-disk caches).
Imports only the base layer: never the compiler, the autotuner or the API.
"""
