"""The CUDA backend: NVRTC (nvrtc), the driver API (driver: devices, modules, launches) and SASS
inspection with nvdisasm (sass). Imports only the base layer and the runtime's own modules.
"""
