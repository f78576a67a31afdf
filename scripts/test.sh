#!/usr/bin/env bash
# Runs the whole chorus test suite: installs missing Debian packages, builds (CUDA sources too when
# nvcc is present), runs every unit/golden test (not the GPU suite, label `gpu`: it needs a GPU,
# scripts/device/gpu_tests.sh), the planted-bug checks (tests/planted/run.sh), then the parser tests
# under AddressSanitizer + UndefinedBehaviorSanitizer, then each libFuzzer target for a bounded time.
# `chorus serve` is also driven from outside (tests/load: clients hanging up under load, nginx
# routing over two replicas with a drain, bench --url), and the load test runs again against chorus
# built with ASan+UBSan and with TSan.
#   CHORUS_FUZZ_SECONDS=N   seconds per fuzz target (default 30; 0 skips fuzzing)
#   CHORUS_FUZZ_SEED=N      libFuzzer seed (default 1, so a CI finding replays; 0 = random, for
#                           longer exploratory runs)
#   CHORUS_SKIP_ASAN=1      skip the ASan+UBSan build
#   CHORUS_SKIP_TSAN=1      skip the TSan build of chorus
#   CHORUS_RUN_BUDGET_MIN=N the sanitized builds of chorus (ASan+UBSan ~22 min, TSan ~18 min on 2
#                           cores, cold) run only when they and the fuzzing still fit in N minutes
#                           (default 55, under CI's hour); a skipped one says so
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
fuzz_seconds=${CHORUS_FUZZ_SECONDS:-30}
fuzz_seed=${CHORUS_FUZZ_SEED:-1}
"$(pwd)/scripts/install-deps.sh"

passed=0; failed=0
run_ctest() {  # run_ctest BUILD_DIR [ctest args...]: adds the counts to the totals
  local dir=$1; shift
  local log; log=$(mktemp)
  set +e
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" "$@" 2>&1 | tee "$log"
  set -e
  local line; line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1)
  if [ -z "$line" ]; then
    grep -q 'No tests were found' "$log" && { rm -f "$log"; return; }
    failed=$((failed + 1)); rm -f "$log"; return
  fi
  local nf total
  nf=$(sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  passed=$((passed + total - nf)); failed=$((failed + nf))
  rm -f "$log"
}
run_check() {  # run_check NAME COMMAND...: one pass or one failure, with its time
  local name=$1; shift
  local t0=$SECONDS
  echo "-- $name"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "-- $name FAILED"; fi
  echo "-- $name: $((SECONDS - t0)) s"
}

echo "== build (release)"
# ccache when installed: reruns rebuild only what changed, and the planted-bug checks' CPU-only copy
# of the tree (tests/planted/run.sh) reuses the objects both builds compile alike.
launcher=()
if command -v ccache > /dev/null; then
  export CCACHE_BASEDIR=$PWD
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
ninja -C build
echo "== tests (release)"
run_ctest build -LE gpu  # the GPU suite runs on a GPU machine: scripts/device/gpu_tests.sh

