#!/usr/bin/env bash
# Run on the GPU machine from the repo root, with .devcarry/pack carried (scripts/device/pack.sh
# makes it: the binaries and the reference material, compressed; unpacked here when present), or
# .devkit, .devcarry/gpu and .devcarry/shared carried
# (scripts/device/fetch-kit.sh and pack.sh make them here). Uses the prebuilt binaries when they
# start there, else builds with build.sh; then runs the GPU test suite and `chorus bench --device
# cuda` on real-size random checkpoints, plus comparison runs and an Nsight Compute per-kernel
# profile. Logs go to $OUT (at most a few files: the device tool returns 8).
#   STEPS="tests branchtests say bench06 ncu06 bench17 breeze breeze_variants timeline timelineserve ncubreeze
#     ncusource" (default: tests bench06 bench17)
#   split06: 0.6B single stream with each frame as two graphs (talker and code predictor timed apart)
#   trace06: 0.6B with the persistent kernel's per-phase timing (bench --stack-trace)
#   stackvariants06 / stackvariants17 / stackvariantsbreeze: this build and each packed chorus_<name>
#     side by side on the 0.6B / 1.7B / Breeze checkpoints
#   ncubreeze: Nsight Compute time per kernel of Breeze's decode (2 frames after prefill), summed
#     per kernel by scripts/device/ncu_summary.py
#   timeline: each launch's share of Breeze's decode critical path, from a CUPTI kernel trace
#     (scripts/device/kernel_trace.cpp, scripts/device/timeline.py; TIMELINE_FRAMES,
#     TIMELINE_SKIP kernels skipped first)
#   timelineserve: the same for the 0.6B serving steady state (TIMELINE_RATE req/s, the span
#     TIMELINE_SPAN="A B" seconds after the first kernel), kernels pooled by name
#   ncusource: one launch of each kernel in NCU_KERNELS (';'-separated regexes over mangled
#     names, default the single-row normed q/k/v, the small-cache attention and the bulk MLP) under
#     Nsight Compute's full set, each source page summarized by scripts/device/ncu_source.py
#     (opcode mix, stall reasons); NCU_SKIP_SOURCE launches of that kernel skipped first (default
#     400, past the prefill). The details CSV's grid size tells which launch was caught (192
#     blocks: the depth decoder's q/k/v)
#   branchtests: every other revision's GPU suite packed beside this one (test_gpu_at_<name>, from
#     save_builds.sh with SAVE_TESTS=1), with TEST_FILTER
#   TEST_FILTER=gtest filter for the GPU suite (default: all); TEST_TIMEOUT seconds (default 240)
set -uo pipefail
out=${OUT:-/tmp/gpu_out}
mkdir -p "$out"
steps=${STEPS:-tests bench06 bench17}
has() { [[ " $steps " == *" $1 "* ]]; }
for p in .devcarry/pack/*.tar.xz; do [ -f "$p" ] && tar xJf "$p" -C .devcarry; done
export CHORUS_SHARED_DIR=$PWD/.devcarry/shared
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
cublas=$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/.devcarry/gpu/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
bin=$PWD/.devcarry/gpu
test_bin=$bin/test_gpu
if ! "$test_bin" --gtest_list_tests > /dev/null 2> /tmp/prebuilt.err; then
  echo "prebuilt binaries do not start here ($(head -c 300 /tmp/prebuilt.err)); building"
  t0=$(date +%s)
  CHORUS_TARGETS="chorus test_gpu" bash scripts/device/build.sh > /tmp/build.log 2>&1 || { tail -40 /tmp/build.log; exit 1; }
  echo "built in $(( $(date +%s) - t0 )) s"
  # shellcheck disable=SC1091
  source /tmp/sysroot/env.sh
  bin=$PWD/build-gpu
  test_bin=$bin/tests/test_gpu
fi
if has tests; then
  timeout "${TEST_TIMEOUT:-240}" "$test_bin" --gtest_filter="${TEST_FILTER:-*}" > "$out/test_gpu.txt" 2>&1
  echo "test_gpu exit $?"
  grep -E "^\[  (FAILED|PASSED) |^\[gpu|Failure|Expected|Which is|actual|  gen_|frame .* codebook" "$out/test_gpu.txt" | head -60
fi
if has branchtests; then
  for t in "$bin"/test_gpu_at_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    timeout "${TEST_TIMEOUT:-240}" "$t" --gtest_filter="${TEST_FILTER:-*}" > "$out/$name.txt" 2>&1
    echo "$name exit $?"
    grep -E "^\[  (FAILED|PASSED) |^\[gpu (stack|greedy)\]|Failure" "$out/$name.txt" | head -20
  done
fi
if has say; then
  # `chorus say --device cuda` end to end on tiny models: greedy codes and audio against the CPU.
  wav_diff() { python3 -c "
import sys, wave, array
a, b = (array.array('h', wave.open(f).readframes(10**9)) for f in sys.argv[1:3])
print('samples', len(a), len(b), 'max |diff| (16-bit steps)', max((abs(x - y) for x, y in zip(a, b)), default=-1))" "$1" "$2"; }
  say_pair() {  # say_pair <name> <model> <args...>
    local name=$1 m=$2
    shift 2
    "$bin/chorus" say --model "$m" "$@" --greedy --max-frames 40 --codes-out "/tmp/$name.cpu.json" -o "/tmp/$name.cpu.wav" 2>&1 | tail -1
    "$bin/chorus" say --device cuda --model "$m" "$@" --greedy --max-frames 40 --codes-out "/tmp/$name.gpu.json" -o "$out/$name.gpu.wav" 2>&1 | tail -1
    if cmp -s "/tmp/$name.cpu.json" "/tmp/$name.gpu.json"; then echo "say $name: GPU codes = CPU codes"; else echo "say $name: CODES DIFFER"; fi
    wav_diff "/tmp/$name.cpu.wav" "$out/$name.gpu.wav"
  }
  "$bin/chorus" make-tiny --variant custom_voice --seed 3 --out /tmp/tcv > /dev/null
  say_pair qwen /tmp/tcv --speaker ryan --text "Hello there, this runs on the GPU."
  "$bin/chorus" make-tiny --family breeze-tts --seed 3 --out /tmp/tbz > /dev/null
  say_pair breeze /tmp/tbz --activations f32 --text "Hello there, this runs on the GPU."
fi
# ncu_bench <model dir> <log name> <launches> <timeout s>: Nsight Compute time of each kernel of a
# 3-frame bench (no warm-up) → $out/<log name>.
ncu_bench() {
  local ncu_bin
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  echo "== ncu $2 ($ncu_bin)"
  timeout "$4" "$ncu_bin" --clock-control none --metrics gpu__time_duration.sum --csv --launch-count "$3" \
    --log-file "$out/$2" "$bin/chorus" bench --device cuda --model "$1" --frames 3 --warmup 0 > /tmp/ncu_stdout.txt 2>&1
  echo "ncu exit $?; $(wc -l < "$out/$2") lines"; tail -3 /tmp/ncu_stdout.txt
}
make_model() {  # make_model <size> <dir>
  /usr/bin/time -f "make-tiny $1: %e s" "$bin/chorus" make-tiny --variant custom_voice --dims "real-$1" --seed 1 \
    --out "$2" > /tmp/make.txt 2>&1 || cat /tmp/make.txt
}
make_breeze() {  # Breeze TTS 2 at the released size, random weights, in /tmp/breeze
  "$bin/chorus" make-tiny --family breeze-tts --dims real --seed 1 --out /tmp/breeze > /tmp/make.txt 2>&1 || cat /tmp/make.txt
}
# The CUPTI kernel trace (scripts/device/kernel_trace.cpp, injected): CUPTI on the library path and
# trace_lib set, the library built here unless KERNEL_TRACE_LIB names a prebuilt one.
kernel_trace_setup() {
  local cupti
  cupti=$(find /usr/local/cuda/ /usr/local/cuda/extras/CUPTI/ /usr/lib -name 'libcupti.so.13' 2>/dev/null | head -1)
  export LD_LIBRARY_PATH=$(dirname "${cupti:-/x/x}"):$LD_LIBRARY_PATH
  trace_lib=${KERNEL_TRACE_LIB:-/tmp/libkernel_trace.so}
  [ -f "$trace_lib" ] || g++ -O2 -shared -fPIC -I/usr/local/cuda/include scripts/device/kernel_trace.cpp \
    -L"$(dirname "${cupti:-/x/x}")" -l:libcupti.so.13 -o "$trace_lib"
}
bench() {  # bench <model dir> <log> <args...>
  local m=$1 log=$2
  shift 2
  timeout 150 "$bin/chorus" bench --device cuda --model "$m" "$@" 2>&1 | tee -a "$log"
}
if has split06; then
  # Each frame as two graphs: the talker's and the code predictor's device times apart.
  make_model 0.6b /tmp/q06
  echo "== 0.6b, --split-frames" | tee -a "$out/bench_06.txt"
  bench /tmp/q06 "$out/bench_06.txt" --frames 250 --split-frames
  rm -rf /tmp/q06
fi
if has trace06; then
  # Where the persistent kernel's phases spend their time (grid barrier, staging, matrix work).
  make_model 0.6b /tmp/q06
  echo "== 0.6b, --stack-trace" | tee -a "$out/bench_06.txt"
  bench /tmp/q06 "$out/bench_06.txt" --frames 100 --stack-trace
  rm -rf /tmp/q06
fi
# stack_variants <name> <model dir>: this build and every other build packed beside it
# (chorus_<name>, e.g. chorus_base), side by side: two rounds.
#   SV_ROUNDS (default 2); SV_BUILDS_<name> (e.g. SV_BUILDS_breeze="chorus_base chorus"): the builds
#   for that model (default all); SV_TRACE=1 adds the persistent kernel's per-phase timing;
#   SV_FRAMES frames per run (default 100; the targets are stated at 250).
stack_variants() {
  local name=$1 m=$2 builds b pick trace=()
  builds="$(cd "$bin" && ls chorus_* 2>/dev/null | tr '\n' ' ')chorus"
  pick=SV_BUILDS_${name//./}
  builds=${!pick:-$builds}
  [ "${SV_TRACE:-0}" = 1 ] && trace=(--stack-trace)
  for round in $(seq "${SV_ROUNDS:-2}"); do
    for b in $builds; do
      echo "== $name round $round, $b" | tee -a "$out/stack_variants.txt"
      timeout 150 "$bin/$b" bench --device cuda --model "$m" --frames "${SV_FRAMES:-100}" "${trace[@]}" 2>&1 \
        | tee -a "$out/stack_variants.txt" | grep -E "^single stream|^decode_stack|^  [a-z]"
    done
  done
}
if has stackvariants06; then
  make_model 0.6b /tmp/q06
  stack_variants 0.6b /tmp/q06
  rm -rf /tmp/q06
fi
if has stackvariants17; then
  make_model 1.7b /tmp/q17
  stack_variants 1.7b /tmp/q17
  rm -rf /tmp/q17
fi
if has stackvariantsbreeze; then
  make_breeze
  stack_variants breeze /tmp/breeze
  rm -rf /tmp/breeze
fi
if has bench06 || has ncu06; then
  make_model 0.6b /tmp/q06
  if has bench06; then
    echo "== bench 0.6b" | tee -a "$out/bench_06.txt"
    bench /tmp/q06 "$out/bench_06.txt" --frames 250 --batches 1,16,64,256 --batch-frames 40
  fi
  if has ncu06 && (( SECONDS < ${DEADLINE_S:-400} )); then
    ncu_bench /tmp/q06 ncu_06.csv 1300 150
  fi
  rm -rf /tmp/q06
fi
if has bench17; then
  if (( SECONDS > ${DEADLINE_S:-460} )); then echo "skipping bench 1.7b: ${SECONDS} s used"; exit 0; fi
  make_model 1.7b /tmp/q17
  echo "== bench 1.7b" | tee -a "$out/bench_17.txt"
  bench /tmp/q17 "$out/bench_17.txt" --frames 250 --batches 1,16,64,256 --batch-frames 40
  rm -rf /tmp/q17
fi
if has breeze; then
  # Breeze TTS 2 at the released size (random weights), single stream with and without guidance.
  /usr/bin/time -f "make-tiny breeze real: %e s" "$bin/chorus" make-tiny --family breeze-tts --dims real --seed 1 \
    --out /tmp/breeze > /tmp/make.txt 2>&1 || cat /tmp/make.txt
  echo "== bench breeze" | tee -a "$out/bench_breeze.txt"
  bench /tmp/breeze "$out/bench_breeze.txt" --frames 250 --batches 1,4,16 --batch-frames 40
  echo "== bench breeze, CFG 3" | tee -a "$out/bench_breeze.txt"
  bench /tmp/breeze "$out/bench_breeze.txt" --frames 250 --cfg-scale 3
  if has breeze_variants; then
    echo "== breeze, f32 activations" | tee -a "$out/bench_breeze.txt"
    bench /tmp/breeze "$out/bench_breeze.txt" --frames 100 --activations f32
  fi
  rm -rf /tmp/breeze
fi
if has ncubreeze; then
  # Which of Breeze's per-kernel launches fall short of the bandwidth floor.
  make_breeze
  ncu_bench /tmp/breeze ncu_breeze.csv 3000 240
  # The first ~900 launches are the text encoder, prefill and frame 0.
  python3 scripts/device/ncu_summary.py "$out/ncu_breeze.csv" --skip "${NCU_SKIP:-900}" | head -30
  rm -rf /tmp/breeze
fi
if has timeline; then
  # Each launch's share of the critical path (its end minus the previous kernel's end), from a
  # CUPTI kernel trace (kernel_trace_setup); Breeze single stream, then its depth decoder and
  # backbone windows launch by launch (scripts/device/timeline.py).
  kernel_trace_setup
  make_breeze
  # Untraced first: the traced run's ms per frame against it shows what tracing costs.
  "$bin/chorus" bench --device cuda --model /tmp/breeze --frames "${TIMELINE_FRAMES:-60}" 2>&1 | grep -E "single stream" | head -1
  CUDA_INJECTION64_PATH=$(realpath "$trace_lib") KERNEL_TRACE_OUT=/tmp/trace.csv timeout 240 \
    "$bin/chorus" bench --device cuda --model /tmp/breeze --frames "${TIMELINE_FRAMES:-60}" > /tmp/trace.txt 2>&1
  grep -E "single stream|kernel_trace" /tmp/trace.txt | head -3
  python3 scripts/device/timeline.py /tmp/trace.csv --skip "${TIMELINE_SKIP:-3000}" --window 70 | tee -a "$out/timeline.txt"
  python3 scripts/device/timeline.py /tmp/trace.csv --skip "${TIMELINE_SKIP:-3000}" --top 0 \
    --window-at "attention_kernel" --window 40 | tee -a "$out/timeline.txt"
  rm -rf /tmp/breeze
fi
if has timelineserve; then
  # Where a serving step's GPU time goes in the steady state: the 0.6B under Poisson arrivals
  # (TIMELINE_RATE req/s of 5–30 s, bf16 codec), traced as above; each kernel's share of the
  # critical path over TIMELINE_SPAN seconds after the first kernel (past the load and the ramp),
  # grids pooled, and the GPU's idle time in that span.
  kernel_trace_setup
  [ -d /tmp/q06 ] || make_model 0.6b /tmp/q06
  CUDA_INJECTION64_PATH=$(realpath "$trace_lib") KERNEL_TRACE_OUT=/tmp/trace.csv timeout 240 \
    "$bin/chorus" bench --device cuda --model /tmp/q06 --serve --rate "${TIMELINE_RATE:-22}" --settle 24 --duration 4 \
    --lengths 5-30 --codec-precision bf16 --max-streams 1024 --steps "$out/timeline_steps.csv" > /tmp/trace.txt 2>&1
  tail -4 /tmp/trace.txt
  read -r from to <<< "${TIMELINE_SPAN:-23 27}"
  python3 scripts/device/timeline.py /tmp/trace.csv --from-s "$from" --to-s "$to" --by-name --top 45 --window 0 \
    | tee -a "$out/timeline_serve.txt"
fi
if has ncusource; then
  # Where a latency-bound launch's warps spend their time (e.g. whether it is instruction-bound).
  # Single-stream Breeze, bf16 activations as the bench runs it.
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  make_breeze
  i=0
  # Mangled names: the demangled ones do not match reliably (the bool arguments print as
  # true/false there, and regexes over spaces and angle brackets are fragile). ILi1ELi0ELi1ELb1ELb0ELb1E
  # is gemv1_kernel<1, 0, 1, true, false, true>: the depth decoder's normed q/k/v in bf16.
  IFS=';' read -r -a kernels <<< "${NCU_KERNELS:-gemv1_kernelILi1ELi0ELi1ELb1ELb0ELb1E;attention_small_kernel;fused_mlp_bulk_kernel}"
  for k in "${kernels[@]}"; do
    i=$((i + 1))
    timeout 150 "$ncu_bin" --clock-control none --set full --kernel-name-base mangled -k "regex:$k" \
      --launch-skip "${NCU_SKIP_SOURCE:-400}" \
      --launch-count 1 -o "/tmp/ncu_src_$i" "$bin/chorus" bench --device cuda --model /tmp/breeze --frames 4 --warmup 0 \
      > /tmp/ncu_src.txt 2>&1 || tail -3 /tmp/ncu_src.txt
    grep -E "^==(PROF|WARNING|ERROR)==" /tmp/ncu_src.txt | grep -v "Profiling \"" | head -5
    "$ncu_bin" -i "/tmp/ncu_src_$i.ncu-rep" --page source --csv --print-source sass > "/tmp/ncu_src_$i.csv" 2>&1
    "$ncu_bin" -i "/tmp/ncu_src_$i.ncu-rep" --page details --csv > "$out/ncu_details_$i.csv" 2>&1
    echo "== $k" | tee -a "$out/ncu_source.txt"
    python3 scripts/device/ncu_source.py "/tmp/ncu_src_$i.csv" | tee -a "$out/ncu_source.txt"
  done
  rm -rf /tmp/breeze
fi
echo "session ${SECONDS} s"
