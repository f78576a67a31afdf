#!/usr/bin/env bash
# Run on the GPU machine from the repo root, with .devkit, .devcarry/gpu and .devcarry/shared carried
# (scripts/device/fetch-kit.sh and pack.sh make them here). Uses the prebuilt binaries when they
# start there, else builds with build.sh; then runs the GPU test suite and `chorus bench --device
# cuda` on real-size random checkpoints. Everything is logged under $OUT.
#   STEPS="tests bench06 bench17" (default: all three)   BENCH_ARGS: extra bench options
set -uo pipefail
out=${OUT:-/tmp/gpu_out}
mkdir -p "$out"
steps=${STEPS:-tests bench06 bench17}
export CHORUS_SHARED_DIR=$PWD/.devcarry/shared
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
cublas=$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/.devcarry/gpu/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
bin=$PWD/.devcarry/gpu
test_bin=$bin/test_gpu
if ! "$test_bin" --gtest_list_tests > /dev/null 2> "$out/prebuilt.err"; then
  echo "prebuilt binaries do not start here ($(head -c 300 "$out/prebuilt.err")); building"
  t0=$(date +%s)
  CHORUS_TARGETS="chorus test_gpu" bash scripts/device/build.sh > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
  echo "built in $(( $(date +%s) - t0 )) s"
  # shellcheck disable=SC1091
  source /tmp/sysroot/env.sh
  bin=$PWD/build-gpu
  test_bin=$bin/tests/test_gpu
fi
if [[ " $steps " == *" tests "* ]]; then
  timeout 240 "$test_bin" > "$out/test_gpu.txt" 2>&1
  echo "test_gpu exit $?"
  grep -E "^\[  (FAILED|PASSED) |^\[gpu|Failure|error|Expected|Which is|actual|  gen_|frame .* codebook" "$out/test_gpu.txt" | head -80
fi
for size in 0.6b 1.7b; do
  tag=${size/./}
  [[ " $steps " == *" bench${tag:0:2} "* ]] || continue
  /usr/bin/time -f "make-tiny %e s" "$bin/chorus" make-tiny --variant custom_voice --dims "real-$size" --seed 1 \
    --out "/tmp/q$tag" > "$out/make_$tag.txt" 2>&1 || { cat "$out/make_$tag.txt"; continue; }
  tail -1 "$out/make_$tag.txt"
  echo "== bench $size"
  timeout 200 "$bin/chorus" bench --device cuda --model "/tmp/q$tag" --frames 250 --batches 1,16,64,256 \
    --batch-frames 40 ${BENCH_ARGS:-} 2>&1 | tee "$out/bench_$tag.txt"
  rm -rf "/tmp/q$tag"
done