echo "== planted-bug checks (tests/planted: each named test must fail with its bug planted)"
planted_log=$(mktemp)
set +e
tests/planted/run.sh 2>&1 | tee "$planted_log"
set -e
if line=$(grep -E '^planted: [0-9]+ passed, [0-9]+ failed$' "$planted_log" | tail -1); then
  passed=$((passed + $(sed -E 's/^planted: ([0-9]+) passed.*/\1/' <<<"$line")))
  failed=$((failed + $(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$line")))
else
  failed=$((failed + 1))  # the script stopped before its totals
fi
rm -f "$planted_log"

# The Python package (python/tests), against the extension staged in build/python; Debian's
# pytest, numpy and pybind11 belong to /usr/bin/python3 (a pyenv python3 may come first on PATH).
if [ -d build/python/chorus ] && [ -d python/tests ]; then
  echo "== Python package tests"
  pylog=$(mktemp)
  set +e
  CHORUS_BUILD_DIR="$(pwd)/build" /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests 2>&1 | tee "$pylog"
  pyrc=${PIPESTATUS[0]}
  set -e
  np=$(grep -oE '[0-9]+ passed' "$pylog" | tail -1 | grep -oE '[0-9]+' || true)
  nf=$( (grep -oE '[0-9]+ (failed|errors?)' "$pylog" || true) | awk '{s += $1} END {print s + 0}')
  passed=$((passed + ${np:-0})); failed=$((failed + ${nf:-0}))
  # Exit 5: no tests collected (counts as a failure: the suite is expected to exist); other
  # non-zero exits without a failure count (a crash, a collection error) count as one failure.
  if [ "$pyrc" = 5 ] || { [ "$pyrc" != 0 ] && [ "${nf:-0}" = 0 ]; }; then failed=$((failed + 1)); fi
  rm -f "$pylog"
fi

# tests/node: the OpenAI Node SDK against chorus serve, and the playground page in headless
# Chromium (puppeteer-core; screenshots in build/playground-screenshots).
echo "== OpenAI Node SDK and the playground in Chromium against chorus serve (tests/node)"
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  node_log=$(mktemp)
  set +e
  ( cd tests/node && { npm ci --no-audit --no-fund >/dev/null 2>&1 || npm install --no-audit --no-fund >/dev/null; } &&
    CHORUS_BIN="$(pwd)/../../build/chorus" node --test --test-reporter=tap ) 2>&1 | tee "$node_log"
  set -e
  np=$(grep -E '^# pass [0-9]+' "$node_log" | tail -1 | awk '{print $3}')
  nf=$(grep -E '^# fail [0-9]+' "$node_log" | tail -1 | awk '{print $3}')
  if [ -z "$np" ]; then failed=$((failed + 1)); else passed=$((passed + np)); failed=$((failed + ${nf:-0})); fi
  rm -f "$node_log"
else
  echo "node/npm missing: counted as one failure"; failed=$((failed + 1))
fi

# Black-box checks of chorus serve (Debian's python3 and nginx; each script is one check).
echo "== chorus serve from outside (tests/load: hang-ups under load, nginx over two replicas, bench --url), bench --serve with guidance"
run_check load /usr/bin/python3 tests/load/load_test.py --chorus build/chorus
run_check routing /usr/bin/python3 tests/load/routing_test.py --chorus build/chorus
run_check bench_url /usr/bin/python3 tests/load/bench_url_test.py --chorus build/chorus
run_check bench_serve /usr/bin/python3 tests/load/bench_serve_test.py --chorus build/chorus

# Whether a stage of about $1 minutes, and the fuzzing after it, still fit in the run's budget.
budget_min=${CHORUS_RUN_BUDGET_MIN:-55}
fuzz_count=$(find tests/fuzz -maxdepth 1 -name 'fuzz_*.cpp' 2>/dev/null | wc -l)
fits() {
  local fuzz_min=$(( fuzz_seconds * fuzz_count / 60 + 7 ))  # the clang build of the targets (~6 min cold) and the runs
  [ $(( SECONDS / 60 + $1 + fuzz_min )) -le "$budget_min" ]
}

if [ "${CHORUS_SKIP_ASAN:-0}" != 1 ]; then
  echo "== tests under ASan+UBSan (parsers, loaders, tokenizer, audio input, the HTTP layer; chorus serve under load)"
  t0=$SECONDS
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_CUDA=OFF \
        -DCHORUS_SANITIZE=address,undefined "${launcher[@]}" >/dev/null
  asan_targets=$(ninja -C build-asan -t targets all 2>/dev/null | grep -oE '^test_(io|text|audio|core|http)[a-z_]*:' | tr -d ':' | sort -u || true)
  if [ -n "$asan_targets" ]; then
    # shellcheck disable=SC2086
    ninja -C build-asan $asan_targets
    run_ctest build-asan -L '^(io|text|audio|core|http)$'
  fi
  if fits 22; then
    ninja -C build-asan chorus
    # Leaks are reported when the server exits after its drain (a leak fails the check); the memory
    # bound is loose because ASan's quarantine holds freed memory.
    run_check load_asan env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
      /usr/bin/python3 tests/load/load_test.py --chorus build-asan/chorus --settle-s 60 --refusal-bound-ms 2000 --rss-slack-mib 512
  else
    echo "-- chorus serve under ASan+UBSan: skipped, the run has taken $((SECONDS / 60)) min (CHORUS_RUN_BUDGET_MIN=$budget_min)"
  fi
  echo "-- ASan+UBSan section: $((SECONDS - t0)) s"
fi

if [ "${CHORUS_SKIP_TSAN:-0}" != 1 ] && ! fits 18; then
  echo "== chorus serve under TSan: skipped, the run has taken $((SECONDS / 60)) min (CHORUS_RUN_BUDGET_MIN=$budget_min)"
elif [ "${CHORUS_SKIP_TSAN:-0}" != 1 ]; then
  # The chorus binary alone (the threads that matter are the server's), and fewer requests and
  # clients against a smaller server: TSan slows synthesis enough that 24 clients would mostly be
  # turned away.
  echo "== chorus serve under TSan (the load test)"
  t0=$SECONDS
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_CUDA=OFF -DCHORUS_TESTS=OFF \
        -DCHORUS_PYTHON=OFF -DCHORUS_SANITIZE=thread "${launcher[@]}" >/dev/null
  ninja -C build-tsan chorus
  run_check load_tsan env TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    /usr/bin/python3 tests/load/load_test.py --chorus build-tsan/chorus --requests 200 --warmup 50 --concurrency 8 \
    --max-streams 2 --max-queue 2 --settle-s 60 --refusal-bound-ms 5000 --rss-slack-mib 512
  echo "-- TSan section: $((SECONDS - t0)) s"
fi

if [ "$fuzz_seconds" -gt 0 ] && [ -d tests/fuzz ]; then
  echo "== fuzzing (${fuzz_seconds}s per target, clang + libFuzzer + ASan/UBSan)"
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHORUS_CUDA=OFF -DCHORUS_TESTS=OFF \
        -DCHORUS_FUZZ=ON -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
  fuzz_targets=$(ninja -C build-fuzz -t targets all 2>/dev/null | grep -oE '^fuzz_[a-z_0-9]+:' | tr -d ':' | sort -u || true)
  # shellcheck disable=SC2086
  [ -n "$fuzz_targets" ] && ninja -C build-fuzz $fuzz_targets
  for f in build-fuzz/tests/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    corpus=build-fuzz/corpus/$name; mkdir -p "$corpus"
    seeds=tests/fuzz/seeds/${name#fuzz_}
    echo "-- $name"
    rm -f "build-fuzz/$name-"crash-* "build-fuzz/$name-"leak-* "build-fuzz/$name-"timeout-* "build-fuzz/$name-"oom-*
    if "$f" -seed="$fuzz_seed" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=0 \
         -artifact_prefix="build-fuzz/$name-" "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) >"build-fuzz/$name.log" 2>&1; then
      passed=$((passed + 1))
    else
      tail -40 "build-fuzz/$name.log"; failed=$((failed + 1))
      # The failing input, so a finding in a CI log can be replayed without the machine it ran on.
      for a in "build-fuzz/$name-"*; do
        [ -f "$a" ] && [ "$(stat -c %s "$a")" -le 65536 ] && { echo "base64 of $a:"; base64 -w 0 "$a"; echo; }
      done
    fi
  done
fi

echo "tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
