#!/usr/bin/env bash
# chorus against qwentts.cpp (ggml) on this box, side by side in one run (issue 34, item 5): the
# same real-size random 0.6B CustomVoice checkpoint (chorus make-tiny) for both, each weight
# setting (chorus bf16 / int8 / int4 against the peer's BF16 / Q8_0 / Q4_K_M) at each thread
# count, the two engines alternating within every round. Reports per-frame talker, code predictor
# and codec times and the end-to-end real-time factor of each.
#
# Nothing of the peer enters this repository: its source is cloned, patched, built and converted
# under the work folder, outside the repository.
#
#   scripts/peer/qwentts_side_by_side.sh [--qwentts SRC] [--ggml SRC] [--work DIR] [--chorus BIN]
#                                        [--python PY] [--threads "1 2"] [--frames N] [--rounds N]
#     --qwentts SRC  the peer's source: a git URL or a local repository (default: its GitHub URL;
#                    env QWENTTS_SRC)
#     --ggml SRC     build it against this ggml (URL or local repository) instead of its own ggml
#                    submodule (env GGML_SRC); e.g. upstream ggml where the submodule's fork cannot
#                    be fetched
#     --work DIR     work folder (default /tmp/chorus-peer; env PEER_WORK); kept for reruns
#     --chorus BIN   the chorus binary (default build/chorus)
#     --python PY    a Python with numpy for the peer's converter (default: the first of
#                    /usr/bin/python3 and python3 that imports numpy; Debian: python3-numpy)
#     --threads, --frames (default 60), --rounds (default 2)
#
# Offline, from local clones (e.g. mirrors of both repositories):
#   nice scripts/peer/qwentts_side_by_side.sh --qwentts /path/to/qwentts.cpp.git --ggml /path/to/ggml.git
#
# The converter imports `safetensors` (read through torch) and `gguf`; the script hands it
# shim_safetensors.py and shim_gguf.py (numpy only, next to this script) under those names, from a
# folder in the work folder, so no pip, torch or network is needed.
#
# Upstream ggml works in place of the peer's fork (its submodule): qwen-tts and quantize build and
# link against ggml-org/ggml d99724f2 (the peer at a8a7716), CPU backend.
#
# The peer runs one thread per physical core (hardware threads / 2) and has no option for it: the
# script patches that function in its work copy to read QWENTTS_THREADS, so both engines run the
# same thread counts. Generation: chorus suppresses EOS (exactly --frames frames); the peer stops at
# --max-new frames or at EOS, which random weights rarely sample; both report per-frame means.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
qwentts_src=${QWENTTS_SRC:-https://github.com/ServeurpersoCom/qwentts.cpp.git}
ggml_src=${GGML_SRC:-}
work=${PEER_WORK:-/tmp/chorus-peer}
chorus=$root/build/chorus
python=""
threads="1 2"
frames=60
rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --qwentts) qwentts_src=$2; shift 2 ;;
    --ggml) ggml_src=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --chorus) chorus=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --frames) frames=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
