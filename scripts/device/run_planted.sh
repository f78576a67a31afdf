#!/usr/bin/env bash
# Run on the GPU machine after gpu_session.sh: the GPU suite built with planted bugs (pack a
# test_gpu_planted next to test_gpu), filtered to the tests that must catch them. Failures expected.
#   PLANTED_FILTER=gtest filter (default: all); PLANTED_BINS=the suites to run (default: test_gpu_planted)
set -uo pipefail
out=${OUT:-/tmp/gpu_out}
[ -d .devcarry/shared ] || for p in .devcarry/pack/*.tar.xz; do tar xJf "$p" -C .devcarry; done
export CHORUS_SHARED_DIR=$PWD/.devcarry/shared
cublas=$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/.devcarry/gpu/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
for b in ${PLANTED_BINS:-test_gpu_planted}; do
  timeout 240 ".devcarry/gpu/$b" --gtest_filter="${PLANTED_FILTER:-*}" > "$out/$b.txt" 2>&1
  echo "$b exit $?"
  grep -E "^\[  (FAILED|PASSED) |^\[ *(gpu|breeze|codec)|Failure|differ" "$out/$b.txt" | head -30
done
