#!/usr/bin/env bash
# Run on the GPU machine from the repo root with .devcarry/pack carried (scripts/device/pack.sh) and
# scripts/device/ws_latency.py in the tree: the serving measurements of docs/PERFORMANCE.md on a
# real-size 0.6B checkpoint. Every step writes its whole output to $OUT/<step>.txt first and prints
# a summary from the file afterwards, so a step cut off by the device's time limit still leaves its
# numbers behind.
#   STEPS="weights codecbatch serve ws" (default: all four)
#   weights:    single stream, ms per frame and first audio, bf16 / int8 / fp8 (and chorus_before
#               when packed, side by side)
#   codecbatch: the GPU codec, per-stream calls against one batched pass, 1..128 streams
#   serve:      `bench --serve` at RATES (default "10 20") for each of SERVE_WEIGHTS (default bf16;
#               e.g. "bf16 int8 fp8"), 10 s of Poisson arrivals, 2 solo replays
#   ws:         `chorus serve` + ws_latency.py alone, then under an HTTP load of WS_RATE req/s of
#               20–30 s utterances (default 16: about 200 streams at once)
set -uo pipefail
out=${OUT:-/tmp/gpu_out}
mkdir -p "$out"
steps=${STEPS:-weights codecbatch serve ws}
has() { [[ " $steps " == *" $1 "* ]]; }
for p in .devcarry/pack/*.tar.xz; do [ -f "$p" ] && [ ! -d .devcarry/gpu ] && tar xJf "$p" -C .devcarry; done
cublas=$(find /usr/local /usr/lib /opt -name 'libcublas.so.13' 2>/dev/null | head -1)
cublas_dir=$(dirname "${cublas:-/usr/local/cuda/lib64/x}")
export LD_LIBRARY_PATH=$PWD/.devcarry/gpu/lib:$cublas_dir:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=$PWD/.devcarry/gpu
model=/tmp/q06
[ -d "$model" ] || "$B/chorus" make-tiny --variant custom_voice --dims real-0.6b --seed 1 --out "$model" > /dev/null
voice=$(python3 -c "import json;print(sorted(json.load(open('$model/config.json'))['talker_config']['spk_id'])[0])")

# Polls with Python: the GPU machine's curl breaks under the packed LD_LIBRARY_PATH.
wait_ready() {
  python3 - "$1" <<'PY'
import sys, time, urllib.request
for _ in range(240):
    try:
        urllib.request.urlopen(sys.argv[1] + "/ready", timeout=1)
        sys.exit(0)
    except Exception:
        time.sleep(0.5)
sys.exit(1)
PY
}
active_streams() {
  python3 -c "import urllib.request
t = urllib.request.urlopen('http://127.0.0.1:8000/metrics').read().decode()
print(' '.join(l for l in t.splitlines() if l.startswith('chorus_active_streams')))"
}

if has weights; then
  f=$out/weights.txt
  : > "$f"
  for round in 1 2; do
    for w in bf16 int8 fp8 before; do
      if [ "$w" = before ]; then
        [ -x "$B/chorus_before" ] || continue
        cmd=("$B/chorus_before" bench)
      else
        cmd=("$B/chorus" bench --weights "$w")
      fi
      echo "## round $round: $w" >> "$f"
      timeout 90 "${cmd[@]}" --device cuda --model "$model" --frames 250 >> "$f" 2>&1
    done
  done
  grep -E "^## |^single stream|^first audio|^weights" "$f" | cut -c1-140
fi
if has codecbatch; then
  timeout 120 "$B/chorus" bench --device cuda --model "$model" --codec-streams 1,8,32,64,128 --codec-frames 16 \
    --warmup 3 > "$out/codecbatch.txt" 2>&1
  grep -E "streams|memory" "$out/codecbatch.txt"
fi
if has serve; then
  for w in ${SERVE_WEIGHTS:-bf16}; do
    for r in ${RATES:-10 20}; do
      echo "## $w, $r requests/s"
      timeout 120 "$B/chorus" bench --device cuda --model "$model" --weights "$w" --serve --rate "$r" --duration 10 \
        --lengths 5-30 --verify 2 > "$out/serve_${w}_$r.txt" 2>&1
      tail -2 "$out/serve_${w}_$r.txt"
    done
  done
fi
if has ws; then
  "$B/chorus" serve --model "$model" --device cuda --port 8000 --max-streams 256 --max-queue 4096 > "$out/serve.log" 2>&1 &
  server=$!
  if wait_ready http://127.0.0.1:8000; then
    url=ws://127.0.0.1:8000/v1/audio/speech/stream
    timeout 60 python3 -u scripts/device/ws_latency.py --url "$url" --model q06 --voice "$voice" --runs 3 --label alone \
      > "$out/ws.txt" 2>&1
    timeout 90 "$B/chorus" bench --model q06 --serve --url http://127.0.0.1:8000 --voice "$voice" --rate "${WS_RATE:-16}" \
      --duration 30 --lengths 20-30 > "$out/ws_load.txt" 2>&1 &
    load=$!
    sleep 14
    active_streams >> "$out/ws.txt"
    timeout 60 python3 -u scripts/device/ws_latency.py --url "$url" --model q06 --voice "$voice" --runs 3 --label under-load \
      >> "$out/ws.txt" 2>&1
    active_streams >> "$out/ws.txt"
    wait "$load"
    cat "$out/ws.txt"
    tail -2 "$out/ws_load.txt"
  else
    echo "chorus serve did not become ready"; tail -5 "$out/serve.log"
  fi
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
fi
