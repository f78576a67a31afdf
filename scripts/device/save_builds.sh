#!/usr/bin/env bash
# Run here, with a clean working tree: builds `chorus` at other revisions in build-cuda (incremental:
# only the files that differ are rebuilt) and saves each as build-cuda/chorus_<name>, for the
# side-by-side stackvariants steps of gpu_session.sh (pack.sh packs them). Then rebuilds the current
# checkout, so build-cuda/chorus is this revision again.
#   scripts/device/save_builds.sh base=main mine=HEAD
# SAVE_TESTS=1 also saves each revision's GPU suite as build-cuda/tests/test_gpu_at_<name> (pack.sh
# packs it; the `branchtests` step of gpu_session.sh runs every one).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { echo "usage: $0 NAME=REVISION..." >&2; exit 2; }
if ! git diff --quiet || ! git diff --cached --quiet; then
  echo "save_builds: commit or stash your changes first" >&2
  exit 1
fi
here=$(git symbolic-ref -q --short HEAD || git rev-parse HEAD)
restore() { git checkout -q "$here"; }
trap restore EXIT
# Every revision is resolved first: a relative one (HEAD~2) names a commit from here, not from the
# previous checkout.
specs=()
for spec in "$@"; do
  name=${spec%%=*} rev=${spec#*=}
  [ -n "$name" ] && [ "$name" != "$spec" ] || { echo "save_builds: expected NAME=REVISION, got '$spec'" >&2; exit 2; }
  commit=$(git rev-parse --verify -q "$rev^{commit}") || { echo "save_builds: no revision '$rev'" >&2; exit 2; }
  specs+=("$name=$commit=$rev")
done
for spec in "${specs[@]}"; do
  IFS='=' read -r name commit rev <<< "$spec"
  git checkout -q "$commit"
  if [ "${SAVE_TESTS:-0}" = 1 ]; then
    ninja -C build-cuda chorus test_gpu > /dev/null
    cp build-cuda/tests/test_gpu "build-cuda/tests/test_gpu_at_$name"
  else
    ninja -C build-cuda chorus > /dev/null
  fi
  cp build-cuda/chorus "build-cuda/chorus_$name"
  echo "build-cuda/chorus_$name = $(git rev-parse --short HEAD) ($rev)"
done
restore
trap - EXIT
ninja -C build-cuda chorus test_gpu > /dev/null
echo "build-cuda/chorus = $(git rev-parse --short HEAD) ($here)"
