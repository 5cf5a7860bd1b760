#!/usr/bin/env bash
# Download, on a machine with pip access, every wheel that scripts/gpu_check.sh installs on the GPU
# machine: the packages Tessera's device run needs that the device image lacks, for CPython 3.12 on
# manylinux x86_64, one version each, without their dependencies (the image has those), into .whl/
# (git-ignored). The device then installs them offline (`pip install --no-index`).
#
#   bash scripts/gpu_wheels.sh            # then carry .whl/ to the device with the working tree
#
# The image (docs: README "On a GPU machine") has PyTorch, CuPy for CUDA 13, cuda-bindings 13,
# NVRTC 13 (nvidia-cuda-nvrtc), numpy, jinja2, tqdm, mpi4py, pytest and pytest-xdist; it lacks:
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=(
    "lark==1.3.1"       # the parser generator
    "nccl4py==0.6.0"    # NCCL's bindings (tessera.dist on device arrays; NCCL itself is in the image)
    "mpich==5.0.2"      # an MPI library and mpiexec for mpi4py (tessera.dist's jobs)
)

rm -rf .whl
mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest .whl \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    "${WHEELS[@]}"

count=$(find .whl -type f -name '*.whl' | wc -l)
if [ "$count" -ne "${#WHEELS[@]}" ]; then
    echo "gpu_wheels: expected ${#WHEELS[@]} wheels, got $count" >&2
    exit 1
fi
echo "gpu_wheels: $count wheels in .whl/ ($(du -sh .whl | cut -f1)); carry .whl with the working tree"
ls -1 .whl
