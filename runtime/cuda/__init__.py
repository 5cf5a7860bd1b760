"""The CUDA backend: NVRTC (nvrtc), the driver API (driver: devices, modules, launches; streams:
the stream of a launch; managed: managed memory) and SASS
inspection with nvdisasm (sass). Imports only the base layer and the runtime's own modules.
"""
