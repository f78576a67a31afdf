#!/usr/bin/env bash
# Run on the GPU machine from the repo root after gpu_session.sh's unpacking (or with .devcarry/gpu
# carried): single-stream speed of several chorus builds side by side in one run, alternating
# builds within each round so that drift of the machine lands on all of them alike. Each build is
# .devcarry/gpu/chorus (this checkout) or .devcarry/gpu/chorus_<name> (scripts/device/save_builds.sh).
#   MODELS="0.6b 1.7b breeze breeze-cfg" ROUNDS=3 FRAMES=250
# Prints one line per run: model, build, ms per frame (wall, host included), first audio median.
set -uo pipefail
out=${OUT:-/tmp/gpu_out}
mkdir -p "$out"
for p in .devcarry/pack/*.tar.xz; do [ -f "$p" ] && [ ! -d .devcarry/gpu ] && tar xJf "$p" -C .devcarry; done
cublas=$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/.devcarry/gpu/lib:$(dirname "${cublas:-/usr/local/cuda/lib64/x}"):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
bin=.devcarry/gpu
builds=("$bin/chorus")
for b in "$bin"/chorus_*; do [ -x "$b" ] && builds+=("$b"); done
frames=${FRAMES:-250}
for m in ${MODELS:-0.6b 1.7b breeze breeze-cfg}; do
  args=()
  case $m in
    0.6b|1.7b) dir=/tmp/q$m; [ -d "$dir" ] || "$bin/chorus" make-tiny --variant custom_voice --dims "real-$m" --seed 1 --out "$dir" > /dev/null ;;
    breeze|breeze-cfg) dir=/tmp/breeze; [ -d "$dir" ] || "$bin/chorus" make-tiny --family breeze-tts --dims real --seed 1 --out "$dir" > /dev/null
      [ "$m" = breeze-cfg ] && args=(--cfg-scale 3) ;;
    *) echo "unknown model $m"; continue ;;
  esac
  for r in $(seq "${ROUNDS:-3}"); do
    for b in "${builds[@]}"; do
      timeout 200 "$b" bench --device cuda --model "$dir" --frames "$frames" --warmup 5 "${args[@]}" > /tmp/cmp.txt 2>&1
      ms=$(grep -oE 'single stream +[0-9]+ frames: [0-9.]+ ms' /tmp/cmp.txt | grep -oE '[0-9.]+ ms' | grep -oE '[0-9.]+')
      fa=$(grep -oE 'first audio +[0-9.]+ ms median' /tmp/cmp.txt | grep -oE '[0-9.]+')
      printf '%-11s round %s  %-16s %s ms/frame  first audio %s ms\n' "$m" "$r" "$(basename "$b")" "${ms:-FAIL}" "${fa:-?}" | tee -a "$out/compare.txt"
      [ -n "$ms" ] || tail -5 /tmp/cmp.txt
    done
  done
done