case "$work" in "$root"|"$root"/*) echo "--work must be outside the repository" >&2; exit 2 ;; esac
[ -x "$chorus" ] || { echo "no chorus binary at $chorus (build it, or --chorus)" >&2; exit 2; }
mkdir -p "$work"
log() { echo "== $*" >&2; }

# 1. The checkpoint, in the layout the peer's converter walks (checkpoints/<official name>).
ckpt=$work/checkpoints/Qwen3-TTS-12Hz-0.6B-CustomVoice
if [ ! -f "$ckpt/model.safetensors" ]; then
  log "chorus make-tiny: real-size 0.6B CustomVoice, seed 1"
  "$chorus" make-tiny --variant custom_voice --dims real-0.6b --seed 1 --out "$ckpt" >&2
fi
ln -sfn "$ckpt/speech_tokenizer" "$work/checkpoints/Qwen3-TTS-Tokenizer-12Hz"

# 2. The peer's source, with its ggml (or the one given).
src=$work/qwentts.cpp
if [ ! -d "$src/.git" ]; then
  log "cloning $qwentts_src"
  git clone --quiet "$qwentts_src" "$src"
fi
if [ -n "$ggml_src" ]; then
  if [ ! -f "$src/ggml/CMakeLists.txt" ]; then
    log "ggml from $ggml_src (instead of the submodule)"
    rm -rf "$src/ggml"
    git clone --quiet "$ggml_src" "$src/ggml"
  fi
else
  git -C "$src" submodule update --init --recursive
fi
if ! grep -q QWENTTS_THREADS "$src/src/backend.h"; then
  log "patching the work copy: thread count from QWENTTS_THREADS"
  perl -0pi -e 's/(static int backend_cpu_n_threads\(void\) \{\n)/$1    if (const char * e = std::getenv("QWENTTS_THREADS")) { if (std::atoi(e) > 0) return std::atoi(e); }\n/' \
    "$src/src/backend.h"
  grep -q QWENTTS_THREADS "$src/src/backend.h" || { echo "could not patch backend_cpu_n_threads" >&2; exit 1; }
  grep -q '<cstdlib>' "$src/src/backend.h" || sed -i '0,/#include/s//#include <cstdlib>\n#include/' "$src/src/backend.h"
fi

# 3. Build (CPU backend, tuned for this CPU).
if [ ! -x "$src/build/qwen-tts" ] || [ ! -x "$src/build/quantize" ]; then
  log "building qwentts.cpp"
  cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF >&2
  cmake --build "$src/build" -j "$(nproc)" --target qwen-tts quantize >&2
fi

# 4. Convert with the peer's own converter, then its quantizer.
models=$work/models
if [ ! -f "$models/qwen-talker-0.6b-customvoice-F32.gguf" ] || [ ! -f "$models/qwen-tokenizer-12hz-F32.gguf" ]; then
  if [ -z "$python" ]; then
    for p in /usr/bin/python3 python3; do
      if "$p" -c 'import numpy' 2>/dev/null; then python=$p; break; fi
    done
    [ -n "$python" ] || { echo "no python3 with numpy (apt-get install python3-numpy, or --python)" >&2; exit 2; }
  fi
  shim=$work/pyshim
  mkdir -p "$shim"
  cp "$root/scripts/peer/shim_safetensors.py" "$shim/safetensors.py"
  cp "$root/scripts/peer/shim_gguf.py" "$shim/gguf.py"
  log "converting (the peer's convert.py; safetensors and gguf from $shim)"
  # A failed conversion leaves a partial file that convert.py would skip next time.
  (cd "$work" && PYTHONPATH="$shim${PYTHONPATH:+:$PYTHONPATH}" "$python" "$src/convert.py") >&2 ||
    { rm -f "$models"/qwen-*-F32.gguf; echo "conversion failed" >&2; exit 1; }
fi
declare -A peer_type=([bf16]=BF16 [int8]=Q8_0 [int4]=Q4_K_M)
for w in bf16 int8 int4; do
  out=$models/qwen-talker-0.6b-customvoice-${peer_type[$w]}.gguf
  [ -f "$out" ] || "$src/build/quantize" "$models/qwen-talker-0.6b-customvoice-F32.gguf" "$out" "${peer_type[$w]}" >&2
done

# 5. Timing: every setting and thread count, the engines alternating, --rounds rounds.
text="The quick brown fox jumps over the lazy dog, and then it runs far away into the quiet green forest."
results=$work/results.tsv
printf 'round\tengine\tweights\tthreads\ttalker_ms\tcode_predictor_ms\tcodec_ms\trtf\tpeer_total_rtf\n' > "$results"
num() { grep -oE "$1" | head -1 | grep -oE '[0-9]+(\.[0-9]+)?' | head -1; }
for r in $(seq 1 "$rounds"); do
  for t in $threads; do
    for w in bf16 int8 int4; do
      log "round $r, $t thread(s), $w: chorus (load $(cut -d' ' -f1 /proc/loadavg))"
      c=$("$chorus" bench --model "$ckpt" --frames "$frames" --warmup 2 --threads "$t" --weights "$w" --greedy)
      printf '%s\tchorus\t%s\t%s\t%s\t%s\t%s\t%s\t-\n' "$r" "$w" "$t" \
        "$(echo "$c" | grep '^per frame' | num 'talker [0-9.]+')" \
        "$(echo "$c" | grep '^per frame' | num 'code predictor [0-9.]+')" \
        "$(echo "$c" | grep '^codec' | num '[0-9.]+ ms')" "$(echo "$c" | num 'real-time factor [0-9.]+ \(one')" >> "$results"
      log "round $r, $t thread(s), $w: qwentts.cpp ${peer_type[$w]}"
      p=$(echo "$text" | QWENTTS_THREADS=$t "$src/build/qwen-tts" \
            --model "$models/qwen-talker-0.6b-customvoice-${peer_type[$w]}.gguf" \
            --codec "$models/qwen-tokenizer-12hz-F32.gguf" --speaker ryan --greedy \
            --max-new "$frames" -o "$work/peer.wav" 2>&1)
      n=$(echo "$p" | grep '\[Perf\] Total' | num '[0-9]+ frames')
      codec=$(echo "$p" | grep '\[Perf\] CodecDecode' | num '[0-9.]+ ms')
      ar=$(echo "$p" | grep '\[Perf\] Total' | num '[0-9.]+ ms/frame AR')
      # rtf as chorus bench counts it (generation per frame + codec per frame, over 80 ms of audio);
      # the peer's own figure also holds the prompt, the prefill and their first touch of the weights.
      printf '%s\tqwentts.cpp\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "${peer_type[$w]}" "$t" \
        "$(echo "$p" | grep '\[Perf\] TalkerDecode' | num '[0-9.]+ ms/frame')" \
        "$(echo "$p" | grep '\[Perf\] CodePredictor' | num '[0-9.]+ ms/frame')" \
        "$(awk -v c="$codec" -v n="$n" 'BEGIN { if (n > 0) printf "%.1f", c / n }')" \
        "$(awk -v a="$ar" -v c="$codec" -v n="$n" 'BEGIN { if (n > 0 && a != "") printf "%.2f", (a + c / n) / 80 }')" \
        "$(echo "$p" | grep '\[Perf\] Total' | num 'RTF [0-9.]+')" >> "$results"
    done
  done
done
log "results ($results; ms per frame; rtf: generation + codec per frame over 80 ms, first frame excluded)"
column -t -s $'\t' "$results"
# On a shared box other work slows some runs down; the least disturbed run of each setting is the
# one to compare (each column's minimum over the rounds).
log "best of $rounds round(s), each column's minimum"
awk -F'\t' 'NR > 1 {
    k = $2 "\t" $3 "\t" $4
    if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    for (c = 5; c <= 9; c++) if ($c != "" && $c != "-" && (!((k, c) in best) || $c + 0 < best[k, c])) best[k, c] = $c + 0
  }
  END {
    print "engine\tweights\tthreads\ttalker_ms\tcode_predictor_ms\tcodec_ms\trtf\tpeer_total_rtf"
    for (i = 1; i <= n; i++) {
      printf "%s", order[i]
      for (c = 5; c <= 9; c++) printf "\t%s", ((order[i], c) in best) ? best[order[i], c] : "-"
      print ""
    }
  }' "$results" | column -t -s $'\t'
