#!/usr/bin/env bash
# Run on the GPU machine from the repo root, with .devcarry/pack carried (scripts/device/pack.sh
# after `ninja -C build-cuda chorus`), or .devcarry/gpu carried: the GPU codec alone at real size,
# one new frame per stream per step as the serving scheduler decodes, one decode() per stream versus
# one batched decode_batch() for all streams, at 1/8/32/64/128 streams (STREAMS to change them;
# FRAMES timed steps each; PRECISION=bf16, or f32,bf16, for the bf16 products). The codec is the real-size one make-tiny writes (random weights; the
# cost does not depend on them). Prints the report and leaves it in $OUT/codec_batch.txt.
set -euo pipefail
out=${OUT:-/tmp/gpu_out}
mkdir -p "$out"
for p in .devcarry/pack/*.tar.xz; do [ -f "$p" ] && [ ! -d .devcarry/gpu ] && tar xJf "$p" -C .devcarry; done
cublas=$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/.devcarry/gpu/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
bin=${CHORUS:-.devcarry/gpu/chorus}
dir=/tmp/q0.6b
[ -d "$dir" ] || "$bin" make-tiny --variant custom_voice --dims real-0.6b --seed 1 --out "$dir" > /dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$bin" bench --device cuda --model "$dir" --codec-streams "${STREAMS:-1,8,32,64,128}" \
  --codec-frames "${FRAMES:-16}" --codec-precision "${PRECISION:-f32}" --warmup 3 | tee "$out/codec_batch.txt"
