#!/usr/bin/env bash
# Tokenizer speed, side by side in one run: chorus vs Hugging Face tokenizers (the npm binding of the
# Rust core), both on one thread (pinned to one CPU), on the same >= 20 MB multilingual corpus and
# the same tokenizer. Also checks that both give identical ids for every line. Not a test.
#   CHORUS_BUILD=build-tok bench/tokenizer/run.sh       (default build dir: build)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
chorus="$root/${CHORUS_BUILD:-build}/chorus"
cpu=${BENCH_CPU:-0}
cd "$here"
[ -x "$chorus" ] || { echo "no chorus binary at $chorus (build it, or set CHORUS_BUILD)"; exit 1; }
[ -d node_modules/tokenizers ] || npm install --no-audit --no-fund
python3 make_inputs.py
tok=work/tokenizer
corpus=work/corpus.jsonl

# Seconds of wall clock, and of CPU (user + sys), of one command.
measure() { /usr/bin/time -f "%e %U %S" "$@" 2>&1 >/dev/null | tail -1 | awk '{print $1, $2 + $3}'; }

echo "== Hugging Face tokenizers $(node -p 'require("tokenizers/package.json").version'), node $(node --version)"
RAYON_NUM_THREADS=1 UV_THREADPOOL_SIZE=1 TOKENIZERS_PARALLELISM=false \
  taskset -c "$cpu" node hf_encode.js "$tok/tokenizer.json" "$corpus" work/hf_ids.jsonl | tee work/hf.json

echo "== chorus (CLI: load + JSON lines in, ids out; the load alone is measured and subtracted)"
taskset -c "$cpu" "$chorus" tokenize --tokenizer "$tok" --jsonl "$corpus" > work/chorus_ids.jsonl
read -r load_wall load_cpu < <(measure taskset -c "$cpu" "$chorus" tokenize --tokenizer "$tok" --text "")
read -r all_wall all_cpu < <(measure taskset -c "$cpu" "$chorus" tokenize --tokenizer "$tok" --jsonl "$corpus")
echo "load: ${load_wall} s wall, ${load_cpu} s cpu; load + encode: ${all_wall} s wall, ${all_cpu} s cpu"

python3 - "$load_wall" "$load_cpu" "$all_wall" "$all_cpu" <<'PY'
import json, sys
load_wall, load_cpu, all_wall, all_cpu = map(float, sys.argv[1:])
hf = json.load(open("work/hf.json"))
a = [json.loads(l)["ids"] for l in open("work/chorus_ids.jsonl")]
b = [json.loads(l)["ids"] for l in open("work/hf_ids.jsonl")]
diff = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
mb = hf["bytes"] / 1e6
cw, cc = all_wall - load_wall, all_cpu - load_cpu
print(f"corpus: {len(a)} lines, {mb:.1f} MB, {sum(map(len, a))} tokens; lines whose ids differ: {diff}")
print(f"| tokenizer | MB/s (wall) | MB/s (CPU time) |")
print(f"|---|---|---|")
print(f"| chorus | {mb / cw:.2f} | {mb / cc:.2f} |")
print(f"| HF tokenizers (npm) | {mb / hf['seconds']:.2f} | {mb / hf['cpu_seconds']:.2f} |")
print(f"chorus / HF: {hf['seconds'] / cw:.1f}x (wall), {hf['cpu_seconds'] / cc:.1f}x (CPU)")
sys.exit(1 if diff else 0)
PY
