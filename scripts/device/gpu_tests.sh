#!/usr/bin/env bash
# The GPU test suite on the GPU machine, from the repo root: configures and builds build-gpu with
# CUDA (scripts/device/build.sh, from the Debian packages in .devkit), then runs `ctest -L gpu`.
# Prepare here, then carry [".devkit", ".devcarry/pack"] with the device tool:
#   scripts/device/fetch-kit.sh             # .devkit: the build dependencies, once
#   PACK_BINARIES=0 scripts/device/pack.sh  # .devcarry/pack/shared.tar.xz: the reference material
#   GTEST_FILTER='GpuAttention.*' ...       # a subset (googletest reads it from the environment)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpu_out}
mkdir -p "$out"
[ -f .devcarry/pack/shared.tar.xz ] && tar xJf .devcarry/pack/shared.tar.xz -C .devcarry
[ -d .devcarry/shared/reference ] || { echo "no .devcarry/shared: pack it here (PACK_BINARIES=0 scripts/device/pack.sh)" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
t0=$(date +%s)
CHORUS_TARGETS=test_gpu bash scripts/device/build.sh > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "built test_gpu in $(( $(date +%s) - t0 )) s"
# shellcheck disable=SC1091
source /tmp/sysroot/env.sh
cublas=$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
set +e
ctest --test-dir build-gpu -L gpu --output-on-failure > "$out/ctest_gpu.txt" 2>&1
rc=$?
set -e
grep -E "^\[  (FAILED|PASSED) |Failure|tests passed|tests failed" "$out/ctest_gpu.txt" | head -60
exit $rc
