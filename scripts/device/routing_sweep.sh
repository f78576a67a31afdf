#!/usr/bin/env bash
# Run on the GPU machine (with .devcarry/pack carried): step time of 2..8-row batches with the
# matrix-vector kernel (default) and with cuBLAS (CHORUS_GEMV_MAX_ROWS=1), for Qwen3-TTS 0.6B and
# 1.7B and Breeze TTS 2, to choose the routing rule of cuda::linear.
set -uo pipefail
for p in .devcarry/pack/*.tar.xz; do [ -f "$p" ] && tar xJf "$p" -C .devcarry; done
cublas=$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/.devcarry/gpu/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
bin=$PWD/.devcarry/gpu/chorus
sweep() {  # sweep <name> <dir>
  for rows in 8 1; do
    echo "== $1, CHORUS_GEMV_MAX_ROWS=$rows"
    CHORUS_GEMV_MAX_ROWS=$rows timeout 120 "$bin" bench --device cuda --model "$2" --frames 20 --warmup 2 \
      --batches 2,4,8 --batch-frames 30 2>&1 | grep -E "^batch|single stream"
  done
}
"$bin" make-tiny --variant custom_voice --dims real-0.6b --seed 1 --out /tmp/q06 > /dev/null && sweep 0.6b /tmp/q06
rm -rf /tmp/q06
"$bin" make-tiny --variant custom_voice --dims real-1.7b --seed 1 --out /tmp/q17 > /dev/null && sweep 1.7b /tmp/q17
rm -rf /tmp/q17
"$bin" make-tiny --family breeze-tts --dims real --seed 1 --out /tmp/bz > /dev/null && sweep breeze /tmp/bz
echo "sweep ${SECONDS} s"
