#!/usr/bin/env bash
# Installs every Debian 12 package chorus needs to build, test and fuzz. Idempotent. nginx is only
# the routing test's proxy (tests/load/routing_test.py runs it from a temporary prefix as the calling
# user); the packaged service is never used.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
PKGS=(
  cmake ninja-build g++ pkg-config ccache patch
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev
  libonig-dev libutf8proc-dev libsentencepiece-dev sentencepiece
  libsndfile1-dev libsoxr-dev libkissfft-dev libcurl4-openssl-dev libssl-dev
  clang libclang-rt-14-dev
  python3-dev python3-pybind11 pybind11-dev python3-numpy python3-pytest python3-setuptools python3-pip python3-venv
  libboost1.81-dev prometheus-cpp-dev libmp3lame-dev libopus-dev libopusenc-dev libsoundtouch-dev curl
  chromium  # the playground's browser test (tests/node/playground.test.mjs, headless via puppeteer-core)
  nginx
)
# Node (the OpenAI SDK tests) comes from Debian unless a newer nodejs (with its own npm) is there.
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "chorus: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
