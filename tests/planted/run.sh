#!/usr/bin/env bash
# Planted-bug checks: each tests/planted/<name>.patch plants one bug in src/ and names, in its
# header line "# Caught by: <test binary> <gtest filter>", the test that must catch it. A check
# passes only when that test fails on the patched tree (and passes on the unpatched one), so a test
# that stopped being able to catch its bug shows up here. A patch that no longer applies fails loudly.
#
# Works on a copy of the tree (CMakeLists.txt, src, tests, tools, bench, include, examples, python) in a temporary folder, built
# without CUDA, only the test binaries the patches name: once, then incrementally per patch (with
# ccache when installed; CCACHE_BASEDIR makes its entries independent of the folder's name).
#   tests/planted/run.sh [NAME...]        default: every patch
#   CHORUS_SHARED_DIR                     the reference folder (default: ../shared beside the repo)
#   CHORUS_PLANTED_DIR                    work folder to use and keep (default: a temporary one)
# Prints one line per check and last "planted: N passed, M failed"; exits non-zero if one failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/tests/planted
shared=${CHORUS_SHARED_DIR:-$root/../shared}
if [ -n "${CHORUS_PLANTED_DIR:-}" ]; then
  work=$CHORUS_PLANTED_DIR
  mkdir -p "$work"
else
  work=$(mktemp -d /tmp/chorus-planted.XXXXXX)
  trap 'rm -rf "$work"' EXIT
fi
tree=$work/tree
log=$work/log
mkdir -p "$log"

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for p in "$here"/*.patch; do names+=("$(basename "$p" .patch)"); done
fi

passed=0
failed=0
fail() {  # fail NAME REASON
  echo "planted $1: FAILED ($2)"
  failed=$((failed + 1))
}

# Each check's test binary and filter, from its patch header.
declare -A target filter built baseline
for n in "${names[@]}"; do
  p=$here/$n.patch
  [ -f "$p" ] || { fail "$n" "no patch $p"; continue; }
  t= f=
  read -r t f < <(sed -n 's/^# Caught by: *//p' "$p" | head -1)
  if [ -z "${t:-}" ] || [ -z "${f:-}" ]; then
    fail "$n" "its header lacks '# Caught by: <test binary> <gtest filter>'"
    continue
  fi
  target[$n]=$t
  filter[$n]=$f
done

echo "-- copying the tree to $tree and configuring it without CUDA"
rm -rf "$tree" && mkdir -p "$tree"
cp -r "$root/CMakeLists.txt" "$root/src" "$root/tests" "$root/tools" "$root/bench" "$tree/"
# Whatever else the top-level CMakeLists.txt adds (the C API headers, its example, the Python package).
for d in include examples python; do [ -d "$root/$d" ] && cp -r "$root/$d" "$tree/"; done
launcher=()
if command -v ccache > /dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$tree
fi
if ! cmake -S "$tree" -B "$tree/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHORUS_CUDA=OFF \
     -DCHORUS_SHARED_DIR="$shared" "${launcher[@]}" > "$log/configure.txt" 2>&1; then
  tail -20 "$log/configure.txt"
  fail all "the copy does not configure"
  echo "planted: $passed passed, $failed failed"
  exit 1
fi

# run_filter TARGET FILTER OUT: runs one test binary on one filter; 0 passed, 1 failed (a failed
# expectation or a crash inside a test), 2 no test started.
run_filter() {
  "$tree/build/tests/$1" --gtest_filter="$2" --gtest_color=no > "$3" 2>&1
  local rc=$?
  grep -q '^\[ RUN      \]' "$3" || return 2
  [ $rc -eq 0 ] && ! grep -q '^\[  FAILED  \]' "$3" && return 0
  return 1
}

# The unpatched tree first: each named test must pass without its bug, or the check proves nothing.
for n in "${!target[@]}"; do
  t=${target[$n]}
  if [ -z "${built[$t]:-}" ]; then
    echo "-- building $t"
    if ! ninja -C "$tree/build" "$t" > "$log/build_$t.txt" 2>&1; then
      tail -30 "$log/build_$t.txt"
      built[$t]=no
    else
      built[$t]=yes
    fi
  fi
  if [ "${built[$t]}" != yes ]; then
    baseline[$n]="the unpatched tree does not build $t"
    continue
  fi
  run_filter "$t" "${filter[$n]}" "$log/$n.unpatched.txt"
  case $? in
    0) baseline[$n]=ok ;;
    1) baseline[$n]="${filter[$n]} fails without the bug" ;;
    *) baseline[$n]="${filter[$n]} matches no test of $t" ;;
  esac
done

for n in "${names[@]}"; do
  [ -n "${target[$n]:-}" ] || continue
  p=$here/$n.patch
  t=${target[$n]}
  if [ "${baseline[$n]}" != ok ]; then
    fail "$n" "${baseline[$n]}"
    continue
  fi
  if ! patch -p1 -d "$tree" --dry-run --silent --forward < "$p" > "$log/$n.patch.txt" 2>&1; then
    cat "$log/$n.patch.txt"
    fail "$n" "THE PATCH NO LONGER APPLIES to src/: update tests/planted/$n.patch to plant the same bug"
    continue
  fi
  patch -p1 -d "$tree" --silent --forward < "$p"
  if ! ninja -C "$tree/build" "$t" > "$log/$n.build.txt" 2>&1; then
    tail -30 "$log/$n.build.txt"
    fail "$n" "the patched tree does not build $t"
  else
    run_filter "$t" "${filter[$n]}" "$log/$n.patched.txt"
    case $? in
      1) echo "planted $n: ok (${filter[$n]} fails with the bug)"; passed=$((passed + 1)) ;;
      0) fail "$n" "${filter[$n]} still passes with the bug planted: it no longer catches it" ;;
      *) fail "$n" "${filter[$n]} started no test on the patched tree: $(tail -3 "$log/$n.patched.txt" | tr '\n' ' ')" ;;
    esac
  fi
  patch -p1 -d "$tree" -R --silent < "$p"
done

echo "planted: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
