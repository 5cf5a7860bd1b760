#!/usr/bin/env bash
# The one device command: prove Tessera on a GPU machine that reaches no package registry, in
# under 9 minutes (README, "On a GPU machine").
#
#   bash scripts/gpu_wheels.sh                  # first, where pip works: the wheels the image lacks, in .whl/
#   bash scripts/gpu_check.sh [OUT]             # on the GPU machine, with .whl/ carried beside the tree
#   bash scripts/gpu_check.sh --dry-run [OUT]   # anywhere: every step that needs no GPU (CI runs it)
#
# Steps, each under its own time limit: install the carried wheels and Tessera itself offline into
# a fresh target folder (nothing is fetched: pip --no-index); print the GPU, driver and CUDA
# versions; run every GPU test and every PyTorch test (`pytest -m "gpu or torch"`, on several
# workers); run bench/gpu_bench.py (all rows, with the PyTorch/CuPy baselines of the image) and
# bench/interop_launch.py (a launch on PyTorch tensors vs Triton's); gather the records. The dry run
# does the same install and versions, then only collects those tests and runs the benchmarks' --dry-run.
# Everything goes to OUT ($OUT where the device tool sets it, else ./gpu-check-out): the log
# (gpu_check.log), results.json (machine-readable), RESULTS-section.md (for bench/RESULTS.md), the
# tests' JUnit XML and the benchmark's JSON. Exit status 0 when every step succeeded.
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0
out="${OUT:-$PWD/gpu-check-out}"
for arg in "$@"; do
    case "$arg" in
        --dry-run) dry=1 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        -*) echo "gpu_check: unknown option $arg" >&2; exit 2 ;;
        *) out="$arg" ;;
    esac
done
if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "gpu_check: no wheels in .whl/: run scripts/gpu_wheels.sh first (where pip works) and carry .whl" >&2
    exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
rm -f "$out"/steps.tsv "$out"/gpu-tests.xml "$out"/gpu_bench.json "$out"/versions.json "$out"/results.json
exec > >(tee "$out/gpu_check.log") 2>&1

py="${PYTHON:-python3}"
target="$(mktemp -d "${TMPDIR:-/tmp}/tessera-gpu-check.XXXXXX")"
trap 'rm -rf "$target"' EXIT
failed=0

# step NAME SECONDS COMMAND...: run COMMAND under a time limit, record its exit status and time.
step() {
    local name=$1 limit=$2 start rc ms
    shift 2
    echo "=== $name (limit ${limit} s): $*"
    start=$(date +%s%N)
    timeout --kill-after=15 "$limit" "$@"
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    printf '%s\t%s\t%d.%03d\t%s\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) "$limit" >> "$out/steps.tsv"
    [ "$rc" -eq 0 ] || { failed=1; echo "=== $name: exit $rc"; }
    return "$rc"
}

# The carried wheels are CPython 3.12 manylinux builds (the image's Python); the same command
# installs them from any Python, so that the dry run proves the set complete and installable.
step install-wheels 120 "$py" -m pip install --quiet --root-user-action=ignore --no-index --no-deps --no-compile --no-cache-dir \
    --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --target "$target/site" .whl/*.whl || exit 1
# Tessera from this tree, built without build isolation (nothing to download): setuptools, wheel and
# the C++ compiler of the machine (the install also builds the CPU engine for it).
step install-tessera 240 "$py" -m pip install --quiet --root-user-action=ignore --no-index --no-deps --no-build-isolation --no-compile \
    --no-cache-dir --target "$target/tessera" . || exit 1
export PYTHONPATH="$target/tessera:$target/site${PYTHONPATH:+:$PYTHONPATH}"
export GPU_CHECK_TARGET="$target/tessera"  # gpu_report.py checks that Tessera comes from there
export PATH="$target/site/bin:$PATH"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ -z "${CUDA_HOME:-}" ] && [ -d /usr/local/cuda ]; then
    export CUDA_HOME=/usr/local/cuda  # nvdisasm and the headers of the image's toolkit
fi
# The tests, samples and benchmarks run from a copy of them without the source folders: in the tree,
# `import tessera` from its root (a test's subprocess with cwd there) would find the source folder
# tessera/, which is not the whole package (transpile/ and runtime/ are mapped into it at install).
run="$target/run"
mkdir -p "$run"
cp -r tests samples bench scripts pyproject.toml "$run"/
find "$run" -name __pycache__ -prune -exec rm -rf {} +
cd "$run"

step versions 60 "$py" scripts/gpu_report.py versions "$out" || exit 1

if [ "$dry" -eq 1 ]; then
    step gpu-tests-collect 180 "$py" -m pytest -m "gpu or torch" --collect-only -q -p no:cacheprovider
    step gpu-bench-dry-run 300 "$py" bench/gpu_bench.py --dry-run
    step interop-launch-dry-run 120 "$py" bench/interop_launch.py --dry-run
else
    echo "=== the device"
    nvidia-smi || true
    step gpu-tests 270 "$py" -m pytest -m "gpu or torch" -n 4 -q -p no:cacheprovider -o addopts="-ra" \
        --junitxml="$out/gpu-tests.xml"
    step gpu-bench 150 "$py" bench/gpu_bench.py --json "$out/gpu_bench.json"
    step interop-launch 60 "$py" bench/interop_launch.py
fi

"$py" scripts/gpu_report.py report "$out"
echo "gpu_check: records in $out (results.json, RESULTS-section.md, gpu_check.log)"
exit "$failed"
